"""Sharded ops in the simulator: the split table compiled once per problem, and a placement expanded
into the task graph it runs (docs/sharding.md, docs/design.md §5).

A placement with split genes runs as a larger graph of *virtual ops*: an unsharded op stays one; a
split op becomes one shard per device; where a consumer needs pieces of several shards a *gather*
(a concatenation on the consumer's device) collects them. The event loop then runs that graph with
its usual rules (a forward sends its output once to each other device with a consumer; a backward
sends the summed gradients per device), plus one: after the last shard of a batch-split op with
weights finishes its backward, a ring all-reduce sends 2(k-1)/k of the weights' bytes from each shard's
device to the next one's, and the shards' weight updates wait for all of it (a cluster plan's profile instead
charges each shard's update its collective's time: :func:`charged_allreduces`).

``expand`` is the readable version the Python reference runs; the kernel (``_kernel.c``) builds the
same arrays in C, in the same order, and tests compare the two.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from ..model.devices import DeviceGraph
from ..model.graph import Graph
from ..model.sharding import Split, applicable, shard_sizes
from ..cost.shards import gather_rate, shard_costs
from ..cost.training_state import resident_copies
from .model import Compiled, SimSettings

CHANNEL, BATCH = 0, 1
GATHER = -1  # a virtual op's shard index when it is a gather


@dataclass
class ShardArrays:
    """The split table as flat arrays the kernel reads (one problem; ``T`` splits)."""

    T: int
    opt_dim: np.ndarray  # int32 [T]: CHANNEL or BATCH
    opt_ptr: np.ndarray  # int32 [T + 1] into opt_dev
    opt_dev: np.ndarray  # int32: each split's devices in shard order
    entry: np.ndarray  # int32 [ops * T]: op i's first shard row for split t, -1 if it cannot take it
    blo: np.ndarray  # float64 [rows]: the shard's batch interval [blo, bhi) as fractions of the batch
    bhi: np.ndarray
    cf: np.ndarray  # the shard's fraction of the output channels (1 for a batch shard)
    fwd: np.ndarray  # seconds on the shard's device
    bwd: np.ndarray
    upd: np.ndarray
    static: np.ndarray  # resident weight bytes
    ar_bytes: np.ndarray  # float64 [ops]: an op's weight-gradient bytes (what a batch split all-reduces)
    gather_rate: np.ndarray  # float64 [devices]: seconds per byte of a gather
    allowed: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))  # [ops, T]
    # float64 [ops * T]: op i's all-reduce under batch split t from the device graph's measured curve for the
    # split's devices, alone and while a member device computes; -1: no curve (the ring of messages).
    # None: no split has a curve.
    ar_alone: np.ndarray | None = None
    ar_busy: np.ndarray | None = None


def compile_shards(graph: Graph, devices: DeviceGraph, profile, costs, table: Sequence[Split]) -> ShardArrays:
    n, T = len(graph), len(table)
    allowed = applicable(graph, devices, table)
    requests: dict[tuple[int, str, float], int] = {}
    rows = []  # (op, split, shard, blo, bhi, cf, fraction)
    entry = np.full(n * T, -1, dtype=np.int32)
    for i in range(n):
        for t in np.flatnonzero(allowed[i]):
            s = table[t]
            sizes = shard_sizes(graph.ops[i], graph, s)
            total = sum(sizes)
            entry[i * T + t] = len(rows)
            lo = 0
            for j, size in enumerate(sizes):
                f = size / total
                if s.dim == "batch":
                    rows.append((i, t, j, lo / total, (lo + size) / total, 1.0, f))
                else:
                    rows.append((i, t, j, 0.0, 1.0, f, f))
                lo += size
                requests.setdefault((i, s.dim, f), len(requests))
    req = list(requests)
    arrays = shard_costs(profile, graph, devices, req) if req else None
    weight_copies = costs.weight_copies
    optimizer, zero = getattr(profile, "optimizer", "sgd"), getattr(profile, "zero", 0)
    R = len(rows)
    out = {key: np.zeros(R) for key in ("blo", "bhi", "cf", "fwd", "bwd", "upd", "static")}
    charged = charged_allreduces(graph, devices, profile, table)
    for r, (i, t, j, blo, bhi, cf, f) in enumerate(rows):
        s = table[t]
        dev = s.devices[j]
        q = requests[(i, s.dim, f)]
        out["blo"][r], out["bhi"][r], out["cf"][r] = blo, bhi, cf
        out["fwd"][r], out["bwd"][r], out["upd"][r] = arrays.fwd[q, dev], arrays.bwd[q, dev], arrays.update[q, dev]
        params = graph.ops[i].param_bytes * (f if s.dim == "channel" else 1.0)
        if s.dim == "batch" and zero:  # a data-parallel replica keeps and updates its part of the state
            out["static"][r] = params * resident_copies(optimizer, graph.precision, zero, s.k)
            out["upd"][r] /= s.k
        else:
            out["static"][r] = params * weight_copies
        if t in charged:
            out["upd"][r] += charged[t][i]
    ptr = np.zeros(T + 1, dtype=np.int32)
    ptr[1:] = np.cumsum([s.k for s in table]) if T else []
    ar_alone, ar_busy = allreduce_times(graph, devices, table, allowed) if not charged else (None, None)
    ar_bytes = np.array([0.0 if charged else o.param_bytes for o in graph.ops], dtype=float)
    return ShardArrays(
        T=T, opt_dim=np.array([CHANNEL if s.dim == "channel" else BATCH for s in table], dtype=np.int32),
        opt_ptr=ptr, opt_dev=np.array([d for s in table for d in s.devices], dtype=np.int32),
        entry=entry, ar_bytes=ar_bytes,
        gather_rate=gather_rate(profile, devices), allowed=allowed, ar_alone=ar_alone, ar_busy=ar_busy, **out)


def charged_allreduces(graph: Graph, devices: DeviceGraph, profile, table: Sequence[Split]) -> dict:
    """Split index -> [ops] seconds each of its batch shards' updates adds for the gradients' all-reduce, where
    the profile times it by a collective model (``batch_gradient_seconds``: a cluster plan's,
    optimize.plan_fold); then no split sends a ring of messages ({} otherwise: the ring as before)."""
    hook = getattr(profile, "batch_gradient_seconds", None)
    if hook is None:
        return {}
    out = {}
    for t, s in enumerate(table):
        seconds = hook(graph, devices, s) if s.dim == "batch" else None
        if seconds is not None:
            out[t] = np.asarray(seconds, dtype=float)
    return out


def allreduce_times(graph: Graph, devices: DeviceGraph, table: Sequence[Split], allowed: np.ndarray):
    """Per (op, split): seconds of the op's weight-gradient all-reduce from the ``allreduce`` curve declared
    for the split's set of devices (alone, busy), -1 where none applies; (None, None) when none applies
    anywhere, so that a device graph without curves runs exactly as before.

    The gradients are summed in one bucket, as DDP and the project's runner do, not one call per tensor: an
    op pays its share of the bucket's time, ``curve(W) * w / W`` with ``W`` the parameter bytes of every op
    that may be split over those devices (the whole model for data parallelism, where the shares add up to
    the one bucket's measured time; a placement that splits fewer ops is charged at the large bucket's rate
    per byte, a lower bound). One call per tensor charged ResNet-18's data parallelism 386 ms of all-reduce
    on two CPU ranks against 40-75 ms measured for its one 46.8 MB bucket (docs/e5.md)."""
    n, T = len(graph), len(table)
    alone = np.full(n * T, -1.0)
    busy = np.full(n * T, -1.0)
    found = False
    for t, s in enumerate(table):
        if s.dim != "batch" or len(set(s.devices)) < 2:
            continue
        curve = devices.collective("allreduce", s.devices)
        if curve is None:
            continue
        ops = np.flatnonzero(allowed[:, t])
        bucket = float(sum(graph.ops[i].param_bytes for i in ops))
        if bucket <= 0.0:
            continue
        rate_alone, rate_busy = curve.time(bucket) / bucket, curve.time(bucket, busy=True) / bucket
        for i in ops:
            w = float(graph.ops[i].param_bytes)
            if w > 0.0:
                alone[i * T + t] = rate_alone * w
                busy[i * T + t] = rate_busy * w
                found = True
    return (alone, busy) if found else (None, None)


@dataclass
class Expanded:
    """A placement's task graph: virtual ops as a :class:`Compiled`, where each runs, and what it stands for."""

    compiled: Compiled
    place: list[int]
    op: list[int]  # the original op of each virtual op (a gather: its consumer's)
    shard: list[int]  # shard index, 0 for a whole op, GATHER for a gather
    source: list[int]  # a gather's producer op; -1 otherwise
    # all-reduce groups: (members (virtual ops), ring messages [(src, dst, bytes)], measured times (alone,
    # busy) or None). With measured times the group sends one message of the weights' bytes from the split's
    # first device to the next different one, which lasts the measured time (docs/sharding.md).
    rings: list[tuple[list[int], list[tuple[int, int, float]], tuple[float, float] | None]]


