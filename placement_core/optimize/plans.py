"""Cluster plans: pipeline stages across groups of GPUs, data parallelism inside each group, micro-batches.

A plan is a placement like any other, so the event simulator runs it (every trace, critical path and what-if
works on it): the GPUs in ``pp`` groups of ``dp`` consecutive ones (a node's GPUs stay together while a group
fits in a node), the network cut into ``pp`` contiguous stages (a transformer's layers evenly, as Megatron-LM
cuts them, when they divide; otherwise balanced on compute, ``expert``'s cut, :func:`.baselines.balanced_stages`;
under interleaved 1F1B ``pp · v`` chunks dealt round-robin), every op of a
stage split by batch over its group (weights replicated; ZeRO partitions the training state), each op's
gradients all-reduced over the group by the collective model (:mod:`.plan_fold`, hierarchical across nodes,
charged to the op's update as in a plan of folded replicas), and the global batch in micro-batches of ``micro_batch`` sequences per replica under the
chosen pipeline schedule. Every dimension not given is searched: ``pp · dp`` = the GPUs, ``dp`` divides the
global batch, the micro-batch divides a replica's share; the best plan that fits in memory wins.

Tensor parallelism (``tp`` > 1, a ``gpt:`` network): the ``tp`` consecutive GPUs of a group (inside a node) are
folded into one simulated GPU, the first of the group, which runs one rank of Megatron-LM's split
(:mod:`..families.gpt_parallel`: sharded ops, the group's collectives as ops timed by :mod:`..cost.collectives`
on the group's NVLink), so ``tp · pp · dp`` = the GPUs. Sequence parallelism and activation recomputation are
the same builder's; ZeRO stage 3 adds each layer's parameter all-gathers over its data-parallel group.

On a :class:`..formats.clusters.Cluster` (a cluster not materialised: `placement plan` above 32 nodes, or
``--fold``) the ``dp`` replicas are folded into one (:mod:`.plan_fold`): one replica's ``pp`` stages are
simulated, each op's gradients reduced over the data-parallel group by the collective model.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..base.errors import InputError
from ..formats.clusters import Cluster
from ..model.devices import DeviceGraph
from ..model.graph import Graph
from ..model.sharding import Split
from ..problem import ProblemSpec
from .baselines import balanced_stages
from .plan_links import by_hand_efficiency, dp_group, link_of, node_size

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
    sequence_parallel: bool = False
    recompute: str = "none"


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
    sequence_parallel: bool = False
    graph: Graph | None = field(default=None, repr=False)  # the graph simulated (one rank's, under tp > 1)

    def to_dict(self) -> dict:
        out = {k: getattr(self, k) for k in ("tp", "pp", "dp", "micro_batch", "micro_batches", "schedule",
                                             "virtual_stages", "recompute", "zero", "sequence_parallel",
                                             "step_time_s", "peak_memory_bytes", "fits")}
        return {**out, "breakdown": dict(self.breakdown)}


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def gpus_of(devices: DeviceGraph | Cluster) -> list[int]:
    if isinstance(devices, Cluster):
        return list(range(devices.n_gpus))
    gpus = [i for i, d in enumerate(devices.devices) if d.kind == "gpu"]
    if not gpus:
        raise InputError(f"{devices.name} has no GPU to plan for", field="devices",
                         fix="Use a cluster preset such as dgx-a100:nodes=2")
    return gpus


def candidates(n_gpus: int, n_ops: int, req: PlanRequest, what: str = "GPUs") -> list[tuple[int, int, int]]:
    """Every (pp, dp, micro_batch) the request allows on ``n_gpus`` simulated GPUs (under tensor parallelism,
    the tensor-parallel groups), before simulating."""
    if req.schedule not in SCHEDULES:
        raise InputError(f"unknown pipeline schedule {req.schedule!r}", field="--schedule",
                         fix="Use " + ", ".join(SCHEDULES))
    if req.virtual_stages != 1 and req.schedule != "interleaved-1f1b":
        raise InputError("--virtual-stages needs --schedule interleaved-1f1b", field="--virtual-stages")
    for name, value in (("--pp", req.pp), ("--dp", req.dp)):
        if value is not None and n_gpus % value:
            raise InputError(f"{name} {value} does not divide the {n_gpus} {what}", field=name,
                             fix=f"Use one of {', '.join(map(str, _divisors(n_gpus)))}")
    if req.pp is not None and req.dp is not None and req.pp * req.dp != n_gpus:
        raise InputError(f"--pp {req.pp} × --dp {req.dp} is not the {n_gpus} {what}", field="--dp",
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
        raise InputError(f"no plan of {n_gpus} {what} fits the constraints (global batch {req.global_batch}"
                         + "".join(f", {k} {v}" for k, v in (("--pp", req.pp), ("--dp", req.dp),
                                                              ("--micro-batch", req.micro_batch)) if v) + ")",
                         field="--global-batch", fix="The data-parallel degree must divide the global batch, and "
                                                     "the micro-batch a replica's share of it")
    if len(out) > MAX_CANDIDATES:
        raise InputError(f"{len(out)} plans to simulate, at most {MAX_CANDIDATES}", field="--micro-batch",
                         fix="Fix --micro-batch, --pp or --dp")
    return out


def simulate_plan(graph: Graph, devices: DeviceGraph | Cluster, gpus: list[int], pp: int, dp: int, b: int,
                  req: PlanRequest, config=None) -> tuple[Plan, object]:
    """One plan built and simulated: the plan with its figures, and the problem it ran in. Under tensor
    parallelism (``req.tp`` > 1), sequence parallelism, recomputation or ZeRO-3, ``config`` is the ``gpt:``
    network's configuration: the graph simulated is one tensor-parallel rank's (:func:`rank_graph`) and the
    simulated GPUs are the first of each group of ``tp`` in ``gpus``. On a :class:`Cluster` the data-parallel
    replicas are folded (:mod:`.plan_fold`): the problem is one replica's, on its ``pp`` GPUs."""
    from .plan_fold import fold_profile, replica_gpus

    devices = by_hand_efficiency(devices, req.comm_efficiency)
    t = req.tp or 1
    m = req.global_batch // (dp * b)
    v = req.virtual_stages
    profile = _profile(req)
    folded = isinstance(devices, Cluster)
    batch = req.global_batch // dp if folded else req.global_batch  # the simulated sequences per step
    if _needs_rank_graph(req):
        graph = rank_graph(config, graph.precision, devices, gpus, t, dp, b, req, profile, batch)
    profile = fold_profile(profile, dp_group(devices, gpus, t, dp, profile.comm_efficiency), folded)
    if folded:
        sim_devices = devices.graph(replica_gpus(gpus, t, pp, dp))
        groups = [(s,) for s in range(pp)]
    else:
        gpus = gpus[::t]
        sim_devices = devices
        groups = [tuple(gpus[s * dp:(s + 1) * dp]) for s in range(pp)]
    splits = tuple(Split("batch", g) for g in groups) if dp > 1 and not folded else ()
    spec = ProblemSpec(schedule=req.schedule, micro_batches=m, virtual_stages=v, splits=splits,
                       optimizer=req.optimizer, zero=min(req.zero, 2), penalty=req.penalty,
                       comm_efficiency=req.comm_efficiency)
    problem = spec.build(graph.with_batch_size(batch), sim_devices, cost_model=profile)
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
            s = problem.splits.index(Split("batch", g))
            x[lo:hi] = np.where(problem.allowed[lo:hi, s], problem.n_devices + s, g[0])
    ev = problem.simulate(x)
    r = ev.result
    used = sorted(set(d for g in groups for d in g))
    busy = np.asarray(r.busy, dtype=float)
    names = problem.devices.names
    level = {"nvlink": 0.0, "infiniband": 0.0, "other": 0.0}
    for ch, nbytes in zip(problem.devices.channels, np.asarray(r.channel_bytes, dtype=float)):
        key = "nvlink" if ch.name.startswith("nvl-") else "infiniband" if ch.name.startswith("ib-") else "other"
        level[key] += float(nbytes)
    # the collectives' and recomputations' seconds per step on each stage: their ops' unit times × micro-batches
    kinds = {"tensor_parallel": np.zeros(pp), "zero3": np.zeros(pp), "recompute": np.zeros(pp)}
    unit = b / problem.graph.batch_size  # op times are at the graph's batch (a micro-batch), the unit's are b's
    for k in range(pp * v):
        for op in problem.graph.ops[cuts[k]:cuts[k + 1]]:
            if op.kind in ("collective", "recompute") and op.times:
                key = "recompute" if op.kind == "recompute" else "zero3" if ".zero3_" in op.name else "tensor_parallel"
                kinds[key][k % pp] += sum(op.times["gpu"].values()) * unit * m
    busiest = used[int(np.argmax(busy[used]))]
    stage = next(k for k, g in enumerate(groups) if busiest in g)
    comm = float(kinds["tensor_parallel"][stage])
    gathers = float(kinds["zero3"][stage])
    grads = profile.gradient_seconds(problem.graph)  # charged to the updates, folded or not (plan_fold)
    dp_comm = float(sum(grads[cuts[k]:cuts[k + 1]].sum() for k in range(pp * v) if k % pp == stage))
    compute = float(busy[busiest]) - comm - gathers - dp_comm
    plan = Plan(tp=t, pp=pp, dp=dp, micro_batch=b, micro_batches=m, schedule=req.schedule, virtual_stages=v,
                recompute=req.recompute, zero=req.zero, sequence_parallel=req.sequence_parallel,
                step_time_s=float(r.makespan),
                peak_memory_bytes=float(np.max(r.peak_memory[used])), fits=bool(ev.feasible),
                breakdown={"compute_s": compute, "tensor_parallel_comm_s": comm,
                           "zero3_gather_s": gathers, "recompute_s": float(kinds["recompute"][stage]),
                           "data_parallel_comm_s": dp_comm,
                           "other_s": float(r.makespan) - compute - comm - gathers - dp_comm,
                           "bubble_fraction": float(r.idle_fraction()[used].mean()),
                           "busiest_gpu": names[busiest],
                           "nvlink_bytes": level["nvlink"], "infiniband_bytes": level["infiniband"],
                           "other_link_bytes": level["other"]},
                placement=x, cuts=tuple(int(c) for c in cuts), graph=problem.graph)
    return plan, problem


