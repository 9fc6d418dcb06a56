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
from .jsonio import path_exists, read_json

FORMAT = "placement/1"
RESULT_FORMAT = "placement-result/1"  # `placement optimize --out`: the placement nested under "placement"


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
        raise InputError(f"device index {device} is out of range (0..{len(devices) - 1})", field=field,
                         fix=f"Use an index from 0 to {len(devices) - 1}: device graph {devices.name!r} has "
                             f"{len(devices)} device(s) ({', '.join(devices.names)})")
    if device in devices.index:
        return devices.index[device]
    raise InputError(f"unknown device {device!r}", field=field,
                     fix="Use one of: " + ", ".join(devices.names))


def placement_to_dict(placement: np.ndarray, graph: Graph, devices: DeviceGraph) -> dict:
    return {"format": FORMAT, "network": graph.name, "devices": devices.name,
            "assignment": {op.name: devices.devices[int(d)].name for op, d in zip(graph.ops, placement)}}


def placement_from_dict(data: Any, graph: Graph, devices: DeviceGraph, source: str | None = None,
                        ignored: list[str] | None = None) -> np.ndarray:
    """Our format ({"assignment": {op: device}}), Exprimo's ({layer path: device index}), or an
    optimizer result (``placement-result/1``, whose placement is nested under "placement").

    ``placement/1`` is strict: every key must be an op. Exprimo's files also carry Block names
    (``Mixed_5b``) and keys left over from other networks, which Exprimo ignores; so do we, and
    their names are appended to ``ignored`` when a list is given (for a note to the user).
    Every op must be assigned either way.
    """
    data = require_mapping(data, source=source, field=None, what="a placement")
    fmt = data.get("format")
    if fmt == RESULT_FORMAT:
        # `placement optimize --out` writes the best placement nested in its result file
        inner = require_mapping(data.get("placement"), source=source, field="placement",
                                what=f"the {FORMAT} placement of the result")
        if inner.get("format") != FORMAT:
            raise InputError(f"the nested placement has format {inner.get('format')!r}", source=source,
                             field="placement.format", fix=f"A {RESULT_FORMAT} file nests a {FORMAT} placement; "
                                                           "write the result again with `placement optimize --out`")
        return _placement_from_assignment(inner.get("assignment"), graph, devices, source, "placement.assignment")
    if fmt == FORMAT:
        return _placement_from_assignment(data.get("assignment"), graph, devices, source, "assignment")
    if "format" in data:
        raise InputError(f"unknown format {fmt!r}", source=source, field="format",
                         fix=f'Give a {FORMAT} placement, a {RESULT_FORMAT} file (from `placement optimize --out`) '
                             "or an Exprimo placement ({layer path: device index}, no \"format\" key)")
    return _placement_from_exprimo(data, graph, devices, source, ignored)


def _placement_from_assignment(assignment: Any, graph: Graph, devices: DeviceGraph, source: str | None,
                               at: str) -> np.ndarray:
    assignment = require_mapping(assignment, source=source, field=at, what="op -> device names")
    out = np.full(len(graph), -1, dtype=np.int32)
    for name, dev in assignment.items():
        field = f"{at}.{name}"
        if name not in graph.index:
            raise InputError(f"op {name!r} is not in network {graph.name!r}", source=source, field=field,
                             fix="Use a placement made for this network")
        if not isinstance(dev, str) or dev not in devices.index:
            raise InputError(f"unknown device {dev!r}", source=source, field=field,
                             fix="Use one of: " + ", ".join(devices.names))
        out[graph.index[name]] = devices.index[dev]
    _require_complete(out, graph, source, at)
    return out


def _placement_from_exprimo(data: dict, graph: Graph, devices: DeviceGraph, source: str | None,
                            ignored: list[str] | None) -> np.ndarray:
    out = np.full(len(graph), -1, dtype=np.int32)
    skipped = []
    for name, dev in data.items():
        if name not in graph.index:
            skipped.append(name)  # a Block's name or a stale key: Exprimo ignores them too
            continue
        if isinstance(dev, list):
            raise InputError(f"layer is sharded across devices {dev!r}, which is not supported", source=source,
                             field=name, fix="Give each layer one device index")
        if isinstance(dev, bool) or not isinstance(dev, int):
            raise InputError(f"expected a device index, got {dev!r}", source=source, field=name,
                             fix="Exprimo placements map layer paths to device indices")
        try:
            idx = _device_index(devices, dev, name)
        except InputError as e:
            e.source = source
            raise
        out[graph.index[name]] = idx
    if skipped and len(skipped) == len(data):
        shown = ", ".join(repr(k) for k in skipped[:3]) + (", ..." if len(skipped) > 3 else "")
        raise InputError(f"none of its {len(data)} keys ({shown}) is an op of network {graph.name!r}",
                         source=source, field=None, fix="Use a placement made for this network")
    _require_complete(out, graph, source, None)
    if ignored is not None:
        ignored.extend(skipped)
    return out


def _require_complete(out: np.ndarray, graph: Graph, source: str | None, field: str | None) -> None:
    missing = [graph.ops[i].name for i in np.flatnonzero(out < 0)]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise InputError(f"no device for op(s) {shown}", source=source, field=field or "placement",
                         fix="Assign every op of the network to a device")


def describe_ignored(ignored: list[str]) -> str:
    """A note for the user about the keys of an Exprimo placement that are not ops."""
    shown = ", ".join(ignored[:4]) + (f" and {len(ignored) - 4} more" if len(ignored) > 4 else "")
    return (f"{len(ignored)} key(s) of the placement file are not ops of the network and were ignored, as "
            f"Exprimo does (Block names and stale keys): {shown}")


def parse_placement_spec(spec: str, graph: Graph, devices: DeviceGraph,
                         ignored: list[str] | None = None) -> np.ndarray:
    """``single:DEVICE``, ``random:SEED`` or a JSON file (ours, an optimizer result, or Exprimo's).

    ``ignored`` collects the keys of an Exprimo file that are not ops (see :func:`placement_from_dict`).
    """
    if spec.startswith("single:"):
        return single_device(graph, devices, spec.split(":", 1)[1])
    if spec.startswith("random:"):
        return random_placement(graph, devices, parse_seed(spec.split(":", 1)[1]))
    path = Path(spec)
    if not path_exists(path, "--placement"):
        raise InputError(f"no such placement file {spec!r}", field="--placement",
                         fix="Give single:DEVICE, random:SEED or a path to a placement JSON file")
    return placement_from_dict(read_json(path), graph, devices, source=str(path), ignored=ignored)


MAX_SEED = 2**63 - 1  # as --seed: SQLite's INTEGER and numpy's seeds stop here


def parse_seed(text: str) -> int:
    """ASCII digits only (``int`` also takes '٣' and '²' fails it), at most 2^63 - 1."""
    if not (text.isascii() and text.isdigit() and len(text) <= 19 and int(text) <= MAX_SEED):
        shown = repr(text) if len(text) <= 30 else f"{text[:20]!r}... ({len(text):,} characters)"
        raise InputError(f"random seed must be a non-negative integer up to {MAX_SEED}, got {shown}",
                         field="--placement", fix="Write e.g. random:7")
    return int(text)