def expand(c: Compiled, sh: ShardArrays, genes: Sequence[int], training: bool = True) -> Expanded:
    n, nd, T = c.n_ops, c.n_dev, sh.T
    v_place, v_op, v_shard, v_src = [], [], [], []
    v_fwd, v_bwd, v_upd, v_out, v_static, v_hasu = [], [], [], [], [], []
    v_par: list[list[tuple[int, float, float]]] = []
    v_blo, v_bhi, v_cf = [], [], []
    first = [0] * n
    count = [1] * n
    rings = []

    def add(dev, op, shard, src, fwd, bwd, upd, out, static, hasu, parents, blo, bhi, cf) -> int:
        v_place.append(dev), v_op.append(op), v_shard.append(shard), v_src.append(src)
        v_fwd.append(fwd), v_bwd.append(bwd), v_upd.append(upd), v_out.append(out), v_static.append(static)
        v_hasu.append(hasu), v_par.append(parents), v_blo.append(blo), v_bhi.append(bhi), v_cf.append(cf)
        return len(v_place) - 1

    for i in range(n):
        g = int(genes[i])
        sharded = g >= nd
        t = g - nd
        k = int(sh.opt_ptr[t + 1] - sh.opt_ptr[t]) if sharded else 1
        row = int(sh.entry[i * T + t]) if sharded else -1
        batch = sharded and sh.opt_dim[t] == BATCH
        devs = [int(sh.opt_dev[sh.opt_ptr[t] + j]) for j in range(k)] if sharded else [g]
        entries = []
        for j in range(k):
            nlo, nhi = (float(sh.blo[row + j]), float(sh.bhi[row + j])) if batch else (0.0, 1.0)
            mine = []
            for e in range(int(c.par_ptr[i]), int(c.par_ptr[i + 1])):
                p, b, gr = int(c.par_idx[e]), float(c.par_bytes[e]), float(c.par_grad[e])
                pieces = []
                for q in range(first[p], first[p] + count[p]):
                    ov = (min(v_bhi[q], nhi) - max(v_blo[q], nlo)) * v_cf[q]
                    if ov > 0.0:
                        pieces.append((q, b * ov, gr * ov))
                if len(pieces) == 1:
                    mine.append(pieces[0])
                    continue
                tb = sum(x[1] for x in pieces)
                tg = sum(x[2] for x in pieces)
                dur = tb * float(sh.gather_rate[devs[j]])
                gv = add(devs[j], i, GATHER, p, dur, dur, 0.0, tb, 0.0, 0, pieces, 0.0, 1.0, 1.0)
                mine.append((gv, tb, tg))
            entries.append(mine)
        first[i] = len(v_place)
        count[i] = k
        for j in range(k):
            if sharded:
                r = row + j
                blo, bhi, cf = float(sh.blo[r]), float(sh.bhi[r]), float(sh.cf[r])
                add(devs[j], i, j, -1, float(sh.fwd[r]), float(sh.bwd[r]), float(sh.upd[r]),
                    float(c.out_bytes[i]) * ((bhi - blo) * cf), float(sh.static[r]), int(c.has_update[i]),
                    entries[j], blo, bhi, cf)
            else:
                add(g, i, 0, -1, float(c.fwd[i * nd + g]), float(c.bwd[i * nd + g]), float(c.upd[i * nd + g]),
                    float(c.out_bytes[i]), float(c.static_mem[i]), int(c.has_update[i]), entries[j], 0.0, 1.0, 1.0)
        if batch and training and sh.ar_bytes[i] > 0.0:
            members = list(range(first[i], first[i] + k))
            if sh.ar_alone is not None and sh.ar_alone[i * T + t] >= 0.0:
                other = next(d for d in devs if d != devs[0])
                rings.append((members, [(devs[0], other, float(sh.ar_bytes[i]))],
                              (float(sh.ar_alone[i * T + t]), float(sh.ar_busy[i * T + t]))))
                continue
            nbytes = 2.0 * (k - 1) / k * float(sh.ar_bytes[i])
            msgs = [(devs[j], devs[(j + 1) % k], nbytes) for j in range(k) if devs[j] != devs[(j + 1) % k]]
            rings.append((members, msgs, None))
    # a shard is traced as its op; a gather as "gather PRODUCER → CONSUMER"
    names = [f"gather {c.op_names[src]} → {c.op_names[o]}" if src >= 0 else c.op_names[o]
             for o, src in zip(v_op, v_src)]
    return Expanded(_compiled(c, v_place, v_fwd, v_bwd, v_upd, v_out, v_static, v_hasu, v_par, v_op, names),
                    v_place, v_op, v_shard, v_src, rings)


