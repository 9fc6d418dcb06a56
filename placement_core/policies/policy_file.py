"""``placement-policy/1``: a trained placement policy in one small JSON file (docs/formats.md).

A policy file holds the method (``placeto`` or ``gdp``), the network's
configuration (sizes, rounds), what it was trained for (device graph, family,
episodes, seed, the command) and its tensors, each as a shape and the
little-endian float32 values in base64. JSON rather than a pickle: loading a
policy runs no code, so a downloaded policy is as safe to open as a network file.
"""

from __future__ import annotations

import base64
import binascii
import math
from pathlib import Path
from typing import Any

import numpy as np

from ..base.errors import InputError, require_mapping, require_name, require_number
from ..base.jsonio import read_json, write_json
from ..model.sharding import MAX_GENES
from .features import DEVICE_FEATURES, GDP_DEVICE_FEATURES, GDP_NODE_FEATURES, NODE_FEATURES, STARTS

FORMAT = "placement-policy/1"
METHODS = ("placeto", "gdp")
MAX_TENSORS = 256
MAX_VALUES = 10_000_000


def encode_tensor(array: np.ndarray) -> dict:
    a = np.asarray(array, dtype="<f4")  # (np.ascontiguousarray would turn a scalar into shape [1])
    return {"shape": list(a.shape), "data": base64.b64encode(a.tobytes(order="C")).decode("ascii")}


def policy_to_dict(method: str, config: dict, tensors: dict[str, np.ndarray], *, devices: dict,
                   training: dict) -> dict:
    return {"format": FORMAT, "method": method, "config": dict(config), "devices": dict(devices),
            "training": dict(training), "tensors": {k: encode_tensor(v) for k, v in tensors.items()}}


def write_policy(path: str | Path, data: dict) -> None:
    write_json(path, data)


def read_policy(path: str | Path) -> dict:
    """The policy file at ``path``, checked and with its tensors decoded to float32 arrays."""
    return policy_from_dict(read_json(path), source=str(path))


def policy_from_dict(data: Any, source: str | None = None) -> dict:
    data = require_mapping(data, source=source, field=None, what="a policy")
    if data.get("format") != FORMAT:
        raise InputError(f"unknown format {data.get('format')!r}", source=source, field="format",
                         fix=f'A policy file has "format": "{FORMAT}"; `placement train-policy` writes them')
    unknown = sorted(set(data) - {"format", "method", "config", "devices", "training", "tensors"})
    if unknown:
        raise InputError(f"unknown field {unknown[0]!r}", source=source, field=unknown[0],
                         fix="Remove it; a policy has format, method, config, devices, training and tensors")
    method = data.get("method")
    if method not in METHODS:
        raise InputError(f"unknown method {str(method)[:40]!r}", source=source, field="method",
                         fix="Use one of: " + ", ".join(METHODS))
    config = check_config(method, data.get("config"), source)
    devices = _check_devices(data.get("devices", {}), source)
    training = _check_training(data.get("training", {}), source)
    raw = require_mapping(data.get("tensors"), source=source, field="tensors", what="name -> tensor")
    if method == "gdp" and "devices" not in config and "out.weight" in raw:
        raise InputError("the policy has one output unit per device (tensor out.weight) but its config names no "
                         "device count", source=source, field="config.devices",
                         fix="Add the device count it was trained for, or use a file written by `placement "
                             "train-policy`")
    expected = tensor_shapes(method, config)
    if len(raw) > MAX_TENSORS:
        raise InputError(f"{len(raw)} tensors is more than any policy has", source=source, field="tensors",
                         fix=f"A policy has at most {MAX_TENSORS}")
    tensors: dict[str, np.ndarray] = {}
    total = 0
    for name in expected:
        if name not in raw:
            raise InputError(f"the policy has no tensor {name!r}", source=source, field=f"tensors.{name}",
                             fix="Use a file written by `placement train-policy` with this version")
    for name, t in raw.items():
        at = f"tensors.{name}"
        if name not in expected:
            raise InputError(f"a {method} policy with this config has no tensor {str(name)[:80]!r}", source=source,
                             field=at, fix="Use a file written by `placement train-policy`")
        t = require_mapping(t, source=source, field=at, what="a tensor")
        if set(t) - {"shape", "data"}:
            raise InputError(f"unknown field {sorted(map(str, set(t) - {'shape', 'data'}))[0]!r}", source=source,
                             field=at, fix="A tensor has a shape and its data")
        shape = t.get("shape")
        if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool)
                                                  and 0 <= s <= MAX_VALUES for s in shape):
            raise InputError(f"shape must be a list of sizes, got {str(shape)[:60]}", source=source,
                             field=f"{at}.shape")
        if shape != list(expected[name]):
            raise InputError(f"tensor {name!r} has shape {shape}, the config's network needs {list(expected[name])}",
                             source=source, field=f"{at}.shape",
                             fix="Use a file written by `placement train-policy`; the config and the tensors must agree")
        size = int(np.prod(shape, dtype=np.int64)) if shape else 1
        total += size
        if total > MAX_VALUES:
            raise InputError("the tensors hold more values than any policy", source=source, field=at,
                             fix=f"A policy holds at most {MAX_VALUES:,} values")
        try:
            blob = base64.b64decode(str(t.get("data", "")), validate=True)
        except (binascii.Error, ValueError):
            raise InputError("data is not base64", source=source, field=f"{at}.data",
                             fix="Write the float32 values, little-endian, in base64") from None
        if len(blob) != 4 * size:
            raise InputError(f"data holds {len(blob) // 4} values, the shape {shape} needs {size}", source=source,
                             field=f"{at}.data")
        values = np.frombuffer(blob, dtype="<f4").reshape(shape).astype(np.float32)
        if not np.isfinite(values).all():
            raise InputError("a value is not finite", source=source, field=f"{at}.data",
                             fix="Train the policy again; its weights diverged")
        tensors[str(name)] = values
    return {"format": FORMAT, "method": method, "config": config, "devices": devices, "training": training,
            "tensors": tensors}


