"""Files the program writes (``--out``, ``--trace``, calibration and network files): safely, atomically.

Data goes to a temporary file in the target's folder, is flushed to disk, and is then renamed
over the target, so a crash or a full disk leaves the old file or the new one, never half of
one. A rename replaces whatever the name points at: a named pipe, a device node (as root,
``/dev/null`` itself) or a socket would become a regular file, and a symbolic link would be
replaced rather than its target written. So only regular files and new paths are written;
symbolic links are refused, not followed (the message names the link's target, so writing
there is one edit away). A path ending in ``/`` names a folder and is never written as a file.
"""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path

from .errors import InputError

_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def check_output_file(spec: str, option: str | None = None, example: str = "result.json") -> Path:
    """``spec`` as a Path that can be written: a regular file or a new name in an existing, writable folder."""
    if not spec or not spec.strip():
        raise InputError("is empty", field=option, fix=f"Give a file name such as {example}")
    path = Path(spec)
    if spec.endswith(("/", os.sep, "/.", "/..")) or spec in (".", ".."):
        if path.is_dir():
            raise InputError("is a directory", source=spec, field=option, fix=f"Give a file name, e.g. {path / example}")
        raise InputError("ends with a slash, so it names a folder, and that folder does not exist", source=spec,
                         field=option, fix=f"Give a file name, e.g. {path / example} (create the folder first)")
    _check_target(path, spec, option, example)
    parent = path.parent
    if not parent.exists():
        raise InputError(f"the folder {str(parent)!r} does not exist", source=spec, field=option,
                         fix="Create it first, or give a path in an existing folder")
    writable_folder(parent, spec, option)
    return path


def check_output_dir(spec: str, option: str | None) -> Path:
    """``spec`` as a folder that exists or can be created (its nearest existing ancestor is a writable folder)."""
    if not spec or not spec.strip():
        raise InputError("is empty", field=option, fix="Give a folder, e.g. results/")
    path = Path(spec)
    try:
        if path.exists() and not path.is_dir():
            raise InputError("is a file, not a folder", source=spec, field=option,
                             fix="Give a folder (it is created if missing)")
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
    except OSError as e:  # a name too long, a loop of links
        raise InputError(f"cannot be used as a folder ({e.strerror})", source=spec, field=option,
                         fix="Give another folder") from None
    writable_folder(existing, spec, option)
    return path


def check_report_file(spec: str, option: str | None, out_dir: str | Path, example: str = "report.md") -> Path:
    """A file to write after the work: its folder exists, or is ``out_dir`` or a folder above it (which the
    command creates first). Checked before the work, so a long run never ends on a path it cannot write."""
    path = Path(spec)
    parent, out = path.parent, Path(out_dir)
    if spec and spec.strip() and not parent.exists() and (parent == out or parent in out.parents):
        if not spec.endswith(("/", os.sep)):
            check_output_dir(str(parent), option)
            return path
    return check_output_file(spec, option, example)


def read_report(path: Path, option: str = "--markdown") -> str:
    """The text of a report a command rewrites in part ('' when it does not exist yet), read before the work:
    a regular UTF-8 file of at most 16 MB."""
    st = _check_target(path, str(path), option, "report.md")
    if st is None:
        return ""
    if st.st_size > 16 * 2**20:
        raise InputError(f"is {st.st_size:,} bytes, not a report this command wrote", source=str(path), field=option,
                         fix="Give a new file name, or the markdown file the command wrote before")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"is not UTF-8 text (byte {e.start})", source=str(path), field=option,
                         fix="Give a new file name, or the markdown file the command wrote before") from None
    except OSError as e:
        raise InputError(f"cannot be read ({e.strerror})", source=str(path), field=option,
                         fix="Give a file you can read, or a new file name") from None


def writable_folder(folder: Path, spec: str, option: str | None) -> None:
    if not folder.is_dir():
        raise InputError(f"{str(folder)!r} is not a folder", source=spec, field=option,
                         fix="Give a path in an existing folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"the folder {str(folder)!r} is not writable", source=spec, field=option,
                         fix="Give a path in a folder you can write to")


def _check_target(path: Path, spec: str, option: str | None, example: str = "result.json") -> os.stat_result | None:
    """The target's lstat (None when it does not exist yet); anything but a regular file is refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno == errno.ENAMETOOLONG:
            raise
        return None  # e.g. a folder on the way is missing: the folder checks say so
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        raise InputError(f"is a symbolic link (to {target!r}); links are not followed, since replacing the file "
                         "would replace the link", source=spec, field=option,
                         fix="Give the link's target itself, or a path that is not a link")
    if stat.S_ISDIR(st.st_mode):
        raise InputError("is a directory", source=spec, field=option, fix=f"Give a file name, e.g. {path / example}")
    for test, kind in _KINDS:
        if test(st.st_mode):
            raise InputError(f"is {kind}, not a regular file; writing would replace it", source=spec, field=option,
                             fix="Give the path of a regular file or a new file")
    return st


def write_output(path: str | os.PathLike, data: bytes, option: str | None = None) -> None:
    """Write ``data`` to ``path`` atomically (temporary file + rename in the same folder).

    The target is checked again just before the rename (it may have changed since
    :func:`check_output_file`); an existing file keeps its permission bits. Any OSError,
    a full disk included, becomes an InputError and leaves nothing behind.
    """
    path = Path(path)
    spec = str(path)
    existing = _check_target(path, spec, option)
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise _write_error(e, spec, option) from None
    try:
        if existing is not None:
            mode = stat.S_IMODE(existing.st_mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())  # a full disk surfaces here (delayed allocation), before the rename
        _check_target(path, spec, option)
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise _write_error(e, spec, option) from None
        raise
    _sync_folder(folder)


def _write_error(e: OSError, spec: str, option: str | None) -> InputError:
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return InputError(f"cannot be written: the disk is full ({e.strerror}); nothing was written and an existing "
                          "file is unchanged", source=spec, field=option,
                          fix="Free some space, or write to another disk")
    return InputError(f"cannot be written ({e.strerror or e})", source=spec, field=option,
                      fix="Check that the folder exists and is writable, and the free space")


def _sync_folder(folder: Path) -> None:
    """Make the rename itself durable; not every file system can sync a folder, which is harmless."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
