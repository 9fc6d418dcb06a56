"""Reading and writing JSON files with user-facing errors and no half-written files."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .errors import InputError

MAX_FILE_BYTES = 512 * 1024 * 1024


def read_json(path: str | Path) -> Any:
    path = Path(path)
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise InputError(f"is larger than {MAX_FILE_BYTES // 2**20} MiB", source=str(path))
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError("is not UTF-8 text", source=str(path), fix="Save the file as UTF-8 JSON") from None
    except FileNotFoundError:
        raise InputError("no such file", source=str(path), fix="Check the path") from None
    except IsADirectoryError:
        raise InputError("is a directory, not a JSON file", source=str(path)) from None
    except OSError as e:
        raise InputError(f"cannot be read ({e.strerror})", source=str(path)) from None
    return parse_json(text, str(path))


def parse_json(text: str | bytes, source: str) -> Any:
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError("is not UTF-8 text", source=source, fix="Save the file as UTF-8 JSON") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
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


def _reject_constant(name: str):
    raise InputError(f"contains {name}, which is not a number", fix="Replace it with a finite number")


def write_json(path: str | Path, data: Any, indent: int | None = 1) -> None:
    """Write atomically: a crash leaves the old file or the new one, never half of one."""
    path = Path(path)
    text = json.dumps(data, indent=indent, allow_nan=False)
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    except OSError as e:
        raise InputError(f"cannot be written ({e.strerror})", source=str(path),
                         fix="Check that the folder exists and is writable") from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
