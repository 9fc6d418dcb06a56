"""Placements: an int array over the ops in topological order (what optimizers mutate),
and the ``placement/1`` JSON format (op name -> device name, or a split over devices) users read and write.

A gene below the number of devices is a device; ``d + t`` is split ``t`` of a split table
(:mod:`placement_core.model.sharding`). Readers given a table (a list) look each split of the file up in
it and append the ones it lacks, so the genes they return index that table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .devices import DeviceGraph
from ..base.errors import InputError, require_mapping
from .graph import Graph
from ..base.jsonio import path_exists, read_json
from .sharding import MAX_SHARDS, Split, check_split, gene_entry, merge_splits

FORMAT = "placement/1"
RESULT_FORMAT = "placement-result/1"  # `placement optimize --out`: the placement nested under "placement"


def single_device(graph: Graph, devices: DeviceGraph, device: str | int) -> np.ndarray:
    return np.full(len(graph), _device_index(devices, device, "placement"), dtype=np.int32)


def random_placement(graph: Graph, devices: DeviceGraph, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, len(devices), len(graph)).astype(np.int32)


def check_placement(placement: Any, graph: Graph, devices: DeviceGraph, splits: Sequence[Split] = (),
                    allowed: np.ndarray | None = None) -> np.ndarray:
    """An int32 array of the right length with every entry a device index, or a split of ``splits`` that its
    op can take (``allowed``: ``[ops, splits]`` booleans, :func:`placement_core.model.sharding.applicable`)."""
    arr = np.asarray(placement)
    if arr.shape != (len(graph),):
        raise InputError(f"placement has {arr.size} entries but the network has {len(graph)} ops",
                         field="placement", fix="Give one device per op, in topological order")
    if not np.issubdtype(arr.dtype, np.integer):
        raise InputError("placement entries must be device indices (integers)", field="placement")
    top = len(devices) + len(splits)
    if arr.size and (arr.min() < 0 or arr.max() >= top):
        bad = int(arr[(arr < 0) | (arr >= top)][0])
        more = f" and {len(splits)} splits" if splits else ""
        raise InputError(f"placement uses device index {bad}, but there are {len(devices)} devices{more}",
                         field="placement", fix=f"Use indices 0..{top - 1}")
    if splits and arr.size and arr.max() >= len(devices):
        if allowed is None:
            from .sharding import applicable
            allowed = applicable(graph, devices, splits)
        for i in np.flatnonzero(arr >= len(devices)):
            if not allowed[i, int(arr[i]) - len(devices)]:
                check_split(graph, devices, int(i), splits[int(arr[i]) - len(devices)], field="placement",
                            allow_repeats=True)
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


def placement_to_dict(placement: np.ndarray, graph: Graph, devices: DeviceGraph, splits: Sequence[Split] = ()) -> dict:
    names = devices.names
    return {"format": FORMAT, "network": graph.name, "devices": devices.name,
            "assignment": {op.name: gene_entry(int(d), names, splits) for op, d in zip(graph.ops, placement)}}


def placement_from_dict(data: Any, graph: Graph, devices: DeviceGraph, source: str | None = None,
                        ignored: list[str] | None = None, splits: list[Split] | None = None) -> np.ndarray:
    """Our format ({"assignment": {op: device}}), Exprimo's ({layer path: device index}), or an
    optimizer result (``placement-result/1``, whose placement is nested under "placement").

    ``placement/1`` is strict: every key must be an op. Exprimo's files also carry Block names
    (``Mixed_5b``) and keys left over from other networks, which Exprimo ignores; so do we, and
    their names are appended to ``ignored`` when a list is given (for a note to the user).
    Every op must be assigned either way. A sharded op needs ``splits``, the table its gene will index
    (extended in place); without one a sharded file is refused with the op named.
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
        return _placement_from_assignment(inner.get("assignment"), graph, devices, source, "placement.assignment",
                                          splits)
    if fmt == FORMAT:
        return _placement_from_assignment(data.get("assignment"), graph, devices, source, "assignment", splits)
    if "format" in data:
        raise InputError(f"unknown format {fmt!r}", source=source, field="format",
                         fix=f'Give a {FORMAT} placement, a {RESULT_FORMAT} file (from `placement optimize --out`) '
                             "or an Exprimo placement ({layer path: device index}, no \"format\" key)")
    return _placement_from_exprimo(data, graph, devices, source, ignored, splits)


def _gene(split: Split, devices: DeviceGraph, splits: list[Split] | None, op: str, source: str | None,
          field: str) -> int:
    if splits is None:
        raise InputError(f"op {op!r} is split over several devices, which this command does not take",
                         source=source, field=field, fix="Give each op one device")
    table, where = merge_splits(splits, [split])
    splits[:] = table
    return len(devices) + where[0]


_SHARD_KEYS = {"devices", "split", "sizes"}


