"""Cluster plans: pipeline stages across groups of GPUs, data parallelism inside each group, micro-batches.

A plan is a placement like any other, so the event simulator runs it (every trace, critical path and what-if
works on it): the GPUs in ``pp`` groups of ``dp`` consecutive ones (a node's GPUs stay together while a group
fits in a node), the network cut into ``pp`` contiguous stages (a transformer's layers evenly, as Megatron-LM
cuts them, when they divide; otherwise balanced on compute, ``expert``'s cut, :func:`.baselines.balanced_stages`;
under interleaved 1F1B ``pp · v`` chunks dealt round-robin), every op of a
stage split by batch over its group (weights replicated, gradients all-reduced on a ring; ZeRO partitions the
training state), and the global batch in micro-batches of ``micro_batch`` sequences per replica under the
chosen pipeline schedule. Every dimension not given is searched: ``pp · dp`` = the GPUs, ``dp`` divides the
global batch, the micro-batch divides a replica's share; the best plan that fits in memory wins.

Tensor parallelism (``tp`` > 1) is not simulated yet and is refused (docs/clusters.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..base.errors import InputError
from ..model.devices import DeviceGraph
from ..model.graph import Graph
from ..model.sharding import Split
from ..problem import ProblemSpec
from .baselines import balanced_stages

SCHEDULES = ("1f1b", "gpipe", "zb-h1", "interleaved-1f1b")
MAX_CANDIDATES = 400


@dataclass(frozen=True)
class PlanRequest:
    global_batch: int
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    micro_batch: int | None = None
    schedule: str = "1f1b"
    virtual_stages: int = 1
    optimizer: str = "adam"
    zero: int = 0
    penalty: str = "thesis"
    comm_efficiency: float | None = None


@dataclass
class Plan:
    tp: int
    pp: int
    dp: int
    micro_batch: int
    micro_batches: int
    schedule: str
    virtual_stages: int
    recompute: str
    zero: int
    step_time_s: float = float("nan")
    peak_memory_bytes: float = 0.0
    fits: bool = False
    breakdown: dict = field(default_factory=dict)
    placement: np.ndarray | None = None
    cuts: tuple[int, ...] = ()  # chunk k runs ops cuts[k] .. cuts[k + 1] - 1 (chunk k on stage k mod pp)

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("tp", "pp", "dp", "micro_batch", "micro_batches", "schedule",
                                             "virtual_stages", "recompute", "zero", "step_time_s",
                                             "peak_memory_bytes", "fits")}
        return {**out, "breakdown": dict(self.breakdown)}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def gpus_of(devices: DeviceGraph) -> list[int]:
    gpus = [i for i, d in enumerate(devices.devices) if d.kind == "gpu"]
    if not gpus:
        raise InputError(f"{devices.name} has no GPU to plan for", field="devices",
                         fix="Use a cluster preset such as dgx-a100:nodes=2")
    return gpus


def candidates(n_gpus: int, n_ops: int, req: PlanRequest) -> list[tuple[int, int, int]]:
    """Every (pp, dp, micro_batch) the request allows, before simulating."""
    if req.tp not in (None, 1):
        raise InputError(f"tensor parallelism (tp = {req.tp}) is not simulated yet", field="--tp",
                         fix="Leave --tp out or give --tp 1; docs/clusters.md says what is modelled")
    if req.schedule not in SCHEDULES:
        raise InputError(f"unknown pipeline schedule {req.schedule!r}", field="--schedule",
                         fix="Use " + ", ".join(SCHEDULES))
    if req.virtual_stages != 1 and req.schedule != "interleaved-1f1b":
        raise InputError("--virtual-stages needs --schedule interleaved-1f1b", field="--virtual-stages")
    for name, value in (("--pp", req.pp), ("--dp", req.dp)):
        if value is not None and n_gpus % value:
            raise InputError(f"{name} {value} does not divide the {n_gpus} GPUs", field=name,
                             fix=f"Use one of {', '.join(map(str, _divisors(n_gpus)))}")
    if req.pp is not None and req.dp is not None and req.pp * req.dp != n_gpus:
        raise InputError(f"--pp {req.pp} × --dp {req.dp} is not the {n_gpus} GPUs", field="--dp",
                         fix="Give one of them, or two whose product is the GPU count")
    out = []
    for pp in _divisors(n_gpus):
        dp = n_gpus // pp
        if (req.pp is not None and pp != req.pp) or (req.dp is not None and dp != req.dp):
            continue
        if pp * req.virtual_stages > n_ops or req.global_batch % dp:
            continue
        share = req.global_batch // dp
        for b in _divisors(share):
            if req.micro_batch is not None and b != req.micro_batch:
                continue
            m = share // b
            if req.schedule == "interleaved-1f1b" and m % pp:
                continue  # torch's interleaved schedule runs micro-batches in rounds of pp
            out.append((pp, dp, b))
    if not out:
        raise InputError(f"no plan of {n_gpus} GPUs fits the constraints (global batch {req.global_batch}"
                         + "".join(f", {k} {v}" for k, v in (("--pp", req.pp), ("--dp", req.dp),
                                                              ("--micro-batch", req.micro_batch)) if v) + ")",
                         field="--global-batch", fix="The data-parallel degree must divide the global batch, and "
                                                     "the micro-batch a replica's share of it")
    if len(out) > MAX_CANDIDATES:
        raise InputError(f"{len(out)} plans to simulate, at most {MAX_CANDIDATES}", field="--micro-batch",
                         fix="Fix --micro-batch, --pp or --dp")
    return out


def simulate_plan(graph: Graph, devices: DeviceGraph, gpus: list[int], pp: int, dp: int, b: int,
                  req: PlanRequest) -> tuple[Plan, object]:
    """One plan built and simulated: the plan with its figures, and the problem it ran in."""
    m = req.global_batch // (dp * b)
    v = req.virtual_stages
    groups = [tuple(gpus[s * dp:(s + 1) * dp]) for s in range(pp)]
    splits = tuple(Split("batch", g) for g in groups) if dp > 1 else ()
    spec = ProblemSpec(schedule=req.schedule, micro_batches=m, virtual_stages=v, splits=splits,
                       optimizer=req.optimizer, zero=req.zero, penalty=req.penalty,
                       comm_efficiency=req.comm_efficiency)
    problem = spec.build(graph.with_batch_size(req.global_batch), devices)
    c = problem.costs
    work = np.asarray(c.fwd + c.bwd + c.update, dtype=float)
    chunks = [groups[k % pp] for k in range(pp * v)]  # interleaved: chunk k on group k mod pp
    cuts = even_layer_cuts(problem.graph, pp * v)
    if cuts is None:
        cuts = balanced_stages(np.stack([work[:, g[0]] / len(g) for g in chunks], axis=1))
    x = np.empty(problem.n_ops, dtype=np.int32)
    for k, g in enumerate(chunks):
        lo, hi = cuts[k], cuts[k + 1]
        if len(g) == 1:
            x[lo:hi] = g[0]
        else:
            t = problem.splits.index(Split("batch", g))
            x[lo:hi] = np.where(problem.allowed[lo:hi, t], problem.n_devices + t, g[0])
    ev = problem.simulate(x)
    r = ev.result
    used = sorted(set(d for g in groups for d in g))
    busy = np.asarray(r.busy, dtype=float)
    names = problem.devices.names
    level = {"nvlink": 0.0, "infiniband": 0.0, "other": 0.0}
    for ch, nbytes in zip(problem.devices.channels, np.asarray(r.channel_bytes, dtype=float)):
        key = "nvlink" if ch.name.startswith("nvl-") else "infiniband" if ch.name.startswith("ib-") else "other"
        level[key] += float(nbytes)
    compute = float(busy[used].max())
    plan = Plan(tp=1, pp=pp, dp=dp, micro_batch=b, micro_batches=m, schedule=req.schedule, virtual_stages=v,
                recompute="none", zero=req.zero, step_time_s=float(r.makespan),
                peak_memory_bytes=float(np.max(r.peak_memory[used])), fits=bool(ev.feasible),
                breakdown={"compute_s": compute, "other_s": float(r.makespan) - compute,
                           "bubble_fraction": float(r.idle_fraction()[used].mean()),
                           "busiest_gpu": names[used[int(np.argmax(busy[used]))]],
                           "nvlink_bytes": level["nvlink"], "infiniband_bytes": level["infiniband"],
                           "other_link_bytes": level["other"]},
                placement=x, cuts=tuple(int(c) for c in cuts))
    return plan, problem


def even_layer_cuts(graph: Graph, chunks: int) -> list[int] | None:
    """Megatron-LM's cut of a transformer (ops ``l<i>.ln1`` ... ``l<i>.add2``, a ``gpt:`` network): the same number
    of layers per chunk, the embedding with the first and the head with the last; None when the graph has no
    such layers or their count does not divide evenly (then the cut is balanced on compute)."""
    starts = [i for i, op in enumerate(graph.ops) if op.name.startswith("l") and op.name.endswith(".ln1")]
    layers = len(starts)
    if not layers or layers % chunks or [graph.ops[i].name for i in starts] != [f"l{k}.ln1" for k in range(layers)]:
        return None
    per = layers // chunks
    return [0] + [starts[k * per] for k in range(1, chunks)] + [len(graph)]


def plan(graph: Graph, devices: DeviceGraph, req: PlanRequest) -> list[Plan]:
    """Every candidate plan simulated, best first (plans that fit before those that do not)."""
    if req.global_batch < 1:
        raise InputError("the global batch must be at least 1", field="--global-batch", fix="Give sequences per step")
    gpus = gpus_of(devices)
    plans = [simulate_plan(graph, devices, gpus, pp, dp, b, req)[0]
             for pp, dp, b in candidates(len(gpus), len(graph), req)]
    return sorted(plans, key=lambda p: (not p.fits, p.step_time_s, p.pp, p.micro_batch))


def memory_parts(problem, placement) -> dict[str, np.ndarray]:
    """Per device, what its training state holds, [devices] bytes each: ``weights``, ``gradients``,
    ``optimizer`` (the plan's optimizer and ZeRO stage, cost.training_state); ``activations`` is the rest of its
    simulated peak (outputs kept for the backward, messages, gathers)."""
    from ..cost.training_state import state_parts

    prof = problem.profile
    optimizer, zero = getattr(prof, "optimizer", "sgd"), getattr(prof, "zero", 0)
    w, g, o = state_parts(optimizer, problem.graph.precision)
    n = problem.n_devices
    parts = {"weights": np.zeros(n), "gradients": np.zeros(n), "optimizer": np.zeros(n)}
    for op, gene in zip(problem.graph.ops, np.asarray(placement).tolist()):
        if gene < n:
            shares = [(gene, 1.0, 1)]
        else:
            s = problem.splits[gene - n]
            k = len(s.devices)
            shares = [(d, 1.0, k) if s.dim == "batch" else (d, 1.0 / k, 1) for d in s.devices]
        for d, f, group in shares:
            p = op.param_bytes * f
            parts["weights"][d] += p * w
            parts["gradients"][d] += p * g / (group if zero >= 2 else 1)
            parts["optimizer"][d] += p * o / (group if zero >= 1 else 1)
    peak = np.asarray(problem.simulate(placement).result.peak_memory, dtype=float)
    static = parts["weights"] + parts["gradients"] + parts["optimizer"]
    parts["activations"] = np.maximum(peak - static, 0.0)
    return parts