# -- the config: every size bounded, checked before anything is built ---------------------------------------

# name -> (low, high, default): the network's sizes (``rounds`` costs time, not memory: bounded as the
# training command bounds it). A GDP policy scores devices with a ``head`` network (any device count); one whose
# config names ``devices`` instead is of the first version, with one output unit per device (no default count).
PLACETO_CONFIG = {"hidden": (1, 1024, 32), "rounds": (1, 64, 4), "head": (1, 4096, 64)}
GDP_CONFIG = {"hidden": (1, 1024, 32), "layers": (1, 64, 3), "heads": (1, 64, 2), "attention_layers": (1, 16, 2),
              "head": (1, 4096, 64)}
GDP_FIRST_CONFIG = {"devices": (1, MAX_GENES, None), **{k: v for k, v in GDP_CONFIG.items() if k != "head"}}


def check_config(method: str, raw: Any, source: str | None = None) -> dict:
    """The network's configuration, every field present (defaults filled in) and within its bounds."""
    raw = require_mapping(raw, source=source, field="config", what="the network's sizes")
    bounds = PLACETO_CONFIG if method == "placeto" else GDP_FIRST_CONFIG if "devices" in raw else GDP_CONFIG
    allowed = set(bounds) | ({"start"} if method == "placeto" else set())
    for key in raw:
        if key not in allowed:
            raise InputError(f"unknown field {str(key)[:40]!r} for a {method} policy", source=source,
                             field=f"config.{str(key)[:40]}", fix="Allowed: " + ", ".join(sorted(allowed)))
    config: dict[str, Any] = {}
    for key, (low, high, default) in bounds.items():
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InputError(f"{key} must be an integer from {low} to {high}, got {_shown(value)}", source=source,
                             field=f"config.{key}", fix="Use a file written by `placement train-policy`")
        config[key] = value
    if method == "placeto":
        start = raw.get("start", "fastest")
        if start not in STARTS:
            raise InputError(f"unknown start placement {_shown(start)}", source=source, field="config.start",
                             fix="Use one of: " + ", ".join(STARTS))
        config["start"] = start
    elif config["hidden"] % config["heads"]:
        raise InputError(f"{config['heads']} attention heads do not divide {config['hidden']} hidden units",
                         source=source, field="config.heads", fix="Use a number of heads that divides hidden")
    return config


