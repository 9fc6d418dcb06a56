"""Placements: an int array over the ops in topological order (what optimizers mutate),
and the ``placement/1`` JSON format (op name -> device name) users read and write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from .devices import DeviceGraph
from .errors import InputError, require_mapping
from .graph import Graph
from .jsonio import read_json

FORMAT = "placement/1"


def single_device(graph: Graph, devices: DeviceGraph, device: str | int) -> np.ndarray:
    return np.full(len(graph), _device_index(devices, device, "placement"), dtype=np.int32)


def random_placement(graph: Graph, devices: DeviceGraph, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, len(devices), len(graph)).astype(np.int32)


def check_placement(placement: Any, graph: Graph, devices: DeviceGraph) -> np.ndarray:
    """An int32 array of the right length with every entry a device index."""
    arr = np.asarray(placement)
    if arr.shape != (len(graph),):
        raise InputError(f"placement has {arr.size} entries but the network has {len(graph)} ops",
                         field="placement", fix="Give one device per op, in topological order")
    if not np.issubdtype(arr.dtype, np.integer):
        raise InputError("placement entries must be device indices (integers)", field="placement")
    if arr.size and (arr.min() < 0 or arr.max() >= len(devices)):
        bad = int(arr[(arr < 0) | (arr >= len(devices))][0])
        raise InputError(f"placement uses device index {bad}, but there are {len(devices)} devices",
                         field="placement", fix=f"Use indices 0..{len(devices) - 1}")
    return np.ascontiguousarray(arr, dtype=np.int32)


def _device_index(devices: DeviceGraph, device: str | int, field: str) -> int:
    if isinstance(device, (int, np.integer)) and not isinstance(device, bool):
        if 0 <= device < len(devices):
            return int(device)
        raise InputError(f"device index {device} is out of range (0..{len(devices) - 1})", field=field)
    if device in devices.index:
        return devices.index[device]
    raise InputError(f"unknown device {device!r}", field=field,
                     fix="Use one of: " + ", ".join(devices.names))


def placement_to_dict(placement: np.ndarray, graph: Graph, devices: DeviceGraph) -> dict:
    return {"format": FORMAT, "network": graph.name, "devices": devices.name,
            "assignment": {op.name: devices.devices[int(d)].name for op, d in zip(graph.ops, placement)}}


def placement_from_dict(data: Any, graph: Graph, devices: DeviceGraph, source: str | None = None) -> np.ndarray:
    """Our format ({"assignment": {op: device}}) or Exprimo's ({layer path: device index})."""
    data = require_mapping(data, source=source, field=None, what="a placement")
    if data.get("format") == FORMAT:
        assignment = require_mapping(data.get("assignment"), source=source, field="assignment",
                                     what="op -> device names")
        exprimo = False
    elif "format" in data:
        raise InputError(f"unknown format {data.get('format')!r}", source=source, field="format",
                         fix=f'Set "format": "{FORMAT}"')
    else:
        assignment, exprimo = data, True
    out = np.full(len(graph), -1, dtype=np.int32)
    for name, dev in assignment.items():
        field = name if exprimo else f"assignment.{name}"
        if name not in graph.index:
            raise InputError(f"op {name!r} is not in network {graph.name!r}", source=source, field=field,
                             fix="Use a placement made for this network")
        if exprimo:
            if isinstance(dev, bool) or not isinstance(dev, int):
                raise InputError(f"expected a device index, got {dev!r}", source=source, field=field,
                                 fix="Exprimo placements map layer paths to device indices")
            try:
                idx = _device_index(devices, dev, field)
            except InputError as e:
                e.source = source
                raise
        else:
            if not isinstance(dev, str) or dev not in devices.index:
                raise InputError(f"unknown device {dev!r}", source=source, field=field,
                                 fix="Use one of: " + ", ".join(devices.names))
            idx = devices.index[dev]
        out[graph.index[name]] = idx
    missing = [graph.ops[i].name for i in np.flatnonzero(out < 0)]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise InputError(f"no device for op(s) {shown}", source=source, field="assignment",
                         fix="Assign every op of the network to a device")
    return out


def parse_placement_spec(spec: str, graph: Graph, devices: DeviceGraph) -> np.ndarray:
    """``single:DEVICE``, ``random:SEED`` or a JSON file (ours or Exprimo's)."""
    if spec.startswith("single:"):
        return single_device(graph, devices, spec.split(":", 1)[1])
    if spec.startswith("random:"):
        seed = spec.split(":", 1)[1]
        if not seed.isdigit():
            raise InputError(f"random seed must be a non-negative integer, got {seed!r}", field="--placement",
                             fix="Write e.g. random:7")
        return random_placement(graph, devices, int(seed))
    path = Path(spec)
    if not path.is_file():
        raise InputError(f"no such placement file {spec!r}", field="--placement",
                         fix="Give single:DEVICE, random:SEED or a path to a placement JSON file")
    return placement_from_dict(read_json(path), graph, devices, source=str(path))
