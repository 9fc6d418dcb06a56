"""What the simulator takes (compiled arrays, settings) and what it gives back."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..cost.profiles import CostArrays, transfer_time
from ..model.devices import DeviceGraph
from ..base.errors import InputError
from ..model.graph import Graph

FWD, BWD, UPD, WGT = 0, 1, 2, 3
# Under zb-h1 a backward is split: "bwd" is the input gradient (B), "wgrad" the weight gradient (W).
PHASES = ("fwd", "bwd", "update", "wgrad")
ALLREDUCE = 4  # a message's direction when it is a ring all-reduce's (docs/sharding.md)
DIRECTIONS = PHASES + ("allreduce",)  # a message's phase in a trace, by its direction

# How a schedule picks the next task beyond its static priorities (docs/design.md §5):
SCHED_STATIC = 0  # priorities and stage caps only (thesis, gpipe, 1f1b)
SCHED_INTERLEAVED = 1  # virtual stages: per-placement chunks, Megatron's order, forwards in that order
SCHED_ZB = 2  # backward split into B and W tasks; a W waits for a later micro-batch's B on its stage

ADMIT_THESIS = 0  # a new unit when every device holding an input op is idle (thesis §3.1.1)
ADMIT_EAGER = 1  # a new unit whenever fewer than units_in_flight are running

MAX_SIM_UNITS = 100_000  # units the simulator keeps state for in one run (the CLI allows fewer: cli.common.MAX_UNITS)


def check_count(value, field: str, words: str | None = None) -> int:
    """A positive whole number of at most MAX_SIM_UNITS (units, batches, batches in flight), or an InputError
    naming ``field``."""
    words = words or field.replace("_", "-")
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(f"{words} must be a positive integer, got {value!r}", field=field, fix="Use 1 or more")
    if value > MAX_SIM_UNITS:
        raise InputError(f"{words} is too large ({value})", field=field, fix=f"Use at most {MAX_SIM_UNITS}")
    return int(value)


@dataclass(frozen=True)
class SimSettings:
    """How the step is run. A *unit* is what the simulator admits and tracks: a whole batch under the thesis
    scheme, a micro-batch under a pipeline schedule. ``units`` run in all (``micro_batches`` of them make one
    batch), at most ``units_in_flight`` at a time. (``ProblemSpec.batches`` and ``in_flight`` count whole
    batches; ``schedules.schedule_settings`` turns them into units.)"""

    units: int = 1
    units_in_flight: int = 1
    forward_only: bool = False
    admission: int = ADMIT_THESIS
    update_per_step: bool = False  # one weight update after all units (micro-batching)
    # Ready-queue priority per (unit, phase, op); lower runs first, FIFO among equals.
    priority: np.ndarray | None = None
    # Per device: at most this many units with work open on it (0 = no limit).
    device_cap: np.ndarray | None = None
    # Derive the caps from each placement: devices ordered by their first op form stages
    # 0..p-1 and stage s may hold p - s units (PipeDream-flush / 1F1B).
    stage_caps: bool = False
    # Units that make up one batch (micro-batches); the reported batch time is per batch.
    micro_batches: int = 1
    schedule: str = "thesis"
    # SCHED_*: what the schedule decides per placement (chunks, orders, the W gate)
    kind: int = SCHED_STATIC
    # interleaved: a device whose ops form one run is cut into this many chunks (virtual stages)
    virtual_stages: int = 1

    @property
    def phases(self) -> int:
        """Tasks per (unit, op): forward, backward, update, and under zb-h1 the weight gradient."""
        return 4 if self.kind == SCHED_ZB else 3

    @property
    def batches(self) -> int:
        """Whole batches: ``units`` over ``micro_batches`` (what ``SimResult.batches`` reports)."""
        return self.units // self.micro_batches

    def validate(self) -> "SimSettings":
        check_count(self.units, "units")
        check_count(self.units_in_flight, "units_in_flight", "units in flight")
        if self.micro_batches < 1 or self.units % self.micro_batches:
            raise InputError(f"{self.units} units do not make whole batches of {self.micro_batches} micro-batches",
                             field="micro_batches")
        return self


@dataclass
class Compiled:
    """The problem as flat arrays: built once, read by every evaluation."""

    n_ops: int
    n_dev: int
    n_ch: int
    par_ptr: np.ndarray
    par_idx: np.ndarray
    par_bytes: np.ndarray
    par_grad: np.ndarray  # gradient bytes sent back along each parent edge
    ch_ptr: np.ndarray
    ch_idx: np.ndarray
    ch_bytes: np.ndarray
    ch_grad: np.ndarray
    fwd: np.ndarray  # [ops * devices]
    bwd: np.ndarray
    upd: np.ndarray
    has_update: np.ndarray  # uint8 [ops]
    out_bytes: np.ndarray
    static_mem: np.ndarray  # resident weight bytes per op
    route: np.ndarray  # [devices * devices] channel index, -1 on the diagonal
    ch_latency: np.ndarray
    ch_inv_rate: np.ndarray
    min_transfer: np.ndarray
    input_ops: np.ndarray
    # [devices] seconds of device time per message sent and per message received (0: none)
    msg_overhead: np.ndarray | None = None
    # [ops * devices] the weight-gradient part (W) of ``bwd``; the rest is the input gradient (B).
    # Only zb-h1 runs them as separate tasks; ops with a zero share have no W task (``has_w``).
    bwd_w: np.ndarray | None = None
    has_w: np.ndarray | None = None  # uint8 [ops]
    # channels' transfer curves, packed as in CostArrays (None: every channel uses latency + bytes * inv_rate)
    curve_ptr: np.ndarray | None = None
    curve_bytes: np.ndarray | None = None
    curve_time: np.ndarray | None = None
    # resources devices share (docs/formats.md "shared"): resource r's devices are shared_dev[shared_ptr[r] ..
    # shared_ptr[r + 1]] with those demands; None: nothing shared (every task runs at its own speed)
    shared_ptr: np.ndarray | None = None
    shared_dev: np.ndarray | None = None
    shared_demand: np.ndarray | None = None
    shared_cap: np.ndarray | None = None
    shared_coll: np.ndarray | None = None  # per resource: a measured all-reduce's demand on each member device
    op_names: tuple[str, ...] = ()
    dev_names: tuple[str, ...] = ()
    ch_names: tuple[str, ...] = ()

    def shared_arrays(self) -> dict:
        """The kernel's shared-resource arguments (none when nothing is shared)."""
        if self.shared_ptr is None:
            return {}
        return {"shared_ptr": np.ascontiguousarray(self.shared_ptr, dtype=np.int32),
                "shared_dev": np.ascontiguousarray(self.shared_dev, dtype=np.int32),
                "shared_demand": np.ascontiguousarray(self.shared_demand, dtype=float),
                "shared_cap": np.ascontiguousarray(self.shared_cap, dtype=float),
                **({} if self.shared_coll is None
                   else {"shared_collective": np.ascontiguousarray(self.shared_coll, dtype=float)})}

    def __post_init__(self) -> None:
        if self.msg_overhead is None:
            self.msg_overhead = np.zeros(self.n_dev)
        if self.bwd_w is None:
            self.bwd_w = np.zeros(self.n_ops * self.n_dev)
        if self.has_w is None:
            self.has_w = np.zeros(self.n_ops, dtype=np.uint8)

    def transfer_time(self, ch: int, nbytes: float, src: int) -> float:
        """A message's time on a channel: its curve, or latency + bytes * inv_rate; at least min_transfer."""
        return transfer_time(self, ch, nbytes, src)


