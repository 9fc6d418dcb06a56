"""Pipeline-parallelism views: stages of a placement, schedules side by side, a sweep over micro-batches."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.devices import DeviceGraph
from ..base.errors import InputError
from ..model.graph import Graph
from ..problem import Evaluation, Problem, ProblemSpec
from ..simulate.model import OVERHEAD_KINDS


def even_stages(graph: Graph, devices: DeviceGraph, p: int, *, virtual_stages: int = 1, profile: str = "default",
                **cost_kw) -> np.ndarray:
    """p contiguous stages in topological order, balanced by training-step compute time,
    on the p fastest GPUs (all devices when there are fewer GPUs). ``cost_kw``: measured op times.

    With ``virtual_stages`` V > 1 the network is cut into p V balanced chunks placed round-robin, chunk c
    on the (c mod p)-th of those devices: Megatron-LM's layout for interleaved 1F1B."""
    from ..optimize.baselines import balanced_stages
    from ..optimize.fixed_candidates import op_work
    problem = Problem(graph, devices, profile=profile, **cost_kw)
    work = op_work(problem)
    gpus = [i for i, d in enumerate(devices.devices) if d.kind == "gpu"]
    pool = gpus if len(gpus) >= p else list(range(len(devices)))
    if not 1 <= p <= min(len(pool), len(graph)):
        raise InputError(f"cannot make {p} stages from {len(pool)} devices and {len(graph)} ops", field="stages",
                         fix=f"Use 1 to {min(len(pool), len(graph))} stages")
    v = int(virtual_stages)
    if not 1 <= v or p * v > len(graph):
        raise InputError(f"cannot cut {len(graph)} ops into {p} × {v} chunks", field="virtual_stages",
                         fix=f"Use at most {len(graph) // p} virtual stages")
    chosen = sorted(sorted(pool, key=lambda d: (work[:, d].sum(), d))[:p])
    owners = [chosen[c % p] for c in range(p * v)]
    cuts = balanced_stages(work[:, owners])
    placement = np.empty(len(graph), dtype=np.int32)
    for c, d in enumerate(owners):
        placement[cuts[c]:cuts[c + 1]] = d
    return placement


def placement_option(spec: str, graph: Graph, devices: DeviceGraph, ignored: list[str] | None = None,
                     splits: list | None = None, **cost_kw) -> np.ndarray:
    """``--placement``: ``stages:P`` (P balanced stages, :func:`even_stages`), ``stages:PxV`` (P V chunks
    round-robin, for interleaved 1F1B), or anything :func:`placement.parse_placement_spec` reads (``splits``
    collects a file's split ops, docs/sharding.md)."""
    from ..model.placement import parse_placement_spec
    if not spec.startswith("stages:"):
        return parse_placement_spec(spec, graph, devices, ignored=ignored, splits=splits)
    text = spec.split(":", 1)[1]
    parts = text.split("x")
    if not (1 <= len(parts) <= 2 and all(x.isascii() and x.isdigit() and len(x) <= 4 for x in parts)):
        raise InputError(f"expected stages:P or stages:PxV with whole numbers, got {spec!r}", field="--placement",
                         fix="Write e.g. stages:4 (four stages) or stages:4x2 (eight chunks, two per device)")
    p, v = int(parts[0]), int(parts[1]) if len(parts) == 2 else 1
    return even_stages(graph, devices, p, virtual_stages=v, **cost_kw)


@dataclass(frozen=True)
class Stage:
    index: int
    device: str
    ops: int
    first_op: str
    last_op: str