def _needs_rank_graph(req: PlanRequest) -> bool:
    return (req.tp or 1) > 1 or req.sequence_parallel or req.recompute != "none" or req.zero >= 3


def _profile(req: PlanRequest):
    """The plan's cost profile: the default roofline with the request's optimizer, ZeRO stage (3 included: its
    gathers are ops of the rank's graph) and communication efficiency."""
    from ..cost.profiles import RooflineProfile, get_profile

    base = get_profile("default", comm_efficiency=req.comm_efficiency, optimizer=req.optimizer,
                       zero=min(req.zero, 2))
    return replace(base, zero=req.zero) if req.zero >= 3 else base


def rank_graph(config, precision: str, devices: DeviceGraph | Cluster, gpus: list[int], t: int, dp: int, b: int,
               req: PlanRequest, profile, batch: int | None = None) -> Graph:
    """The graph of one tensor-parallel rank of the plan (families.gpt_parallel) at ``batch`` sequences (the
    global batch; one replica's share when replicas are folded): its
    tensor-parallel collectives over the group's NVLink (``t`` consecutive GPUs of ``gpus``), ZeRO-3's parameter
    gathers over the data-parallel group (every ``t``-th GPU, ``dp`` of them, in two levels across nodes), each
    timed for one micro-batch of ``b`` sequences by cost.collectives."""
    from ..cost import collectives
    from ..families import gpt_parallel

    if config is None:
        raise InputError("tensor and sequence parallelism, recomputation and ZeRO-3 are modelled for gpt: networks",
                         field="--network", fix="Plan a gpt:layers=L,hidden=H,heads=A network")
    config = replace(config, batch=batch or req.global_batch, precision=precision)
    eff = profile.comm_efficiency
    comm = None
    if t > 1:
        alpha, beta = link_of(devices, gpus[0], gpus[1], eff)

        def comm(kind: str, nbytes: float) -> float:
            return collectives.collective(kind, nbytes, t, alpha, beta)
    gather = None
    if req.zero >= 3 and dp > 1:
        group = dp_group(devices, gpus, t, dp, eff)

        def gather(nbytes: float) -> float:
            return group.time("all-gather", nbytes)

    one = devices.graph([gpus[0]]) if isinstance(devices, Cluster) else devices
    first = 0 if isinstance(devices, Cluster) else gpus[0]

    def layer_forward(g: Graph) -> dict[str, float]:
        fwd = profile.arrays(g, one).fwd[:, first]
        return {op.name: float(f) for op, f in zip(g.ops, fwd)}

    return gpt_parallel.build(config, t, comm or (lambda kind, nbytes: 0.0), unit_batch=b,
                              sequence_parallel=req.sequence_parallel, recompute=req.recompute,
                              layer_forward=layer_forward, param_gather=gather)


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