def _sharded_entry(dev: dict, i: int, graph: Graph, devices: DeviceGraph, source: str | None, field: str) -> Split:
    """``{"devices": [...], "split": "channel"|"batch", "sizes": [...]}``, checked for op ``i``."""
    name = graph.ops[i].name
    unknown = sorted(set(dev) - _SHARD_KEYS)
    if unknown:
        raise InputError(f"op {name!r}: unknown key {unknown[0]!r} in a split", source=source, field=field,
                         fix="A split has devices, split and (optionally) sizes")
    names = dev.get("devices")
    if not isinstance(names, list) or not names:
        raise InputError(f"op {name!r}: a split needs a list of device names", source=source,
                         field=f"{field}.devices", fix='Write e.g. "devices": ["gpu0", "gpu1"]')
    for d in names:
        if not isinstance(d, str) or d not in devices.index:
            raise InputError(f"op {name!r}: unknown device {d!r}", source=source, field=f"{field}.devices",
                             fix="Use one of: " + ", ".join(devices.names))
    dim = dev.get("split")
    sizes = dev.get("sizes")
    if sizes is not None and not (isinstance(sizes, list) and all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**40 for v in sizes)):
        raise InputError(f"op {name!r}: sizes must be a list of whole numbers, got {sizes!r}", source=source,
                         field=f"{field}.sizes", fix="Give one size (channels or samples) per device")
    split = Split(dim if isinstance(dim, str) else repr(dim), tuple(devices.index[d] for d in names),
                  None if sizes is None else tuple(sizes))
    check_split(graph, devices, i, split, source=source, field=field)
    return split


def _placement_from_assignment(assignment: Any, graph: Graph, devices: DeviceGraph, source: str | None,
                               at: str, splits: list[Split] | None) -> np.ndarray:
    assignment = require_mapping(assignment, source=source, field=at, what="op -> device names")
    out = np.full(len(graph), -1, dtype=np.int32)
    for name, dev in assignment.items():
        field = f"{at}.{name}"
        if name not in graph.index:
            raise InputError(f"op {name!r} is not in network {graph.name!r}", source=source, field=field,
                             fix="Use a placement made for this network")
        i = graph.index[name]
        if isinstance(dev, dict):
            out[i] = _gene(_sharded_entry(dev, i, graph, devices, source, field), devices, splits, name, source,
                           field)
            continue
        if not isinstance(dev, str) or dev not in devices.index:
            raise InputError(f"unknown device {dev!r}", source=source, field=field,
                             fix="Use one of: " + ", ".join(devices.names)
                             + ', or split the op: {"devices": [...], "split": "channel" or "batch"}')
        out[i] = devices.index[dev]
    _require_complete(out, graph, source, at)
    return out


def _placement_from_exprimo(data: dict, graph: Graph, devices: DeviceGraph, source: str | None,
                            ignored: list[str] | None, splits: list[Split] | None) -> np.ndarray:
    out = np.full(len(graph), -1, dtype=np.int32)
    skipped = []
    for name, dev in data.items():
        if name not in graph.index:
            skipped.append(name)  # a Block's name or a stale key: Exprimo ignores them too
            continue
        if isinstance(dev, list):
            out[graph.index[name]] = _exprimo_list(dev, graph.index[name], graph, devices, source, splits)
            continue
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


def _exprimo_list(dev: list, i: int, graph: Graph, devices: DeviceGraph, source: str | None,
                  splits: list[Split] | None) -> int:
    """What Exprimo makes of a list of device indices (docs/sharding.md): a Convolution outside a Block is
    split by output channel over the list (repeats allowed), any other layer runs on the list's first device;
    the lists Exprimo cannot evaluate are refused with its reason."""
    op = graph.ops[i]
    if not dev or any(isinstance(v, bool) or not isinstance(v, int) for v in dev):
        raise InputError(f"expected a device index or a list of them, got {dev!r}", source=source, field=op.name,
                         fix="Exprimo placements map layer paths to device indices")
    idx = []
    for v in dev:
        try:
            idx.append(_device_index(devices, v, op.name))
        except InputError as e:
            e.source = source
            raise
    if op.kind != "conv":
        return idx[0]
    if "/" in op.name:
        raise InputError(f"layer {op.name!r} is a Convolution inside a Block, and Exprimo cannot split those (its "
                         "graph builder registers the shards under the Block's name and fails)", source=source,
                         field=op.name, fix="Give the layer one device index, or split a Convolution outside a Block")
    if len(idx) == 1:
        raise InputError(f"layer {op.name!r} has a one-device list {dev!r}, which Exprimo cannot build (its "
                         "Concatenate of one shard fails)", source=source, field=op.name,
                         fix=f"Write the device index {dev[0]} without the list")
    if len(idx) > MAX_SHARDS:
        raise InputError(f"layer {op.name!r} lists {len(idx)} devices, more than the limit of {MAX_SHARDS} shards "
                         "for one layer", source=source, field=op.name,
                         fix=f"List at most {MAX_SHARDS} device indices for the layer")
    split = Split("channel", tuple(idx))
    check_split(graph, devices, i, split, source=source, field=op.name, allow_repeats=True)
    return _gene(split, devices, splits, op.name, source, op.name)


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
                         ignored: list[str] | None = None, splits: list[Split] | None = None) -> np.ndarray:
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
    return placement_from_dict(read_json(path), graph, devices, source=str(path), ignored=ignored, splits=splits)


MAX_SEED = 2**63 - 1  # as --seed: SQLite's INTEGER and numpy's seeds stop here


def parse_seed(text: str) -> int:
    """ASCII digits only (``int`` also takes '٣' and '²' fails it), at most 2^63 - 1."""
    if not (text.isascii() and text.isdigit() and len(text) <= 19 and int(text) <= MAX_SEED):
        shown = repr(text) if len(text) <= 30 else f"{text[:20]!r}... ({len(text):,} characters)"
        raise InputError(f"random seed must be a non-negative integer up to {MAX_SEED}, got {shown}",
                         field="--placement", fix="Write e.g. random:7")
    return int(text)