def shared_arrays(devices: DeviceGraph) -> dict:
    """A device graph's shared resources as flat arrays (empty when it declares none)."""
    if not devices.shared:
        return {}
    ptr, dev, demand = [0], [], []
    for r in devices.shared:
        dev += [devices.index[d] for d in r.devices]
        demand += list(r.demands())
        ptr.append(len(dev))
    return {"shared_ptr": np.array(ptr, dtype=np.int32), "shared_dev": np.array(dev, dtype=np.int32),
            "shared_demand": np.array(demand, dtype=float),
            "shared_cap": np.array([r.capacity for r in devices.shared], dtype=float),
            "shared_coll": np.array([r.collective_demand for r in devices.shared], dtype=float)}


def compile_problem(graph: Graph, devices: DeviceGraph, costs: CostArrays) -> Compiled:
    n, d = len(graph), len(devices)
    par_ptr = np.zeros(n + 1, dtype=np.int32)
    ch_ptr = np.zeros(n + 1, dtype=np.int32)
    par_idx, par_bytes, par_grad, ch_idx, ch_bytes, ch_grad = [], [], [], [], [], []

    def grad(p: int, i: int) -> float:
        # The network's input needs no gradient (unless the profile reproduces a model that sends one).
        if not costs.input_gradients and graph.ops[p].kind == "input" and not graph.parents[p]:
            return 0.0
        return graph.edge_bytes(p, i)

    for i in range(n):
        for p in graph.parents[i]:
            par_idx.append(p)
            par_bytes.append(graph.edge_bytes(p, i))
            par_grad.append(grad(p, i))
        par_ptr[i + 1] = len(par_idx)
        for c in graph.children[i]:
            ch_idx.append(c)
            ch_bytes.append(graph.edge_bytes(i, c))
            ch_grad.append(grad(i, c))
        ch_ptr[i + 1] = len(ch_idx)
    route = np.full(d * d, -1, dtype=np.int32)
    for (a, b), c in devices.route.items():
        route[a * d + b] = c
    params = np.array([o.param_bytes for o in graph.ops], dtype=float)
    share = np.array([o.weight_grad_share for o in graph.ops], dtype=float)
    bwd = np.ascontiguousarray(costs.bwd, dtype=float)
    overhead = (costs.message_overhead if costs.message_overhead is not None
                else [dv.message_overhead for dv in devices.devices])
    return Compiled(
        n_ops=n, n_dev=d, n_ch=len(devices.channels),
        par_ptr=par_ptr, par_idx=np.array(par_idx, dtype=np.int32), par_bytes=np.array(par_bytes, dtype=float),
        par_grad=np.array(par_grad, dtype=float),
        ch_ptr=ch_ptr, ch_idx=np.array(ch_idx, dtype=np.int32), ch_bytes=np.array(ch_bytes, dtype=float),
        ch_grad=np.array(ch_grad, dtype=float),
        fwd=np.ascontiguousarray(costs.fwd, dtype=float).ravel(),
        bwd=bwd.ravel(),
        bwd_w=np.ascontiguousarray(bwd * share[:, None]).ravel(), has_w=(share > 0).astype(np.uint8),
        upd=np.ascontiguousarray(costs.update, dtype=float).ravel(),
        has_update=(costs.update > 0).any(axis=1).astype(np.uint8),
        out_bytes=np.array([o.output_bytes for o in graph.ops], dtype=float),
        static_mem=params * costs.weight_copies,
        route=route,
        ch_latency=np.asarray(costs.ch_latency, dtype=float),
        ch_inv_rate=np.asarray(costs.ch_inv_rate, dtype=float),
        min_transfer=np.asarray(costs.min_transfer, dtype=float),
        input_ops=np.array(graph.sources, dtype=np.int32),
        msg_overhead=np.ascontiguousarray(overhead, dtype=float),
        curve_ptr=costs.curve_ptr, curve_bytes=costs.curve_bytes, curve_time=costs.curve_time,
        **shared_arrays(devices),
        op_names=tuple(o.name for o in graph.ops),
        dev_names=tuple(devices.names),
        ch_names=tuple(c.name for c in devices.channels),
    )