def tensor_degrees(n_gpus: int, per_node: int, req: PlanRequest, config) -> list[int]:
    """The tensor-parallel degrees to plan: ``req.tp`` when given (checked), else every degree that divides the
    node's GPUs, the GPUs and the heads (above 1 only with a ``gpt:`` network; above 1 only under
    sequence parallelism)."""
    from ..families import gpt_parallel

    if req.tp is not None:
        if req.tp > 1 or req.sequence_parallel:
            if config is None:
                raise InputError(f"tensor parallelism (--tp {req.tp}) splits a gpt: network's layers",
                                 field="--tp", fix="Plan a gpt:layers=L,hidden=H,heads=A network, or give --tp 1")
            gpt_parallel.check(config, req.tp, req.sequence_parallel, req.recompute, per_node)
        if n_gpus % req.tp:
            raise InputError(f"--tp {req.tp} does not divide the {n_gpus} GPUs", field="--tp",
                             fix=f"Use one of {', '.join(str(d) for d in _divisors(n_gpus) if d <= per_node)}")
        return [req.tp]
    if config is None:
        if req.sequence_parallel:
            raise InputError("sequence parallelism needs tensor parallelism of a gpt: network",
                             field="--sequence-parallel", fix="Plan a gpt: network")
        return [1]
    return [t for t in _divisors(per_node) if n_gpus % t == 0 and config.heads % t == 0
            and (t > 1 or not req.sequence_parallel)]


