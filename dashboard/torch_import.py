"""Importing a PyTorch model on the Network page. torch is imported only when this is used.

A model is built and traced in a worker process with a timeout
(:func:`placement_core.torch.isolated.import_in_subprocess`), never in the
dashboard's server. An uploaded Python file runs only after the user has seen
what will run and as whom (:class:`Review`) and confirmed; it is written under
``$PLACEMENT_HOME/uploads`` for that import and removed when the import fails
or when the session imports another model. The Benchmark page rebuilds the
model from the same file, so a successful upload is kept until then, at most
:data:`UPLOAD_MAX_AGE_S`. ``PLACEMENT_ALLOW_CODE_UPLOAD=0`` turns file uploads
off; torchvision names still import.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import secrets
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from placement_core import InputError
from placement_core.model.graph import Graph

ALLOW_ENV = "PLACEMENT_ALLOW_CODE_UPLOAD"
UPLOAD_MAX_AGE_S = 24 * 3600  # an upload no session has replaced by then is removed at the next upload
SHOWN_CHARS = 200_000  # a longer file is shown up to here in the confirmation, with the count of the rest
# characters that display as nothing or reorder the text around them: what the user reads would not be what runs
_HIDDEN = re.compile("[\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}\.py")


def code_upload_allowed() -> bool:
    """False when ``PLACEMENT_ALLOW_CODE_UPLOAD`` is 0, false, no or off: the server accepts no model code."""
    return os.environ.get(ALLOW_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def code_refusal(source: str) -> str | None:
    """Why the model ``source`` may not run on this server (a file's code while code upload is off), or None.
    Everything that is not a torchvision name is a file's code to parse_source."""
    if code_upload_allowed() or not source.strip() or source.strip().startswith("torchvision:"):
        return None
    return (f"Model code from files is turned off on this server ({ALLOW_ENV}=0), so {source.strip()!r} cannot "
            "be benchmarked or calibrated here. Use a torchvision:NAME model, or restart the dashboard without "
            f"{ALLOW_ENV}=0.")


def _require_code_upload() -> None:
    if not code_upload_allowed():
        raise InputError("importing model code is turned off on this server", field="model",
                         fix=f"Use a torchvision name, or restart the dashboard without {ALLOW_ENV}=0")


def upload_root() -> Path:
    """``$PLACEMENT_HOME/uploads`` (default ``~/.placement/uploads``), created private to the user."""
    from placement_core.store import home_dir
    root = home_dir() / "uploads"
    root.mkdir(mode=0o700, exist_ok=True)
    return root


@dataclass(frozen=True)
class Review:
    """What the user confirms before an uploaded file runs: the file, the call, and whose rights it runs with."""

    filename: str
    code: bytes
    attr: str
    shape_text: str
    batch_size: int

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.code).hexdigest()

    @property
    def text(self) -> str:
        return self.code.decode("utf-8-sig")  # review_upload has checked that Python reads it as UTF-8

    def shown(self) -> tuple[str, int]:
        """The file up to :data:`SHOWN_CHARS` characters (whole lines) and how many lines are not shown."""
        text = self.text
        if len(text) <= SHOWN_CHARS:
            return text, 0
        cut = text.rfind("\n", 0, SHOWN_CHARS) + 1 or SHOWN_CHARS
        return text[:cut], len(text[cut:].splitlines())

    def hidden_characters(self) -> int:
        """How many invisible or direction-changing characters the file has (they can disguise code)."""
        return len(_HIDDEN.findall(self.text))


def runs_as() -> dict[str, str]:
    """Whose rights the model code gets: the server's OS user, working directory and Python."""
    try:
        import pwd
        user = pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):  # pragma: no cover - not POSIX, or a uid without a name
        import getpass
        user = getpass.getuser()
    uid = str(os.geteuid()) if hasattr(os, "geteuid") else "?"
    return {"user": user, "uid": uid, "cwd": os.getcwd(), "python": sys.executable,
            "env_vars": str(len(os.environ)), "uploads": str(upload_root())}


def review_upload(code: bytes | None, filename: str, attr: str, shape_text: str, batch_size: int) -> Review:
    """Check what can be checked without running anything; the file itself is not written or run."""
    _require_code_upload()
    if not code:
        raise InputError("no Python file uploaded", field="model", fix="Upload a .py file that defines the model")
    attr = attr.strip()
    if not attr:
        raise InputError("no factory name given", field="factory",
                         fix="Name the function, nn.Module class or instance in the file that gives the model")
    parse_sample_shape(shape_text)
    _check_encoding(code)
    from placement_core.torch.sources import parse_source
    parse_source(f"model.py:{attr}")  # a bad factory call fails before the user is asked to confirm
    return Review(Path(filename).name or "model.py", bytes(code), attr, shape_text, int(batch_size))