def tensor_shapes(method: str, config: dict) -> dict[str, tuple[int, ...]]:
    """Every tensor a checked config's network has, with its shape (the torch networks' own state dicts;
    tests/test_third_audit.py compares the two): a file is checked against it before anything is built."""
    def linear(name, out, inp):
        return {f"{name}.weight": (out, inp), f"{name}.bias": (out,)}
    h = config["hidden"]
    shapes: dict[str, tuple[int, ...]] = {}
    if method == "placeto":
        head = config["head"]
        shapes["keep"] = ()
        shapes.update(linear("embed", h, len(NODE_FEATURES)))
        for name in ("f_down", "g_down", "f_up", "g_up"):
            shapes.update(linear(name, h, h))
        for i in range(3):
            shapes.update(linear(f"pool_l.{i}", h, 2 * h))
        for i in range(3):
            shapes.update(linear(f"pool_h.{i}", h, h))
        shapes.update(linear("head.0", head, 5 * h + len(DEVICE_FEATURES)))
        shapes.update(linear("head.2", head, head))
        shapes.update(linear("head.4", 1, head))
        return shapes
    d = config.get("devices")  # the first version's one output unit per device, and per-device features
    features = 2 * d + 2 if d is not None else len(GDP_NODE_FEATURES)
    shapes.update(linear("embed", h, features))
    for i in range(config["layers"]):
        shapes.update(linear(f"neigh.{i}", h, h))
    for i in range(config["layers"]):
        shapes.update(linear(f"combine.{i}", h, 2 * h))
    shapes.update(linear("condition", h, features))
    for j in range(config["attention_layers"]):
        at = f"attention.layers.{j}"
        shapes[f"{at}.self_attn.in_proj_weight"] = (3 * h, h)
        shapes[f"{at}.self_attn.in_proj_bias"] = (3 * h,)
        shapes.update(linear(f"{at}.self_attn.out_proj", h, h))
        shapes.update(linear(f"{at}.linear1", 2 * h, h))
        shapes.update(linear(f"{at}.linear2", h, 2 * h))
        for norm in ("norm1", "norm2"):
            shapes[f"{at}.{norm}.weight"] = (h,)
            shapes[f"{at}.{norm}.bias"] = (h,)
    if d is not None:
        shapes.update(linear("out", d, h))
    else:
        shapes.update(linear("head.0", config["head"], h + len(GDP_DEVICE_FEATURES)))
        shapes.update(linear("head.2", 1, config["head"]))
    return shapes


def _check_devices(raw: Any, source: str | None) -> dict:
    """What the policy was trained for: the device graph's name, device count and hash (all optional)."""
    raw = require_mapping(raw, source=source, field="devices", what="the device graph")
    for key, value in raw.items():
        at = f"devices.{str(key)[:40]}"
        if key == "name":
            require_name(value, source=source, field=at)
        elif key == "count":
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_GENES:
                raise InputError(f"count must be an integer from 1 to {MAX_GENES}, got {_shown(value)}",
                                 source=source, field=at)
        elif key == "hash":
            if not isinstance(value, str) or not 1 <= len(value) <= 128 or not value.isalnum():
                raise InputError(f"hash must be a hex digest, got {_shown(value)}", source=source, field=at)
        else:
            raise InputError(f"unknown field {str(key)[:40]!r}", source=source, field=at,
                             fix="The devices of a policy have a name, a count and a hash")
    return dict(raw)


MAX_TRAINING_KEYS = 64
_NUMBERS = {"count", "graph_seed", "graphs", "episodes", "evaluations", "seed", "rollouts", "lr", "entropy", "hidden",
            "rounds", "wall_s", "final_ratio"}


def _check_training(raw: Any, source: str | None) -> dict:
    """How the policy was trained: shown, never used to build anything; plain JSON values of bounded size."""
    raw = require_mapping(raw, source=source, field="training", what="how it was trained")
    if len(raw) > MAX_TRAINING_KEYS:
        raise InputError(f"{len(raw)} fields is more than a training record has", source=source, field="training",
                         fix=f"A policy's training record has at most {MAX_TRAINING_KEYS}")
    for key, value in raw.items():
        at = f"training.{str(key)[:40]}"
        if len(str(key)) > 64:
            raise InputError("a field name is longer than 64 characters", source=source, field=at)
        if key in _NUMBERS and value is not None:
            require_number(value, source=source, field=at, maximum=1e18)
        elif key == "networks":
            if not isinstance(value, list) or len(value) > 100_000 or not all(isinstance(v, str) and len(v) <= 4096
                                                                               for v in value):
                raise InputError("networks must be a list of file names", source=source, field=at)
        elif not (value is None or isinstance(value, (bool, int, float)) or (isinstance(value, str)
                                                                             and len(value) <= 100_000)):
            raise InputError(f"expected a plain value (text, a number, true/false or null), got {_shown(value)}",
                             source=source, field=at)
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"expected a finite number, got {value}", source=source, field=at)
    return dict(raw)


def _shown(value: Any) -> str:
    text = repr(value) if isinstance(value, (str, int, float, bool)) or value is None else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."
