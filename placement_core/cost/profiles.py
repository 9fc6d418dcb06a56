"""Cost profiles: how long an op takes on a device and a tensor on a channel.

A profile turns (graph, device graph) into dense arrays once per problem:
forward/backward/update time of every op on every device, plus per-channel
latency and inverse rate. The simulator never calls back into Python for a
cost, which is what keeps an evaluation in the tens of microseconds.

Measured times (an op's ``times`` in the network file, or a calibration table)
replace the formula for that op on that device; likewise a channel's measured
``transfer_curve`` replaces latency + bytes / (bandwidth · η_comm) for that channel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ..model.devices import DeviceGraph, curve_time
from ..base.errors import InputError
from ..model.graph import Graph
from . import gemm, training_state
from .timings import scaled

# {op name: {device name or kind: {"fwd": s, "bwd": s, "update": s}}}
TimingTable = Mapping[str, Mapping[str, Mapping[str, float]]]


@dataclass(frozen=True)
class CostArrays:
    fwd: np.ndarray  # [ops, devices] seconds
    bwd: np.ndarray
    update: np.ndarray
    weight_copies: float  # bytes resident per byte of weights (2 = weights + gradients; cost.training_state)
    ch_latency: np.ndarray  # [channels] seconds
    ch_inv_rate: np.ndarray  # [channels] seconds per byte
    min_transfer: np.ndarray  # [devices] shortest transfer the sender can make, seconds
    input_gradients: bool = False  # send gradients back to the network's input op too
    # [devices] seconds a device spends on each message it sends or receives; None: each device's own
    # ``message_overhead`` (a device property that every profile applies; a profile may override it)
    message_overhead: np.ndarray | None = None
    # Channels' measured transfer curves, packed: channel c's points are [curve_ptr[c], curve_ptr[c + 1]) of
    # curve_bytes / curve_time; a channel without points uses latency + bytes * inv_rate. None: no curves.
    curve_ptr: np.ndarray | None = None  # [channels + 1] int32
    curve_bytes: np.ndarray | None = None
    curve_time: np.ndarray | None = None

    def transfer_time(self, ch: int, nbytes: float, src: int) -> float:
        return transfer_time(self, ch, nbytes, src)


def transfer_time(a, ch: int, nbytes: float, src: int) -> float:
    """Seconds for ``nbytes`` from device ``src`` on channel ``ch`` of cost arrays ``a`` (CostArrays, or the
    simulator's Compiled, which carries the same fields), exactly as both simulators charge it."""
    if a.curve_ptr is not None and a.curve_ptr[ch + 1] > a.curve_ptr[ch]:
        lo, hi = int(a.curve_ptr[ch]), int(a.curve_ptr[ch + 1])
        t = curve_time(list(zip(a.curve_bytes[lo:hi].tolist(), a.curve_time[lo:hi].tolist())), nbytes)
    else:
        t = float(a.ch_latency[ch]) + nbytes * float(a.ch_inv_rate[ch])
    return max(t, float(a.min_transfer[src]))


def curve_arrays(devices: DeviceGraph, scale=None) -> dict:
    """The channels' transfer curves as CostArrays' packed fields ({} when no channel has one).
    ``scale`` (per channel) makes a channel that many times as wide: the time above the first point's
    (the latency) is divided by it, as a what-if on bandwidth divides the formula's seconds per byte."""
    if not any(c.transfer_curve for c in devices.channels):
        return {}
    ptr, nbytes, times = [0], [], []
    for j, c in enumerate(devices.channels):
        f = 1.0 if scale is None else float(scale[j])
        t0 = c.transfer_curve[0][1] if c.transfer_curve else 0.0
        for b, t in c.transfer_curve:
            nbytes.append(b)
            times.append(t if f == 1.0 else t0 + (t - t0) / f)
        ptr.append(len(nbytes))
    return {"curve_ptr": np.array(ptr, dtype=np.int32), "curve_bytes": np.array(nbytes, dtype=float),
            "curve_time": np.array(times, dtype=float)}


@dataclass(frozen=True)
class RooflineProfile:
    """docs/design.md §4, default: max(compute, memory) per op, latency + bytes/effective bandwidth per transfer.

    The efficiencies apply where a device or link has no measured rate (``Device.achieved``,
    ``Channel.achieved_bandwidth``): a measurement wins over a formula, as measured op times and transfer
    curves do."""

    comp_efficiency: float = 0.9
    comm_efficiency: float = 0.25
    timings: TimingTable = field(default_factory=dict)
    timings_batch: int = 0  # the batch the timings were measured at (0: the graph's own)
    name: str = "default"
    gather_copies: float = 2.0  # a sharded output's gather (concatenation) reads and writes it once
    # what training keeps and updates per parameter (cost.training_state): "sgd" (weights and gradients, the
    # thesis' model) or "adam"; the ZeRO stage partitions it over a data-parallel group (batch-split ops)
    optimizer: str = "sgd"
    zero: int = 0

    def arrays(self, graph: Graph, devices: DeviceGraph) -> CostArrays:
        # the rate of the datatype the network trains in (a device's bf16 tensor-core rate, say): a measured one
        # where the device has it, else the datasheet's peak times the compute efficiency
        peak = np.array([d.rate_for(graph.precision, self.comp_efficiency) for d in devices.devices])
        bw = np.array([d.mem_bandwidth for d in devices.devices])
        fwd_fl = np.array([o.fwd_flops for o in graph.ops])[:, None]
        bwd_fl = np.array([o.bwd_flops for o in graph.ops])[:, None]
        factors = gemm.time_factors(graph, devices)  # tiles and waves, on devices that count their SMs
        if factors is not None:
            fwd_fl, bwd_fl = fwd_fl * factors[0], bwd_fl * factors[1]
        mem = np.array([o.mem_bytes for o in graph.ops])[:, None]
        params = np.array([o.param_bytes for o in graph.ops])[:, None]
        fwd = np.maximum(fwd_fl / peak, mem / bw)
        bwd = np.maximum(bwd_fl / peak, 2.0 * mem / bw)
        update_copies = training_state.update_copies(self.optimizer, graph.precision)
        update = update_copies * params / bw
        # a measured update is SGD's (placement calibrate steps SGD): another optimizer moves more bytes
        fwd, bwd, update = _apply_measured(graph, devices, fwd, bwd, update, self.timings, self.timings_batch,
                                           update_scale=update_copies / 3.0)
        lat = np.array([c.latency for c in devices.channels], dtype=float)
        inv = np.array([1.0 / c.rate(self.comm_efficiency) for c in devices.channels], dtype=float)
        copies = training_state.resident_copies(self.optimizer, graph.precision)
        return CostArrays(fwd, bwd, update, copies, lat, inv, np.zeros(len(devices)), **curve_arrays(devices))


@dataclass(frozen=True)
class Exprimo2020Profile:
    """The thesis' published implementation (Exprimo on Paleo), reproduced term by term.

    Op time = compute term + one term per tensor read or written; each
    non-zero term lasts at least one clock cycle; "G" is 2^30 in bandwidths;
    the compute efficiency divides the memory terms too; no weight update and
    no transfer latency. Ops imported from Exprimo files carry their exact
    terms; other networks fall back to their own FLOPs with input, weight and
    output tensors as memory terms. A channel's measured transfer curve, when a
    device graph has one (the thesis' files do not), replaces the formula here too.
    """

    comp_efficiency: float = 0.9
    comm_efficiency: float = 0.25
    timings: TimingTable = field(default_factory=dict)
    timings_batch: int = 0
    name: str = "exprimo-2020"
    gather_copies: float = 0.0  # Exprimo's Concatenate ops of shards cost nothing

    def arrays(self, graph: Graph, devices: DeviceGraph) -> CostArrays:
        n, d = len(graph), len(devices)
        peak = np.array([dev.peak_flops for dev in devices.devices])
        # mem_bandwidth is bytes/s = GB/s * 1e9; Exprimo divides by GB/s * 2^30.
        mem_rate = np.array([dev.mem_bandwidth for dev in devices.devices]) / 1e9 * 2**30
        cycle = np.array([1.0 / dev.clock_hz if dev.clock_hz else 0.0 for dev in devices.devices])
        eff = self.comp_efficiency
        fwd = np.zeros((n, d))
        bwd = np.zeros((n, d))
        for i, op in enumerate(graph.ops):
            terms = op.exprimo or _fallback_terms(graph, i)
            for out, phase in ((fwd, "fwd"), (bwd, "bwd")):
                flops, mem = terms[phase]
                total = np.zeros(d)
                if flops > 0:
                    total += np.maximum(flops / peak / eff, cycle)
                for b in mem:
                    if b > 0:
                        total += np.maximum(b / mem_rate / eff, cycle)
                out[i] = total
        update = np.zeros((n, d))
        fwd, bwd, update = _apply_measured(graph, devices, fwd, bwd, update, self.timings, self.timings_batch)
        lat = np.zeros(len(devices.channels))
        # Gbit/s -> bytes/s with G = 2^30: bandwidth_bytes * 8 / 1e9 * 2^30 / 8.
        inv = np.array([1.0 / (c.bandwidth / 1e9 * 2**30 * self.comm_efficiency) for c in devices.channels])
        return CostArrays(fwd, bwd, update, 1, lat, inv, cycle, input_gradients=True, **curve_arrays(devices))


def _fallback_terms(graph: Graph, i: int) -> dict:
    op = graph.ops[i]
    ins = [graph.edge_bytes(p, i) for p in graph.parents[i]]
    return {"fwd": (op.fwd_flops, ins + [op.param_bytes, op.output_bytes]),
            "bwd": (op.bwd_flops, [op.output_bytes, op.param_bytes] + ins)}


def _apply_measured(graph: Graph, devices: DeviceGraph, fwd, bwd, update, table: TimingTable,
                    table_batch: int = 0, update_scale: float = 1.0):
    """Measured times win over formulas: calibration table > op's own times; name > kind.

    A table measured at another batch (``table_batch``; a pipeline simulates micro-batches of the
    calibrated batch) has its forward and backward times scaled to the graph's batch: linearly, as
    :meth:`Graph.with_batch_size` does for an op's own times, except for the part the table says does not
    shrink with the batch (:func:`timings.scaled`); weight updates do not depend on the batch.
    """
    arrays = {"fwd": fwd, "bwd": bwd, "update": update}
    k = graph.batch_size / table_batch if table_batch else 1.0
    # a device takes its kind's times, then its own name's; a cluster's thousands of GPUs share a kind, so each
    # entry is scaled once and written to every column it applies to
    by_kind: dict[str, list[int]] = {}
    for j, dev in enumerate(devices.devices):
        by_kind.setdefault(dev.kind, []).append(j)
    columns = {kind: np.array(cols) for kind, cols in by_kind.items()}
    by_name = {dev.name: j for j, dev in enumerate(devices.devices)}
    for i, op in enumerate(graph.ops):
        measured = table.get(op.name, {}) if table else {}
        if not (op.times or measured):
            continue
        for src, scale, upd in ((op.times, 1.0, 1.0), (measured, k, update_scale)):
            for key in (key for key in src if key in columns):
                for phase, t in scaled(src[key], scale, update=upd).items():
                    arrays[phase][i, columns[key]] = t
            for key in (key for key in src if key in by_name):
                for phase, t in scaled(src[key], scale, update=upd).items():
                    arrays[phase][i, by_name[key]] = t
    return fwd, bwd, update


PROFILES = {"default": RooflineProfile, "exprimo-2020": Exprimo2020Profile}


def get_profile(name: str = "default", *, comp_efficiency: float | None = None,
                comm_efficiency: float | None = None, timings: TimingTable | None = None,
                timings_batch: int | None = None, optimizer: str = "sgd", zero: int = 0):
    if name not in PROFILES:
        raise InputError(f"unknown cost profile {name!r}", field="profile",
                         fix="Use one of: " + ", ".join(PROFILES))
    kwargs = {}
    training_state.check(optimizer, zero)
    if (optimizer, zero) != ("sgd", 0):
        if name != "default":
            raise InputError(f"the {name} profile models the thesis' training state only (weights and "
                             "gradients)", field="optimizer", fix="Use --profile default with --optimizer/--zero")
        kwargs.update(optimizer=optimizer, zero=int(zero))
    for key, value in (("comp_efficiency", comp_efficiency), ("comm_efficiency", comm_efficiency)):
        if value is not None:
            if not (isinstance(value, (int, float)) and 0 < value <= 1):
                raise InputError(f"{key.replace('_', ' ')} must be in (0, 1], got {value!r}", field=key,
                                 fix="Use a fraction such as 0.25")
            kwargs[key] = float(value)
    if timings:
        kwargs["timings"] = timings
        if timings_batch:
            kwargs["timings_batch"] = int(timings_batch)
    return PROFILES[name](**kwargs)