def plan(graph: Graph, devices: DeviceGraph, req: PlanRequest, config=None) -> list[Plan]:
    """Every candidate plan simulated, best first (plans that fit before those that do not). ``config``, a
    ``gpt:`` network's configuration, lets the search split its layers over tensor-parallel groups."""
    from ..families import gpt_parallel

    if req.global_batch < 1:
        raise InputError("the global batch must be at least 1", field="--global-batch", fix="Give sequences per step")
    if req.recompute not in gpt_parallel.RECOMPUTE:
        raise InputError(f"unknown recomputation {req.recompute!r}", field="--recompute",
                         fix="Use " + ", ".join(gpt_parallel.RECOMPUTE))
    if req.zero not in (0, 1, 2, 3):
        raise InputError(f"ZeRO stage must be 0 to 3, got {req.zero!r}", field="--zero", fix="Use 0, 1, 2 or 3")
    devices = by_hand_efficiency(devices, req.comm_efficiency)  # once, not per candidate
    gpus = gpus_of(devices)
    tps = tensor_degrees(len(gpus), node_size(devices, gpus), req, config)
    todo, refused = [], None
    for t in tps:
        sub = replace(req, tp=t)
        if _needs_rank_graph(sub) and config is None:
            raise InputError("recomputation and ZeRO-3 are modelled for gpt: networks", field="--network",
                             fix="Plan a gpt:layers=L,hidden=H,heads=A network")
        try:
            what = "GPUs" if t == 1 else f"tensor-parallel groups of {t} GPUs"
            todo += [(sub, pp, dp, b) for pp, dp, b in candidates(len(gpus) // t, len(graph), sub, what)]
        except InputError as err:  # a searched degree the other dimensions given rule out
            if req.tp is not None:
                raise
            refused = refused or err
    if not todo:
        raise refused
    if len(todo) > MAX_CANDIDATES:
        raise InputError(f"{len(todo)} plans to simulate, at most {MAX_CANDIDATES}", field="--micro-batch",
                         fix="Fix --micro-batch, --tp, --pp or --dp")
    plans = [simulate_plan(graph, devices, gpus, pp, dp, b, sub, config)[0] for sub, pp, dp, b in todo]
    return sorted(plans, key=lambda p: (not p.fits, p.step_time_s, p.pp, p.micro_batch, p.tp))


def memory_parts(problem, placement) -> dict[str, np.ndarray]:
    """Per device, what its training state holds, [devices] bytes each: ``weights``, ``gradients``,
    ``optimizer`` (the plan's optimizer and ZeRO stage over the data-parallel group, a batch split's or the
    folded replicas'; cost.training_state; under tensor parallelism the graph is one rank's, so its sharded layers hold 1/tp of their weights); ``activations`` is the rest of its
    simulated peak (outputs kept for the backward, messages, gathers)."""
    from ..cost.training_state import state_parts

    prof = problem.profile
    optimizer, zero = getattr(prof, "optimizer", "sgd"), getattr(prof, "zero", 0)
    replicas = getattr(prof, "replicas", 1)  # folded replicas (plan_fold): a whole op is data-parallel too
    w, g, o = state_parts(optimizer, problem.graph.precision)
    n = problem.n_devices
    parts = {"weights": np.zeros(n), "gradients": np.zeros(n), "optimizer": np.zeros(n)}
    for op, gene in zip(problem.graph.ops, np.asarray(placement).tolist()):
        if gene < n:
            shares = [(gene, 1.0, replicas)]
        else:
            s = problem.splits[gene - n]
            k = len(s.devices)
            shares = [(d, 1.0, k) if s.dim == "batch" else (d, 1.0 / k, 1) for d in s.devices]
        for d, f, group in shares:
            p = op.param_bytes * f
            parts["weights"][d] += p * w / (group if zero >= 3 else 1)
            parts["gradients"][d] += p * g / (group if zero >= 2 else 1)
            parts["optimizer"][d] += p * o / (group if zero >= 1 else 1)
    peak = np.asarray(problem.simulate(placement).result.peak_memory, dtype=float)
    static = parts["weights"] + parts["gradients"] + parts["optimizer"]
    parts["activations"] = np.maximum(peak - static, 0.0)
    return parts