def _check_encoding(code: bytes) -> None:
    """Python must read the file as the UTF-8 the confirmation shows: a ``# coding: utf-7`` line would make
    text that reads as a comment run as code."""
    import io
    import tokenize
    try:
        code.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(f"the file is not UTF-8 text (byte {e.start})", field="model",
                         fix="Upload a Python source file saved as UTF-8") from None
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(code).readline)
    except SyntaxError as e:
        raise InputError(f"the file's encoding declaration is not usable: {e.msg}", field="model",
                         fix="Save the file as UTF-8 without a coding line") from None
    if encoding not in ("utf-8", "utf-8-sig"):
        raise InputError(f"the file declares the encoding {encoding}; only UTF-8 files are imported, so that what "
                         "you read before confirming is what runs", field="model", fix="Save the file as UTF-8")


def save_upload(code: bytes, filename: str) -> Path:
    """Write a confirmed upload to a fresh private folder under ``$PLACEMENT_HOME/uploads``; prune old ones."""
    root = upload_root()
    prune_uploads(root)
    name = filename if _SAFE_NAME.fullmatch(filename or "") else "model.py"
    folder = root / secrets.token_hex(8)
    folder.mkdir(mode=0o700)
    path = folder / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(code)
    return path


def remove_upload(path: str | os.PathLike | None) -> None:
    """Remove an upload's folder; only folders directly under :func:`upload_root` are touched."""
    if not path:
        return
    folder = Path(path).parent
    if folder.parent.resolve() == upload_root().resolve() and not folder.is_symlink():
        shutil.rmtree(folder, ignore_errors=True)


def prune_uploads(root: Path, max_age_s: float = UPLOAD_MAX_AGE_S) -> None:
    now = time.time()
    for folder in root.iterdir():
        try:
            if folder.is_dir() and not folder.is_symlink() and now - folder.stat().st_mtime > max_age_s:
                shutil.rmtree(folder, ignore_errors=True)
        except OSError:
            pass


def parse_sample_shape(text: str) -> tuple[int, ...]:
    """``"3, 224, 224"`` -> (3, 224, 224): the shape of one sample, without the batch dimension."""
    parts = [p for p in re.split(r"[\s,x×()\[\]]+", str(text)) if p]
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise InputError(f"cannot read the input shape {text!r}", field="input shape",
                         fix="Write the sizes of one sample separated by commas, e.g. 3, 224, 224") from None
    if not shape or any(s <= 0 for s in shape):
        raise InputError(f"the input shape must be positive sizes, got {text!r}", field="input shape",
                         fix="Write e.g. 3, 224, 224 (channels, height, width)")
    return shape


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def torchvision_source(name: str) -> str:
    """``resnet18`` or ``torchvision:resnet18`` -> the source string ``torchvision:resnet18``."""
    name = name.strip()
    if not name:
        raise InputError("no model name given", field="model", fix="Write a torchvision name, e.g. resnet18")
    return name if name.startswith("torchvision:") else f"torchvision:{name}"


def import_reviewed(review: Review, *, timeout: float | None = None) -> tuple[Graph, str, Path]:
    """Run a confirmed upload: write it under ``$PLACEMENT_HOME/uploads``, import it in a worker process.

    Returns the Graph, its source string (for the Benchmark page) and the file; the file is removed when
    the import fails, and by :func:`remove_upload` when the session no longer needs it.
    """
    _require_code_upload()  # the switch holds for a confirmed file too
    path = save_upload(review.code, review.filename)
    source = f"{path}:{review.attr}"
    try:
        graph = import_model(source, review.shape_text, review.batch_size, timeout=timeout)
    except BaseException:
        remove_upload(path)
        raise
    return graph, source, path


def import_model(source: str, shape_text: str = "3, 224, 224", batch_size: int = 32, *,
                 timeout: float | None = None) -> Graph:
    """A Graph of the model ``source`` describes, traced on one sample and scaled to ``batch_size`` in a
    worker process (killed after ``timeout`` seconds, default the import's own limit)."""
    if not torch_available():
        raise InputError("PyTorch is not installed", field="model",
                         fix='Install it with .venv/bin/pip install -e ".[torch]" and restart the dashboard')
    shape = parse_sample_shape(shape_text)
    from placement_core.torch.isolated import import_in_subprocess
    return import_in_subprocess(source, (1,) + shape, int(batch_size), timeout=timeout)