def _compiled(c: Compiled, place, fwd, bwd, upd, out, static, hasu, parents, ops, names) -> Compiled:
    """The virtual ops as a Compiled: parents and children in order, costs on each op's own device."""
    m, nd = len(place), c.n_dev
    children: list[list[tuple[int, float, float]]] = [[] for _ in range(m)]
    for v, ps in enumerate(parents):
        for p, b, g in ps:
            children[p].append((v, b, g))

    def csr(lists):
        ptr = np.zeros(m + 1, dtype=np.int32)
        ptr[1:] = np.cumsum([len(x) for x in lists])
        flat = [x for xs in lists for x in xs]
        return (ptr, np.array([x[0] for x in flat], dtype=np.int32), np.array([x[1] for x in flat], dtype=float),
                np.array([x[2] for x in flat], dtype=float))

    par_ptr, par_idx, par_bytes, par_grad = csr(parents)
    ch_ptr, ch_idx, ch_bytes, ch_grad = csr(children)

    def per_device(values):
        arr = np.zeros((m, nd))
        arr[np.arange(m), place] = values
        return arr.ravel()

    inputs = set(int(x) for x in c.input_ops)
    return Compiled(
        n_ops=m, n_dev=nd, n_ch=c.n_ch, par_ptr=par_ptr, par_idx=par_idx, par_bytes=par_bytes, par_grad=par_grad,
        ch_ptr=ch_ptr, ch_idx=ch_idx, ch_bytes=ch_bytes, ch_grad=ch_grad,
        fwd=per_device(fwd), bwd=per_device(bwd), upd=per_device(upd),
        has_update=np.array(hasu, dtype=np.uint8), out_bytes=np.array(out, dtype=float),
        static_mem=np.array(static, dtype=float), route=c.route, ch_latency=c.ch_latency, ch_inv_rate=c.ch_inv_rate,
        min_transfer=c.min_transfer,
        input_ops=np.array([v for v in range(m) if ops[v] in inputs and not parents[v]], dtype=np.int32),
        msg_overhead=c.msg_overhead, curve_ptr=c.curve_ptr, curve_bytes=c.curve_bytes, curve_time=c.curve_time,
        shared_ptr=c.shared_ptr, shared_dev=c.shared_dev, shared_demand=c.shared_demand, shared_cap=c.shared_cap,
        shared_coll=c.shared_coll,
        op_names=tuple(names), dev_names=c.dev_names, ch_names=c.ch_names)


