"""Reading and writing JSON files with user-facing errors and no half-written files.

Only regular files are read, and never more than :data:`MAX_FILE_BYTES`: a FIFO would block forever and
``/dev/zero`` never ends, and ``/proc`` files report a size of 0, so the limit is enforced while reading.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

from .errors import InputError

MAX_FILE_BYTES = 512 * 1024 * 1024
MAX_NAME_BYTES = 255  # one path component (NAME_MAX on Linux, macOS and Windows' NTFS)
_CHUNK = 1 << 20

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


def check_path_name(spec: str | os.PathLike, field: str | None = None) -> None:
    """Refuse a path with a component too long for any file system, before the OS fails on it."""
    if "\x00" in os.fspath(spec):
        raise InputError("contains a NUL character, which no path can hold", source=os.fspath(spec),
                         field=field, fix="Check the path")
    for part in Path(spec).parts:
        size = len(os.fsencode(part))
        if size > MAX_NAME_BYTES:
            raise InputError(f"a file name in the path is {size} bytes long, more than the limit of "
                             f"{MAX_NAME_BYTES} for one file name", source=str(spec), field=field,
                             fix="Use a shorter file name")


def path_exists(spec: str | os.PathLike, field: str | None = None) -> bool:
    """Like ``Path.exists`` (any kind of file), but a bad path name is an InputError, not an OSError."""
    check_path_name(spec, field)
    try:
        os.stat(spec)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as e:
        if e.errno in (errno.ENAMETOOLONG, errno.ELOOP):
            raise InputError(f"cannot be used as a path ({e.strerror})", source=str(spec), field=field,
                             fix="Check the path") from None
        return True  # e.g. no permission: reading it says so
    return True


def read_bytes(path: str | Path, limit: int | None = None) -> bytes:
    """A regular file's bytes, at most ``limit`` (default :data:`MAX_FILE_BYTES`), else an InputError."""
    limit = MAX_FILE_BYTES if limit is None else limit
    source = str(path)
    check_path_name(path)
    try:
        # O_NONBLOCK: opening a FIFO does not wait for a writer (and is a no-op for regular files)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputError("no such file", source=source, fix="Check the path") from None
    except IsADirectoryError:
        raise InputError("is a directory, not a JSON file", source=source) from None
    except OSError as e:
        try:  # a socket cannot be opened at all (ENXIO): say what it is
            _require_regular(os.stat(path).st_mode, source)
        except OSError:
            pass
        raise InputError(f"cannot be read ({e.strerror})", source=source) from None
    try:
        _require_regular(os.fstat(fd).st_mode, source)
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise InputError(f"is larger than {_size(limit)}", source=source, fix="Give a smaller file")
        return b"".join(chunks)
    except InputError:
        raise
    except OSError as e:
        raise InputError(f"cannot be read ({e.strerror})", source=source) from None
    finally:
        os.close(fd)


def _require_regular(mode: int, source: str) -> None:
    if not stat.S_ISREG(mode):
        what = next((name for test, name in _KINDS if test(mode)), "not a file")
        raise InputError(f"is {what}, not a regular file", source=source, fix="Give a JSON file")


def _size(limit: int) -> str:
    return f"{limit // 2**20} MiB" if limit >= 2**20 and limit % 2**20 == 0 else f"{limit:,} bytes"


def read_json(path: str | Path) -> Any:
    return parse_json(read_bytes(path), str(path))


def parse_json(text: str | bytes, source: str) -> Any:
    # Text decoded from UTF-8 holds no surrogates; a str may (the caller's), and so may \\uD800 escapes.
    maybe_surrogates = not isinstance(text, bytes) and not _encodes(text)
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError("is not UTF-8 text", source=source, fix="Save the file as UTF-8 JSON") from None
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise InputError(f"is not valid JSON: {e.msg} at line {e.lineno}, column {e.colno}", source=source,
                         fix="Fix the JSON syntax") from None
    except InputError as e:
        e.source = source
        raise
    except RecursionError:
        raise InputError("is nested too deeply to be a network, device graph or placement",
                         source=source) from None
    except ValueError as e:  # an integer literal of thousands of digits (int max_str_digits)
        raise InputError(f"holds a number too long to read ({e})", source=source,
                         fix="Write sizes and times as ordinary numbers (e.g. 1.5e9)") from None
    if maybe_surrogates or _SURROGATE_ESCAPE.search(text):
        _reject_lone_surrogates(data, source)
    return data


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _reject_lone_surrogates(data: Any, source: str) -> None:
    """A lone surrogate is no Unicode text: it cannot be printed, stored in the run store or written as UTF-8."""
    stack: list[tuple[Any, str]] = [(data, "")]
    while stack:
        value, at = stack.pop()
        if isinstance(value, dict):
            for k in value:
                _check_text(k, at or None, source)
            stack.extend((v, f"{at}.{k}" if at else str(k)) for k, v in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((v, f"{at}[{i}]") for i, v in reversed(list(enumerate(value))))
        elif isinstance(value, str):
            _check_text(value, at or None, source)


def _check_text(text: str, at: str | None, source: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError(f"contains an unpaired surrogate {text[e.start]!r}, which is not Unicode text",
                         source=source, field=at,
                         fix="Save the file as UTF-8 JSON without lone \\ud800-\\udfff escapes") from None


def _reject_constant(name: str):
    raise InputError(f"contains {name}, which is not a number", fix="Replace it with a finite number")


def write_json(path: str | Path, data: Any, indent: int | None = 1) -> None:
    """Write atomically (a crash leaves the old file or the new one); see :func:`.outputs.write_output`."""
    from .outputs import write_output
    write_output(path, (json.dumps(data, indent=indent, allow_nan=False) + "\n").encode("utf-8"))


def compact(obj: Any) -> str:
    """The canonical JSON text data is stored and hashed as (no spaces, keys in the given order)."""
    return json.dumps(obj, separators=(",", ":"))


def content_hash(obj: Any) -> str:
    """SHA-256 of the canonical JSON text (or of the text itself): equal data, equal hash."""
    import hashlib
    text = obj if isinstance(obj, str) else compact(obj)
    return hashlib.sha256(text.encode()).hexdigest()


def to_jsonable(obj: Any) -> Any:
    """Mappings, sequences and numpy values as plain JSON types (keys as strings)."""
    import numpy as np
    if isinstance(obj, dict) or hasattr(obj, "items") and hasattr(obj, "keys"):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    return obj