OVERHEAD_KINDS = ("send", "recv")


@dataclass(frozen=True)
class TraceEvent:
    """One interval of work. ``kind``:

    * ``"op"``: an op's forward, backward or weight update (``phase``) on a device;
    * ``"transfer"``: a message on a channel, ``src`` → ``dst``, ``bytes``;
    * ``"send"`` / ``"recv"``: the device time the sender (``resource`` = ``src``) or the receiver
      (``resource`` = ``dst``) spends on that message (the devices' ``message_overhead``).

    For transfers, sends and receives ``op`` is the op whose output (phase ``"fwd"``) or whose input
    gradients (phase ``"bwd"``) the message carries, or whose weight gradients a ring all-reduce sums
    (phase ``"allreduce"``). Of an op split over several devices (docs/sharding.md), ``shard`` is the
    index of the shard that ran (ops) or sent (messages) among ``shards``; a gather is an op event named
    ``gather PRODUCER → CONSUMER``.
    """

    kind: str  # "op" | "transfer" | "send" | "recv"
    op: str  # the op that ran, or whose output (fwd) / input gradients (bwd) were sent
    batch: int
    phase: str  # "fwd" | "bwd" | "update" | "wgrad" (zb-h1's weight gradient)
    resource: str  # device (op, send, recv) or channel (transfer)
    start: float
    end: float
    src: str | None = None
    dst: str | None = None
    bytes: float = 0.0
    shard: int = -1  # a split op's shard (-1: a whole op)
    shards: int = 0


@dataclass
class SimResult:
    makespan: float
    batches: int
    busy: np.ndarray  # [devices] seconds
    peak_memory: np.ndarray  # [devices] bytes
    channel_bytes: np.ndarray  # [channels]
    channel_busy: np.ndarray  # [channels] seconds
    transfers: int = 0
    trace: list[TraceEvent] | None = None
    # (time, device index, bytes in use) after every event that changed it
    memory_timeline: list[tuple[float, int, float]] | None = None
    extras: dict = field(default_factory=dict)

    @property
    def batch_time(self) -> float:
        return self.makespan / self.batches

    def idle_fraction(self) -> np.ndarray:
        """Per device: share of the step it sits idle (1 for an unused device)."""
        return 1.0 - self.busy / self.makespan if self.makespan > 0 else np.ones_like(self.busy)
