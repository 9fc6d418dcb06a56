"""Importing a PyTorch model on the Network page. torch is imported only when this is used.

Uses ``placement_core.torch``: ``sources.load_model`` builds the module from a
source string (``torchvision:NAME`` or ``FILE.py:ATTR``, the same strings the
CLI takes) and ``fx_import.import_module`` traces it into a Graph.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from placement_core import InputError
from placement_core.graph import Graph

UPLOAD_DIR = Path(".placement") / "uploads"


def parse_shape(text: str) -> tuple[int, ...]:
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


def save_upload(code: bytes, filename: str) -> Path:
    """Keep an uploaded model file under .placement/uploads/<hash>/ so it can be imported by path."""
    import hashlib
    name = Path(filename).name if filename.endswith(".py") else "model.py"
    folder = UPLOAD_DIR / hashlib.sha1(code).hexdigest()[:12]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(code)
    return path


def model_source(kind: str, *, name: str = "", code: bytes | None = None, filename: str = "",
                 attr: str = "") -> str:
    """The source string for ``placement_core.torch.sources`` (``torchvision:NAME`` or ``FILE.py:ATTR``)."""
    if kind == "torchvision":
        name = name.strip()
        if not name:
            raise InputError("no model name given", field="model", fix="Write a torchvision name, e.g. resnet18")
        return name if name.startswith("torchvision:") else f"torchvision:{name}"
    if not code:
        raise InputError("no Python file uploaded", field="model", fix="Upload a .py file that defines the model")
    attr = attr.strip()
    if not attr:
        raise InputError("no factory name given", field="factory",
                         fix="Name the function, nn.Module class or instance in the file that gives the model")
    return f"{save_upload(code, filename)}:{attr}"


def import_model(source: str, shape_text: str = "3, 224, 224", batch_size: int = 32) -> Graph:
    """A Graph of the model ``source`` describes, traced on one sample and scaled to ``batch_size``."""
    if not torch_available():
        raise InputError("PyTorch is not installed", field="model",
                         fix='Install it with .venv/bin/pip install -e ".[torch]" and restart the dashboard')
    shape = parse_shape(shape_text)
    from placement_core.torch.fx_import import import_module
    from placement_core.torch.sources import load_model, parse_source

    src = parse_source(source)
    model = load_model(src)
    return import_module(model, (1,) + shape, name=src.default_name, batch_size=int(batch_size))