def stages_of(placement: np.ndarray, graph: Graph, devices: DeviceGraph) -> list[Stage]:
    """Devices in order of their first op (the stage order the 1F1B schedule uses)."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    count: dict[int, int] = {}
    for i, d in enumerate(placement):
        d = int(d)
        first.setdefault(d, i)
        last[d] = i
        count[d] = count.get(d, 0) + 1
    order = sorted(first, key=first.get)
    return [Stage(s, devices.names[d], count[d], graph.ops[first[d]].name, graph.ops[last[d]].name)
            for s, d in enumerate(order)]


@dataclass
class ScheduleRun:
    schedule: str
    micro_batches: int
    evaluation: Evaluation
    stage_devices: list[int]
    virtual_stages: int = 1
    chunk_of: dict[str, int] | None = None  # interleaved 1F1B: each op's chunk on its device (0 = first)

    @property
    def step_time(self) -> float:
        return self.evaluation.result.makespan

    @property
    def bubble_fraction(self) -> float:
        r = self.evaluation.result
        return float(np.mean(r.idle_fraction()[self.stage_devices])) if self.stage_devices else 0.0

    def stage_peak_memory(self) -> list[float]:
        return [float(self.evaluation.result.peak_memory[d]) for d in self.stage_devices]


def run_schedule(graph: Graph, devices: DeviceGraph, placement: np.ndarray, schedule: str, micro_batches: int,
                 *, trace: bool = False, virtual_stages: int = 1, **problem_kw) -> ScheduleRun:
    """One schedule on one placement (``virtual_stages`` counts only under interleaved-1f1b)."""
    m = 1 if schedule == "thesis" else micro_batches
    v = virtual_stages if schedule == "interleaved-1f1b" else 1
    if problem_kw.get("timings_batch") is None:
        problem_kw.pop("timings_batch", None)
    profile = problem_kw.pop("profile", "default")
    named = isinstance(profile, str)
    spec = ProblemSpec(schedule=schedule, micro_batches=m, profile=profile if named else profile.name,
                       virtual_stages=v, **problem_kw)
    problem = spec.build(graph, devices, cost_model=None if named else profile)
    ev = problem.simulate(placement, trace=trace)
    order = [devices.index[s.device] for s in stages_of(placement, graph, devices)]
    chunk_of = None
    if schedule == "interleaved-1f1b":
        from ..simulate.pipeline_rules import chunks
        c, place = problem.compiled, [int(x) for x in placement]
        work = [float(c.fwd[i * c.n_dev + d] + c.bwd[i * c.n_dev + d]) for i, d in enumerate(place)]
        local = chunks(place, work, v, c.n_dev)[1]
        chunk_of = {op.name: local[i] for i, op in enumerate(problem.graph.ops)}
    return ScheduleRun(schedule, m, ev, order, v, chunk_of)


def sweep(graph: Graph, devices: DeviceGraph, placement: np.ndarray, schedules=("gpipe", "1f1b"),
          micro_batches: list[int] | None = None, placements: dict | None = None, **problem_kw) -> list[dict]:
    """Step time, bubble and first-stage peak memory for every schedule and micro-batch count
    (``placements``: a schedule's own placement, e.g. interleaved 1F1B's chunks)."""
    if micro_batches is None:
        micro_batches = [m for m in (1, 2, 4, 8, 16, 32, 64) if graph.batch_size % m == 0]
    rows = []
    for schedule in schedules:
        for m in micro_batches:
            run = run_schedule(graph, devices, (placements or {}).get(schedule, placement), schedule, m,
                               **problem_kw)
            peaks = run.stage_peak_memory()
            rows.append({"schedule": schedule, "micro_batches": m, "step_time_s": run.step_time,
                         "bubble_fraction": run.bubble_fraction,
                         "first_stage_peak_bytes": peaks[0] if peaks else 0.0,
                         "max_stage_peak_bytes": max(peaks) if peaks else 0.0,
                         "feasible": run.evaluation.feasible})
    return rows


# -- what the dashboard's Pipeline page shows ---------------------------------------------------------

def divisors(n: int, limit: int | None = None) -> list[int]:
    """Micro-batch counts that split a batch of ``n`` evenly (at most ``limit``)."""
    top = n if limit is None else min(n, limit)
    return [k for k in range(1, top + 1) if n % k == 0]


def check_micro_batches(batch_size: int, micro_batches: int) -> int:
    """``micro_batches`` if it splits the batch evenly, else an InputError listing the counts that do."""
    m = int(micro_batches)
    if m < 1 or batch_size % m:
        raise InputError(f"{m} micro-batches do not split the batch of {batch_size} evenly",
                         field="micro-batches",
                         fix="Use a divisor of the batch size: " + ", ".join(map(str, divisors(batch_size))))
    return m


def textbook_bubble(p: int, m: int) -> float:
    """GPipe's and 1F1B's bubble with p equal stages, free communication and updates: (p - 1)/(m + p - 1)."""
    return (p - 1) / (m + p - 1) if p >= 1 and m >= 1 else 0.0


@dataclass(frozen=True)
class IdealPipelineProfile:
    """Another profile's op times with free communication and free weight updates: the textbook pipeline,
    where p equal stages take exactly (m + p - 1)(t_f + t_b) and the bubble is (p - 1)/(m + p - 1).
    ``free_updates=False`` keeps the updates (to tell their share of the bubble from the transfers')."""

    base: object
    free_updates: bool = True

    @property
    def name(self) -> str:
        return f"{self.base.name} ({'ideal pipeline' if self.free_updates else 'free transfers'})"

    def arrays(self, graph: Graph, devices: DeviceGraph):
        from dataclasses import replace
        a = self.base.arrays(graph, devices)
        return replace(a, update=np.zeros_like(a.update) if self.free_updates else a.update,
                       ch_latency=np.zeros_like(a.ch_latency),
                       ch_inv_rate=np.zeros_like(a.ch_inv_rate), min_transfer=np.zeros_like(a.min_transfer),
                       message_overhead=np.zeros(len(devices)), curve_ptr=None, curve_bytes=None, curve_time=None)


def ideal_profile(profile: str | object = "default", **kw) -> IdealPipelineProfile:
    """``profile`` (a name or a profile object) with transfers and weight updates that take no time."""
    from ..cost.profiles import get_profile
    return IdealPipelineProfile(get_profile(profile, **kw) if isinstance(profile, str) else profile)


@dataclass(frozen=True)
class Block:
    """Consecutive events on one Gantt row with the same unit (micro-batch) and phase, drawn as one bar."""

    row: int
    kind: str  # "op" (device work) | "transfer" | "overhead" (send and receive tasks, drawn over the work)
    unit: int  # micro-batch (or batch) index from 0; weight updates keep their first event's
    phase: str  # "fwd" | "bwd" | "update" | "wgrad" (zb-h1's weight gradient)
    start: float
    end: float
    events: int  # ops (transfers; send and receive tasks in an "overhead" block) inside the block
    busy: float  # seconds of work (or transfer) inside the block, send and receive tasks included
    messages: int = 0  # send and receive tasks inside an "op" block
    chunk: int = 0  # interleaved 1F1B: the block's chunk (virtual stage) on its device


def schedule_blocks(trace, rows: list[str], *, tolerance: float = 1e-9, chunk_of: dict | None = None) -> list[Block]:
    """Merge a trace into blocks: on each row (device or channel), an event joins the block before it when it
    has the same micro-batch and phase (any micro-batch for weight updates) and starts no later than
    ``tolerance`` × the trace's span after that block ends (and, given ``chunk_of``, op name -> chunk, works on
    the same chunk). Idle gaps therefore stay visible; events that
    take no time (an input op, a free transfer) and events on rows not in ``rows`` are left out. A device's send
    and receive tasks (its message overhead) are work of the message's micro-batch and phase inside those
    blocks (counted in ``messages``), and also come as blocks of their own, kind ``"overhead"`` (back-to-back
    ones merged whatever their unit), for drawing on top. Blocks come per row in time order, overhead blocks
    after the others."""
    row_of = {name: i for i, name in enumerate(rows)}
    span = max((e.end for e in trace), default=0.0)
    eps = tolerance * span
    per_row: dict[int, list] = {}
    for e in trace:
        r = row_of.get(e.resource)
        if r is not None and e.end - e.start > eps:
            per_row.setdefault(r, []).append(e)
    blocks: list[Block] = []
    for r in sorted(per_row):
        cur = None
        for e in sorted(per_row[r], key=lambda e: (e.start, e.end)):
            chunk = chunk_of.get(e.op, 0) if chunk_of and e.kind == "op" else (cur["chunk"] if cur else 0)
            same = cur is not None and cur["phase"] == e.phase and (
                e.phase == "update" or (cur["unit"] == e.batch and cur["chunk"] == chunk)) and e.start <= cur["end"] + eps
            overhead = e.kind in OVERHEAD_KINDS
            if same:
                cur["end"] = max(cur["end"], e.end)
                cur["messages" if overhead else "events"] += 1
                cur["busy"] += e.end - e.start
                continue
            if cur is not None:
                blocks.append(Block(**cur))
            cur = {"row": r, "kind": "transfer" if e.kind == "transfer" else "op", "unit": e.batch, "phase": e.phase,
                   "start": e.start, "end": e.end, "events": 0 if overhead else 1, "messages": int(overhead),
                   "busy": e.end - e.start, "chunk": chunk}
        if cur is not None:
            blocks.append(Block(**cur))
    for r in sorted(per_row):
        cur = None
        for e in sorted((e for e in per_row[r] if e.kind in OVERHEAD_KINDS), key=lambda e: (e.start, e.end)):
            if cur is not None and e.start <= cur["end"] + eps:
                cur["end"] = max(cur["end"], e.end)
                cur["events"] += 1
                cur["busy"] += e.end - e.start
                continue
            if cur is not None:
                blocks.append(Block(**cur))
            cur = {"row": r, "kind": "overhead", "unit": e.batch, "phase": e.phase, "start": e.start, "end": e.end,
                   "events": 1, "busy": e.end - e.start}
        if cur is not None:
            blocks.append(Block(**cur))
    return blocks


def schedule_rows(run: ScheduleRun, devices: DeviceGraph) -> list[str]:
    """Gantt rows for a schedule: the stage devices in stage order, then the channels that were busy."""
    res = run.evaluation.result
    return ([devices.names[d] for d in run.stage_devices]
            + [c.name for c, busy in zip(devices.channels, res.channel_busy) if busy > 0])


def best_micro_batches(rows: list[dict]) -> dict[str, dict]:
    """Per schedule, the sweep row with the shortest step among those that fit in memory (None if none fits)."""
    best: dict[str, dict] = {}
    for r in rows:
        best.setdefault(r["schedule"], None)
        if r["feasible"] and (best[r["schedule"]] is None or r["step_time_s"] < best[r["schedule"]]["step_time_s"]):
            best[r["schedule"]] = r
    return best


def is_contiguous(placement) -> bool:
    """Every device's ops form one run in topological order (a pipeline split, not an interleaving)."""
    p = np.asarray(placement)
    return len(p) == 0 or int((np.diff(p) != 0).sum()) == len(np.unique(p)) - 1
