"""Model sources: ``torchvision:NAME``, ``placement:NAME`` or ``path/to/file.py:ATTR``, optionally with
keyword arguments.

A source is a string so that it can travel to benchmark worker processes,
which rebuild the model themselves:

    torchvision:resnet18
    torchvision:googlenet(aux_logits=False, init_weights=False)
    placement:gpt2(layers=4, d_model=256)  # a model defined in this package (placement_core/torch/gpt2.py)
    models/mlp.py:build(width=256)        # a factory or an nn.Module class in that file
    models/mlp.py:net                     # an nn.Module instance defined in that file

Keyword arguments must be Python literals. torchvision models are built with
``weights=None`` (nothing is downloaded); every model is built after
``torch.manual_seed(seed)`` so the same source gives the same weights.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.errors import InputError

FIELD = "model"
USAGE = ("Write torchvision:NAME (e.g. torchvision:resnet18), placement:gpt2 (GPT-2, defined here) or FILE.py:NAME "
         "(a class, factory or module in that file)")


@dataclass(frozen=True)
class Source:
    """A parsed model source: where the model comes from and how it is called."""

    text: str
    kind: str  # "torchvision" | "placement" | "file"
    target: str  # torchvision model name, or the file path
    attr: str | None = None  # name inside the file
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def default_name(self) -> str:
        return self.target if self.kind != "file" else (self.attr or Path(self.target).stem).lower()


def parse_source(text: str) -> Source:
    """Parse without importing anything, so a typo fails before torch loads."""
    if not isinstance(text, str) or not text.strip():
        raise InputError("the model source is empty", field=FIELD, fix=USAGE)
    text = text.strip()
    for kind in ("torchvision", "placement"):
        if text.startswith(kind + ":"):
            name, kwargs = _call(text[len(kind) + 1:], text)
            if not name.isidentifier():
                raise InputError(f"{name!r} is not a {kind} model name", field=FIELD, fix=USAGE)
            return Source(text, kind, name, None, kwargs)
    path, sep, rest = text.rpartition(".py:")
    if not sep:
        raise InputError(f"cannot tell where model {text!r} comes from", field=FIELD, fix=USAGE)
    attr, kwargs = _call(rest, text)
    if not attr.isidentifier():
        raise InputError(f"{attr!r} is not a Python name", field=FIELD, fix=USAGE)
    return Source(text, "file", path + ".py", attr, kwargs)


def _call(expr: str, text: str) -> tuple[str, dict[str, Any]]:
    """``name`` or ``name(key=literal, ...)``."""
    expr = expr.strip()
    if "(" not in expr:
        return expr, {}
    try:
        node = ast.parse(expr, mode="eval").body
    except SyntaxError:
        raise InputError(f"cannot parse {expr!r} in model source {text!r}", field=FIELD,
                         fix="Write NAME(key=value, ...) with Python literals as values") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
        raise InputError(f"expected NAME(key=value, ...) in model source {text!r}", field=FIELD,
                         fix="Pass keyword arguments only, e.g. torchvision:googlenet(aux_logits=False)")
    kwargs = {}
    for kw in node.keywords:
        if kw.arg is None:
            raise InputError(f"**kwargs is not supported in model source {text!r}", field=FIELD)
        try:
            kwargs[kw.arg] = ast.literal_eval(kw.value)
        except ValueError:
            raise InputError(f"argument {kw.arg}= of model source {text!r} is not a Python literal", field=FIELD,
                             fix="Use numbers, strings, booleans, None, tuples or lists") from None
    return node.func.id, kwargs


def load_model(source: str | Source, seed: int = 0):
    """The ``nn.Module`` a source describes, built with a fixed seed, in training mode."""
    import torch
    from torch import nn

    src = source if isinstance(source, Source) else parse_source(source)
    torch.manual_seed(seed)
    if src.kind == "torchvision":
        model = _torchvision_model(src)
    elif src.kind == "placement":
        model = _own_model(src)
    else:
        model = _file_model(src)
    if not isinstance(model, nn.Module):
        raise InputError(f"{src.text} gives a {type(model).__name__}, not a torch.nn.Module", field=FIELD,
                         fix="Point at an nn.Module class, an instance, or a function returning one")
    return model.train()


def _torchvision_model(src: Source):
    try:
        import torchvision
    except ImportError:
        raise InputError("torchvision is not installed", field=FIELD,
                         fix='Install it with .venv/bin/pip install -e ".[torch]" (or use FILE.py:NAME)') from None
    names = torchvision.models.list_models()
    if src.target not in names:
        close = difflib.get_close_matches(src.target, names, n=3)
        raise InputError(f"torchvision has no model {src.target!r}", field=FIELD,
                         fix=(f"Did you mean {', '.join(close)}?" if close else "See torchvision.models.list_models()"))
    if "weights" in src.kwargs:
        raise InputError("pretrained weights are not downloaded here", field=FIELD,
                         fix="Drop weights=...; benchmarks and calibration need no trained weights")
    try:
        return torchvision.models.get_model(src.target, weights=None, **src.kwargs)
    except Exception as e:  # noqa: BLE001 - a bad keyword or an unusable combination
        raise InputError(f"building torchvision model {src.target!r} failed: {_first_line(e)}", field=FIELD,
                         fix="Check the keyword arguments against the torchvision documentation") from None


def _own_model(src: Source):
    from .gpt2 import MODELS
    if src.target not in MODELS:
        raise InputError(f"placement has no model {src.target!r}", field=FIELD, fix="Use one of: " + ", ".join(MODELS))
    try:
        return MODELS[src.target](**src.kwargs)
    except (TypeError, ValueError) as e:
        raise InputError(f"building {src.target} failed: {_first_line(e)}", field=FIELD,
                         fix="Keyword arguments: layers, d_model, heads, vocab, seq, tie") from None


def _file_model(src: Source):
    path = Path(src.target)
    if not path.is_file():
        raise InputError(f"no such file {src.target!r}", field=FIELD, fix=USAGE)
    module = _import_file(path)
    if not hasattr(module, src.attr):
        names = [n for n in vars(module) if not n.startswith("_")]
        close = difflib.get_close_matches(src.attr, names, n=3)
        raise InputError(f"{src.target} defines no {src.attr!r}", field=FIELD,
                         fix=(f"Did you mean {', '.join(close)}?" if close else "Name a class, factory or module in it"))
    obj = getattr(module, src.attr)
    from torch import nn
    if isinstance(obj, nn.Module):
        if src.kwargs:
            raise InputError(f"{src.attr} is a module instance and takes no arguments", field=FIELD)
        return obj
    if not callable(obj):
        raise InputError(f"{src.target}:{src.attr} is a {type(obj).__name__}, not a class or factory", field=FIELD,
                         fix="Point at an nn.Module class, an instance, or a function returning one")
    try:
        return obj(**src.kwargs)
    except Exception as e:  # noqa: BLE001 - the user's constructor can fail in any way
        raise InputError(f"calling {src.attr}({', '.join(src.kwargs)}) in {src.target} failed: {_first_line(e)}",
                         field=FIELD, fix="Fix the model's constructor or its arguments") from None


def _import_file(path: Path):
    """Import a Python file by path under a stable private name (workers import it the same way)."""
    resolved = path.resolve()
    name = "placement_user_model_" + hashlib.sha1(str(resolved).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise InputError(f"{path} cannot be imported as Python", field=FIELD, fix=USAGE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # Let the file import its neighbours, as it would when run from its own folder.
    sys.path.insert(0, str(resolved.parent))
    # Never write bytecode beside a user's file: an uploaded model's private folder holds exactly the confirmed
    # bytes, and a user's own folder gets no __pycache__ from us.
    kept_flag, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # noqa: BLE001 - syntax errors, missing imports, anything at import time
        sys.modules.pop(name, None)
        raise InputError(f"importing {path} failed: {_first_line(e)}", field=FIELD,
                         fix="Fix the error in that file (it is imported as a module)") from None
    finally:
        sys.path.remove(str(resolved.parent))
        sys.dont_write_bytecode = kept_flag
    return module


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


def parse_input_shape(text: str | tuple | list, field_name: str = "--input-shape") -> tuple[int, ...]:
    """The whole input's shape, batch first: ``1,3,224,224`` (or a sequence) as a tuple of positive ints.
    (The dashboard asks for one sample's shape instead: ``dashboard.torch_import.parse_sample_shape``.)"""
    if isinstance(text, (tuple, list)):
        parts = list(text)
    else:
        parts = [p.strip() for p in str(text).replace("x", ",").split(",") if p.strip()]
    try:
        shape = tuple(int(p) for p in parts)
    except (TypeError, ValueError):
        raise InputError(f"expected comma-separated sizes, got {text!r}", field=field_name,
                         fix="Write e.g. 1,3,224,224 (batch, channels, height, width)") from None
    if not shape or any(s <= 0 for s in shape):
        raise InputError(f"sizes must be positive, got {text!r}", field=field_name, fix="Write e.g. 1,3,224,224")
    return shape
