"""Sharded ops: one op split over several devices along its batch or its output channels.

A placement stays an int32 array (what optimizers mutate and the kernel reads). A gene below the
number of devices d is a device; a gene ``d + t`` is split ``t`` of the problem's split table, a
tuple of :class:`Split` values (docs/sharding.md). ``channel`` splits the output channels and the
weights (every shard reads the whole input; consumers gather the slices), ``batch`` splits the
samples (weights replicated, their gradients all-reduced over a ring of the shards' devices).
Sizes are the shards' channel or sample counts; without them the division is even, as Exprimo's
(``C // k``, one more for each of the first ``C mod k`` shards).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .devices import DeviceGraph
from ..base.errors import InputError
from .graph import Graph, Op

DIMS = ("channel", "batch")
# Ops whose output channels are their weights' columns: a channel split divides FLOPs and weights.
CHANNEL_KINDS = ("conv", "deconv", "linear", "matmul")
MAX_SHARDS = 64
# Genes travel as one byte between processes (parallel/wire.py): devices plus splits stay below 256.
MAX_GENES = 256


@dataclass(frozen=True)
class Split:
    """An op's split: ``dim`` over ``devices`` (indices, shard order), ``sizes`` per shard or None (even)."""

    dim: str
    devices: tuple[int, ...]
    sizes: tuple[int, ...] | None = None

    @property
    def k(self) -> int:
        return len(self.devices)

    def to_dict(self) -> dict:
        return {"dim": self.dim, "devices": list(self.devices), "sizes": None if self.sizes is None else list(self.sizes)}

    @classmethod
    def from_dict(cls, data: Any, source: str | None = None, field: str = "splits") -> "Split":
        if not isinstance(data, dict) or set(data) - {"dim", "devices", "sizes"}:
            raise InputError("a split is an object with dim, devices and sizes", source=source, field=field)
        dim, devs, sizes = data.get("dim"), data.get("devices"), data.get("sizes")
        if dim not in DIMS:
            raise InputError(f"unknown split dimension {dim!r}", source=source, field=f"{field}.dim",
                             fix="Use " + " or ".join(DIMS))
        if not _int_list(devs, 0) or not 2 <= len(devs) <= MAX_SHARDS:
            raise InputError(f"devices must be 2 to {MAX_SHARDS} device indices, got {devs!r}", source=source,
                             field=f"{field}.devices")
        if sizes is not None and (not _int_list(sizes, 1) or len(sizes) != len(devs)):
            raise InputError(f"sizes must be one positive integer per device, got {sizes!r}", source=source,
                             field=f"{field}.sizes")
        return cls(dim, tuple(devs), None if sizes is None else tuple(sizes))


def _int_list(value: Any, low: int) -> bool:
    return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and low <= v < 2**31
                                           for v in value)


