"""Calibrated timing tables (``placement-timings/1``): reading, checking, finding them. No torch.

``placement calibrate`` measures one network's ops on the local devices and
writes a file like::

    {"format": "placement-timings/1", "network": "resnet18", "source": "torchvision:resnet18",
     "input_shape": [1, 3, 32, 32], "batch_size": 32, "devices": "local",
     "ops": {"conv1": {"cpu0": {"fwd": s, "bwd": s, "update": s}, "cpu1": {...}}, ...},
     "measured": {...}, "channels": {...}}

``ops`` is the table the simulator uses (``Problem(..., timings=table)``);
the rest records what was measured. A table belongs to one network at one
input size and batch size: applying it to another would silently give wrong
times, so :func:`timing_table` refuses. Saved calibrations live in
``$PLACEMENT_HOME/timings/<preset>/<network>-<CxHxW>-b<batch>.json``. A network's name comes from a user's
file: it is only ever text in a file name (:func:`file_stem`), never a pattern or a path.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Mapping

from ..formats.catalog import user_dir
from ..base.errors import InputError, require_mapping, require_name, require_number
from ..model.graph import Graph
from ..base.jsonio import path_exists, read_json, write_json
from ..formats.network import MAX_BATCH, MAX_DIM

FORMAT = "placement-timings/1"
PHASES = ("fwd", "bwd", "update")
# The part of a phase's time that does not shrink with the batch (an op's launch, dispatch and fixed-size
# work), fitted by ``placement calibrate`` from a second measurement at half the batch. A fraction k of the
# measured work (a micro-batch, a batch shard, a channel shard) then takes fixed + (t - fixed) * k, not t * k.
FIXED = {"fwd": "fwd_fixed", "bwd": "bwd_fixed"}
# How much a phase's time moved between the calibration's rounds: the standard deviation over rounds divided by
# their mean (a relative spread; 0.05 is 5 %). The simulator never reads it: analysis.uncertainty draws op
# times with it to put an interval around a simulated step.
SPREAD = {"fwd": "fwd_spread", "bwd": "bwd_spread"}
MAX_SPREAD = 10.0
KEYS = PHASES + tuple(FIXED.values()) + tuple(SPREAD.values())
# Times measured at smaller batches, {fraction of the measured batch: seconds} (``placement calibrate`` measures
# 1/2, 1/4 and 1/8 of it: the micro-batches and batch shards placements use). Between measured fractions a
# time is interpolated linearly, so a shard's or micro-batch's time is measured, not proportional; below the
# smallest it follows the fixed part's line (docs/torch.md).
AT = {"fwd": "fwd_at", "bwd": "bwd_at"}
MAX_POINTS = 16


def scaled(times: Mapping[str, float], k: float, update: float = 1.0) -> dict[str, float]:
    """One device's measured times for ``k`` times the measured work: each phase's fixed part stays and the
    rest scales by ``k`` (between fractions measured at (``fwd_at``), the measurements, interpolated); the
    weight update scales by ``update`` (it depends on the weights, not the batch)."""
    out = {}
    for ph in PHASES:
        if ph in times:
            t = times[ph]
            if ph == "update":
                out[ph] = t * update
            else:
                out[ph] = at_fraction(t, min(times.get(FIXED[ph], 0.0), t), times.get(AT[ph]), k)
    return out


def at_fraction(t: float, fixed: float, points: Mapping[str, float] | None, k: float) -> float:
    """A phase measured at ``t`` for the whole work, ``fixed`` of it not shrinking, and at the fractions in
    ``points``: its time for the fraction ``k``. At and between measured fractions (the whole work is 1) the
    measurements, linearly interpolated; below the smallest, the line from the fixed part to it; above 1,
    the fixed part's line through the whole work (t = fixed + (t - fixed) k)."""
    if k == 1.0:
        return t
    measured = sorted((float(f), float(v)) for f, v in (points or {}).items())
    if not measured or k > 1.0:
        return fixed + (t - fixed) * k
    measured.append((1.0, t))
    f0, t0 = measured[0]
    if k <= f0:  # the fixed part's line, through the smallest measurement
        low = min(fixed, t0)
        return low + (t0 - low) * k / f0
    for (fa, ta), (fb, tb) in zip(measured, measured[1:]):
        if k <= fb:
            return ta + (tb - ta) * (k - fa) / (fb - fa)
    return t


def input_shape_of(graph: Graph) -> tuple[int, ...] | None:
    inputs = [op for op in graph.ops if op.kind == "input"]
    return tuple(inputs[0].shape) if len(inputs) == 1 and inputs[0].shape else None


# A name used as it is in a file name: no path separators, no glob or shell pattern characters, not hidden
# (".", ".."), not too long. Every name a calibration was saved under before this rule (torchvision names,
# "resnet18", "googlenet(aux_logits=False)") keeps its file.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+=(),@ -]{0,79}")