def expanded_settings(s: SimSettings, ex: Expanded) -> SimSettings:
    """The settings over virtual ops: each takes its original op's priority (a schedule's per unit and phase)."""
    if s.priority is None:
        return s
    n = max(ex.op) + 1  # every op has at least one virtual op
    prio = np.asarray(s.priority, dtype=float).reshape(s.units, -1, n)
    return replace(s, priority=np.ascontiguousarray(prio[:, :, ex.op]))


class RingState:
    """The ring all-reduces of an expanded placement while the reference runs it (the kernel keeps the same
    counters). A ring's messages start when its members' backwards of a unit are all done (of every unit
    of the step, with one update per step); the members' updates wait for every message."""

    def __init__(self, rings: list, units: int, per_step: bool):
        self.rings = rings
        self.of = {v: r for r, (members, _, _) in enumerate(rings) for v in members}
        self.per_step = per_step
        slots = 1 if per_step else units
        self.left = [[len(m) * (units if per_step else 1) for m, _, _ in rings] for _ in range(slots)]
        self.pending = [[0] * len(rings) for _ in range(slots)]

    def member_done(self, u: int, v: int) -> tuple[int, list, list]:
        """(ring unit, members, messages to send): members only when this was the last and nothing is to be
        sent (the ring is done); messages when this was the last; neither otherwise."""
        r, ru = self.of[v], 0 if self.per_step else u
        self.left[ru][r] -= 1
        if self.left[ru][r]:
            return ru, [], []
        members, msgs, _ = self.rings[r]
        self.pending[ru][r] = len(msgs)
        return ru, list(members), list(msgs)

    def delivered(self, ru: int, v: int) -> list:
        """One of the ring's messages arrived; the members whose updates may run now (after the last)."""
        r = self.of[v]
        self.pending[ru][r] -= 1
        return [] if self.pending[ru][r] else list(self.rings[r][0])

    def measured(self, v: int) -> tuple[list[int], tuple[float, float]] | None:
        """The members and measured (alone, busy) seconds of the all-reduce of ring member v, or None (a ring
        of messages charged by their channels)."""
        members, _, times = self.rings[self.of[v]]
        return None if times is None else (members, times)


def label_shards(trace: list, c: Compiled, sh: ShardArrays, genes) -> list:
    """The trace with each split op's events numbered by shard: an op by the device it ran on, a message by
    the device that sent it (a ring message, by its place in the ring)."""
    nd = c.n_dev
    devices = {}
    for i, g in enumerate(genes):
        if g >= nd:
            t = int(g) - nd
            devices[c.op_names[i]] = [c.dev_names[int(d)] for d in sh.opt_dev[sh.opt_ptr[t]:sh.opt_ptr[t + 1]]]
    out = []
    for e in trace:
        devs = devices.get(e.op)
        if devs is None:
            out.append(e)
            continue
        where = e.resource if e.kind == "op" else e.src
        out.append(replace(e, shard=devs.index(where) if where in devs else -1, shards=len(devs)))
    return out
