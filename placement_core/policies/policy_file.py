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
from pathlib import Path
from typing import Any

import numpy as np

from ..base.errors import InputError, require_mapping
from ..base.jsonio import read_json, write_json

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
        raise InputError(f"unknown method {method!r}", source=source, field="method",
                         fix="Use one of: " + ", ".join(METHODS))
    config = require_mapping(data.get("config"), source=source, field="config", what="the network's sizes")
    devices = require_mapping(data.get("devices", {}), source=source, field="devices", what="the device graph")
    training = require_mapping(data.get("training", {}), source=source, field="training", what="how it was trained")
    raw = require_mapping(data.get("tensors"), source=source, field="tensors", what="name -> tensor")
    if len(raw) > MAX_TENSORS:
        raise InputError(f"{len(raw)} tensors is more than any policy has", source=source, field="tensors",
                         fix=f"A policy has at most {MAX_TENSORS}")
    tensors: dict[str, np.ndarray] = {}
    total = 0
    for name, t in raw.items():
        at = f"tensors.{name}"
        t = require_mapping(t, source=source, field=at, what="a tensor")
        shape = t.get("shape")
        if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool)
                                                  and 0 <= s <= MAX_VALUES for s in shape):
            raise InputError(f"shape must be a list of sizes, got {str(shape)[:60]}", source=source,
                             field=f"{at}.shape")
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
    return {"format": FORMAT, "method": method, "config": dict(config), "devices": dict(devices),
            "training": dict(training), "tensors": tensors}