def file_stem(name: str) -> str:
    """``name`` as part of a file name: itself when it is plain (:data:`_PLAIN_NAME`), otherwise its plain
    characters and a hash of the whole name, so two names never share a file and no name is a path, a
    pattern or a hidden file ("../x" -> "x-1f0c...", "a**b" -> "a_b-...")."""
    name = str(name)
    if _PLAIN_NAME.fullmatch(name) and not name.endswith((".", " ")):
        return name
    plain = re.sub(r"[^A-Za-z0-9._+=(),@-]+", "_", name).strip("._-")[:60] or "network"
    return f"{plain}-{hashlib.sha1(name.encode('utf-8', 'surrogatepass')).hexdigest()[:12]}"


def check_preset(preset: str) -> str:
    """A preset name (``local``) is a folder and a file name: plain, or refused."""
    if not isinstance(preset, str) or not _PLAIN_NAME.fullmatch(preset) or preset.endswith((".", " ")):
        raise InputError(f"the preset name {str(preset)[:80]!r} is not a plain name", field="preset",
                         fix="Use letters, digits and . _ - (e.g. local), at most 80 characters")
    return preset


def key_for(network: str, input_shape, batch_size: int) -> str:
    dims = "x".join(str(int(s)) for s in list(input_shape)[1:])
    return f"{file_stem(network)}-{dims}-b{int(batch_size)}"


def user_timings_path(network: str, input_shape, batch_size: int, preset: str = "local") -> Path:
    return user_dir() / "timings" / check_preset(preset) / f"{key_for(network, input_shape, batch_size)}.json"


def check_timings(doc, source: str | None = None) -> dict:
    """A parsed timings document, checked: format, network, every time a finite non-negative number."""
    doc = require_mapping(doc, source=source, field=None, what="a timing table")
    if doc.get("format") != FORMAT:
        raise InputError(f"unknown format {doc.get('format')!r}", source=source, field="format",
                         fix=f'Set "format": "{FORMAT}" (placement calibrate writes these files)')
    for key in ("network", "batch_size", "ops"):
        if key not in doc:
            raise InputError(f"missing {key!r}", source=source, field=key, fix="Use a file written by placement "
                                                                                  "calibrate")
    require_name(doc["network"], source=source, field="network")
    batch = doc["batch_size"]
    if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= MAX_BATCH:
        raise InputError(f"must be an integer from 1 to {MAX_BATCH}, got {_short(batch)}", source=source,
                         field="batch_size", fix="Use a file written by placement calibrate")
    shape = doc.get("input_shape")
    if shape is not None and not (isinstance(shape, list) and all(
            isinstance(d, int) and not isinstance(d, bool) and 0 <= d <= MAX_DIM for d in shape)):
        raise InputError(f"must be a list of integers from 0 to {MAX_DIM}, got {_short(shape)}", source=source,
                         field="input_shape", fix="Use a file written by placement calibrate")
    ops = require_mapping(doc["ops"], source=source, field="ops", what="op -> device -> times")
    for op, per_device in ops.items():
        per_device = require_mapping(per_device, source=source, field=f"ops.{op}", what="device -> times")
        for dev, phases in per_device.items():
            phases = require_mapping(phases, source=source, field=f"ops.{op}.{dev}", what='{"fwd": s, ...}')
            for ph, t in phases.items():
                if ph in AT.values():
                    _check_points(t, source, f"ops.{op}.{dev}.{ph}")
                    continue
                if ph not in KEYS:
                    raise InputError(f"unknown phase {ph!r}", source=source, field=f"ops.{op}.{dev}",
                                     fix='Use "fwd", "bwd" or "update" (and "fwd_fixed", "bwd_fixed": the part '
                                         'of a time that does not shrink with the batch; "fwd_at", "bwd_at": '
                                         'times at fractions of the batch; "fwd_spread", "bwd_spread": how much '
                                         'the time moved between calibration rounds, relative)')
                require_number(t, source=source, field=f"ops.{op}.{dev}.{ph}",
                               maximum=MAX_SPREAD if ph in SPREAD.values() else 1e7)
            for ph, key in FIXED.items():
                if key in phases and phases[key] > phases.get(ph, 0.0):
                    raise InputError(f"{key} is {phases[key]:g} s, more than the whole {ph} time "
                                     f"({phases.get(ph, 0.0):g} s)", source=source, field=f"ops.{op}.{dev}.{key}",
                                     fix=f"Give {key} at most {ph}'s time (it is the part of {ph} that does not "
                                         "shrink with the batch), or leave it out")
    return doc


def _check_points(points, source: str | None, at: str) -> None:
    points = require_mapping(points, source=source, field=at, what='{"0.5": seconds, ...}')
    if len(points) > MAX_POINTS:
        raise InputError(f"{len(points)} fractions, at most {MAX_POINTS}", source=source, field=at,
                         fix="Keep the fractions placement calibrate measured")
    for f, v in points.items():
        try:
            fraction = float(f)
        except ValueError:
            fraction = float("nan")
        if not 0.0 < fraction < 1.0:
            raise InputError(f"{_short(f)} is not a fraction between 0 and 1", source=source, field=at,
                             fix='Key each time by the fraction of the batch it was measured at, e.g. "0.25"')
        require_number(v, source=source, field=f"{at}.{f}", maximum=1e7)


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def read_timings(path: str | Path) -> dict:
    return check_timings(read_json(path), source=str(path))