def even_sizes(total: int, k: int) -> tuple[int, ...]:
    """Exprimo's division: total // k each, one more for each of the first total mod k shards."""
    return tuple(total // k + (1 if i < total % k else 0) for i in range(k))


def extent(op: Op, graph: Graph, dim: str) -> tuple[int, str]:
    """The size of ``op``'s ``dim`` (channels or samples), or 0 and why it has none."""
    shape = tuple(op.shape)
    if dim == "batch":
        if shape and shape[0] != graph.batch_size:
            return 0, f"its output's first dimension ({shape[0]}) is not the batch ({graph.batch_size})"
        return graph.batch_size, ""
    if op.kind not in CHANNEL_KINDS or op.param_bytes <= 0:
        return 0, (f"a channel split divides an op's weights by output channel, and this {op.kind} op"
                   + (" has no weights" if op.kind in CHANNEL_KINDS else " is not a convolution or linear layer"))
    if op.groups != 1:
        return 0, (f"it is a grouped convolution ({op.groups} groups), whose output channels each read one group "
                   "of the input: only an ordinary convolution (1 group) or a linear layer splits by channel")
    if len(shape) < 2:
        return 0, "its output shape is not known (the network file gives no shape)"
    # NCHW from PyTorch (channels second); Exprimo's layers are NHWC and linear layers end in their features
    channels = shape[-1] if (op.exprimo is not None or op.kind in ("linear", "matmul")) else shape[1]
    return int(channels), ""


def shard_sizes(op: Op, graph: Graph, split: Split) -> tuple[int, ...]:
    """The split's sizes for ``op`` (checked by :func:`check_split` first)."""
    return split.sizes if split.sizes is not None else even_sizes(extent(op, graph, split.dim)[0], split.k)


def check_split(graph: Graph, devices: DeviceGraph, i: int, split: Split, *, source: str | None = None,
                field: str | None = None, allow_repeats: bool = False) -> None:
    """A split of op ``i`` that the simulator can run, or an error naming the op and what is wrong."""
    op = graph.ops[i]
    where = field or f"assignment.{op.name}"
    if split.dim not in DIMS:
        raise InputError(f"op {op.name!r}: unknown split dimension {split.dim!r}", source=source, field=where,
                         fix="Use " + " or ".join(DIMS))
    if split.k < 2:
        raise InputError(f"op {op.name!r} is split over {split.k} device(s)", source=source, field=where,
                         fix="A split needs at least two devices; give one device name for a whole op")
    if split.k > MAX_SHARDS:
        raise InputError(f"op {op.name!r} is split over {split.k} devices, more than the limit of {MAX_SHARDS}",
                         source=source, field=where, fix=f"Split it over at most {MAX_SHARDS} devices")
    bad = [d for d in split.devices if not 0 <= d < len(devices)]
    if bad:
        raise InputError(f"op {op.name!r}: device index {bad[0]} is out of range", source=source, field=where,
                         fix=f"Use indices 0..{len(devices) - 1}")
    if not allow_repeats and len(set(split.devices)) < split.k:
        twice = next(d for d in split.devices if split.devices.count(d) > 1)
        raise InputError(f"op {op.name!r}: device {devices.names[twice]!r} is listed twice", source=source,
                         field=where, fix="List each device once; sizes say how much each shard gets")
    total, why = extent(op, graph, split.dim)
    if not total:
        raise InputError(f"op {op.name!r} ({op.kind}) cannot be split by {split.dim}: {why}", source=source,
                         field=where, fix="Split it by " + ("batch" if split.dim == "channel" else "channel")
                         + " or give it one device")
    if split.sizes is None:
        if split.k > total:
            raise InputError(f"op {op.name!r} has {total} {_unit(split.dim)}, fewer than its {split.k} shards",
                             source=source, field=where, fix=f"Split it over at most {total} devices")
        return
    if len(split.sizes) != split.k:
        raise InputError(f"op {op.name!r}: {len(split.sizes)} sizes for {split.k} devices", source=source,
                         field=f"{where}.sizes", fix="Give one size per device")
    if min(split.sizes) < 1:
        raise InputError(f"op {op.name!r}: sizes {list(split.sizes)} give a shard nothing", source=source,
                         field=f"{where}.sizes", fix="Every shard needs a size of at least 1; leave the device out")
    if sum(split.sizes) != total:
        raise InputError(f"op {op.name!r}: sizes {list(split.sizes)} add up to {sum(split.sizes)}, but the op has "
                         f"{total} {_unit(split.dim)}", source=source, field=f"{where}.sizes",
                         fix=f"Give positive sizes that add up to {total}, or leave sizes out for an even split")


def _unit(dim: str) -> str:
    return "output channels" if dim == "channel" else "samples in its batch"


def search_splits(devices: DeviceGraph, dims: Sequence[str], max_shards: int) -> tuple[Split, ...]:
    """The splits a search may choose: every window of 2..max_shards consecutive devices of one kind
    (so a split never mixes a CPU with GPUs), for each dimension, even sizes."""
    for dim in dims:
        if dim not in DIMS:
            raise InputError(f"unknown split dimension {dim!r}", field="--sharding", fix="Use channel, batch or both")
    if isinstance(max_shards, bool) or not isinstance(max_shards, int) or not 2 <= max_shards <= MAX_SHARDS:
        raise InputError(f"--max-shards must be an integer from 2 to {MAX_SHARDS}, got {max_shards!r}",
                         field="--max-shards")
    runs: list[list[int]] = []
    for i, dev in enumerate(devices.devices):
        if runs and devices.devices[runs[-1][-1]].kind == dev.kind:
            runs[-1].append(i)
        else:
            runs.append([i])
    sets = [tuple(run[s:s + k]) for k in range(2, max_shards + 1) for run in runs for s in range(len(run) - k + 1)]
    if not sets:
        raise InputError(f"device graph {devices.name!r} has no two devices of one kind to split an op over",
                         field="--sharding", fix="Use a device graph with several GPUs")
    table = tuple(Split(dim, s) for dim in dims for s in sets)
    if len(devices) + len(table) > MAX_GENES:
        raise InputError(f"{len(table)} splits and {len(devices)} devices make more than {MAX_GENES} genes",
                         field="--max-shards", fix="Lower --max-shards or choose one dimension")
    return table


def merge_splits(table: Sequence[Split], extra: Sequence[Split]) -> tuple[tuple[Split, ...], dict[int, int]]:
    """``table`` followed by the splits of ``extra`` it lacks, and where each of ``extra`` went."""
    out = list(table)
    where = {}
    for j, s in enumerate(extra):
        if s not in out:
            out.append(s)
        where[j] = out.index(s)
    return tuple(out), where


def applicable(graph: Graph, devices: DeviceGraph, table: Sequence[Split]) -> np.ndarray:
    """``[ops, splits]`` booleans: may op i take split t (what a search may draw)."""
    totals = {dim: np.array([extent(op, graph, dim)[0] for op in graph.ops]) for dim in {s.dim for s in table}}
    ok = np.zeros((len(graph), len(table)), dtype=bool)
    for t, s in enumerate(table):
        if s.sizes is None:
            ok[:, t] = totals[s.dim] >= s.k
        else:
            ok[:, t] = totals[s.dim] == sum(s.sizes)
    return ok


def gene_entry(gene: int, names: Sequence[str], table: Sequence[Split] = ()):
    """A gene as placement/1 writes it: a device name, or ``{"devices": [...], "split": dim[, "sizes"]}``."""
    if gene < len(names):
        return names[gene]
    s = table[gene - len(names)]
    return {"devices": [names[d] for d in s.devices], "split": s.dim} | (
        {"sizes": list(s.sizes)} if s.sizes is not None else {})


def gene_label(gene: int, names: Sequence[str], table: Sequence[Split] = ()) -> str:
    """A gene in a few characters: ``gpu0``, ``batch:gpu0+gpu1``."""
    if gene < len(names):
        return names[gene]
    s = table[gene - len(names)]
    return f"{s.dim}:" + "+".join(names[d] for d in s.devices)


def used_devices(placements, n_devices: int, table: Sequence[Split] = ()) -> list[int]:
    """Every device index some gene of ``placements`` runs on, sorted."""
    genes = np.unique(np.asarray(placements))
    return sorted({d for g in genes.tolist() for d in gene_devices(int(g), n_devices, table)})


def gene_devices(gene: int, n_devices: int, table: Sequence[Split]) -> tuple[int, ...]:
    """The devices a gene runs on: one, or a split's in shard order."""
    return (int(gene),) if gene < n_devices else table[gene - n_devices].devices