def write_timings(path: str | Path, doc: dict) -> None:
    write_json(path, check_timings(doc))


def timing_table(doc: dict, graph: Graph, groups: Mapping[str, list[str]] | None = None) -> dict:
    """The ``ops`` table for ``graph``, or an error when it was measured for another network or batch.

    A coarsened network (``groups``: group -> member ops) gets each group's
    times as the sum of its members'.
    """
    where = "timings"
    if doc["network"] != graph.name or int(doc["batch_size"]) != graph.batch_size:
        raise InputError(f"the timings are for {doc['network']} at batch {doc['batch_size']}, not {graph.name} at "
                         f"batch {graph.batch_size}", field=where,
                         fix="Calibrate this network at this batch size (placement calibrate --model ...)")
    shape = input_shape_of(graph)
    if doc.get("input_shape") and shape and tuple(doc["input_shape"][1:]) != tuple(shape[1:]):
        raise InputError(f"the timings are for inputs of shape {doc['input_shape'][1:]}, the network's are "
                         f"{list(shape[1:])}", field=where, fix="Calibrate at the network's input size")
    ops = doc["ops"]
    if groups is None:
        missing = [op.name for op in graph.ops if op.name not in ops]
        if missing:
            raise InputError(f"the timings have no entry for op(s) {', '.join(missing[:5])}", field=where,
                             fix="Calibrate the same model the network was imported from")
        return {op.name: ops[op.name] for op in graph.ops}
    table: dict[str, dict[str, dict[str, float]]] = {}
    for group, members in groups.items():
        if not members:
            raise InputError(f"group {group!r} has no ops", field=where,
                             fix="Every group needs at least one op; write the mapping again with import-model "
                                 "--groups")
        absent = [m for m in members if m not in ops]
        if absent:
            raise InputError(f"the timings have no entry for op {absent[0]!r} of group {group!r}", field=where,
                             fix="Calibrate the model the coarsened network was made from")
        devices = set.intersection(*(set(ops[m]) for m in members))
        keys = [k for k in KEYS if k not in SPREAD.values()
                and (k in PHASES or any(k in ops[m][d] for m in members for d in devices))]
        table[group] = {d: {ph: sum(ops[m][d].get(ph, 0.0) for m in members) for ph in keys} for d in devices}
        for d in devices:  # members' independent spreads: their standard deviations add in quadrature
            for ph, key in SPREAD.items():
                if any(key in ops[m][d] for m in members) and table[group][d].get(ph, 0.0) > 0:
                    sd = sum((ops[m][d].get(key, 0.0) * ops[m][d].get(ph, 0.0)) ** 2 for m in members) ** 0.5
                    table[group][d][key] = sd / table[group][d][ph]
        for d in devices:  # a group's time at a fraction: its members' sum, where every member was measured there
            for key in AT.values():
                fractions = [set(ops[m][d].get(key) or ()) for m in members]
                common = set.intersection(*fractions) if all(fractions) else set()
                if common:
                    table[group][d][key] = {f: sum(ops[m][d][key][f] for m in members) for f in sorted(common)}
    return table


def saved_calibrations(graph: Graph) -> dict[str, Path]:
    """The saved calibrations (preset name -> file) measured for ``graph``'s network, input and batch."""
    shape = input_shape_of(graph)
    if shape is None:
        return {}
    name = f"{key_for(graph.name, shape, graph.batch_size)}.json"
    root = user_dir() / "timings"
    if not root.is_dir():
        return {}
    # every preset folder looked into by name: the network's name is text, never a glob pattern
    return {folder.name: folder / name for folder in sorted(root.iterdir())
            if folder.is_dir() and (folder / name).is_file()}


def load_timings(spec: str, graph: Graph, groups: Mapping[str, list[str]] | None = None) -> dict:
    """The table for ``graph`` from a file, or from the saved calibration of a preset (``local``)."""
    path = Path(spec)
    if not path_exists(path, "timings"):  # a FIFO or device is a path too: reading it says what is wrong
        shape = input_shape_of(graph)
        if shape is None:
            raise InputError(f"{spec!r} is not a file, and {graph.name} has no single input to look it up by",
                             field="timings", fix="Give the timings.json written by placement calibrate")
        path = user_timings_path(graph.name, shape, graph.batch_size, preset=spec)
        if not path.is_file():
            raise InputError(f"no saved calibration {spec!r} for {graph.name} at input {list(shape[1:])}, batch "
                             f"{graph.batch_size}", field="timings",
                             fix="Run placement calibrate for this model, input shape and batch size")
    return timing_table(read_timings(path), graph, groups)
