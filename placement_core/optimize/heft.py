"""HEFT (Topcuoglu, Hariri & Wu, IEEE TPDS 2002) as a placement optimizer, and its variants.

Textbook HEFT: the upward rank ``rank(t) = w̄_t + max_{s ∈ succ(t)} (c̄_ts + rank(s))``, with
w̄ the task's mean cost over the devices and c̄ the edge's mean communication cost, which
the paper defines as mean startup + bytes / mean transfer rate over the ordered pairs of
*distinct* devices (no (d-1)/d discount for same-device pairs; this is what reproduces its
published ranks). Tasks are taken in decreasing rank (ties: topological position) and each
goes to the device with the earliest finish time, inserted into the earliest idle gap long
enough for it (insertion-based policy). A transfer costs exactly what the simulator charges
for that route, and the plan, like the paper, lets transfers overlap freely.

A training step is scheduled, not only its forward pass. The tasks are each op's forward,
its backward (after its own forward and after the backward of each consumer, whose gradient
crosses devices when it has bytes) and, when the cost profile has one, its weight update
(after its backward). An op's backward and update must run where its forward ran, so the
op's device is chosen when its forward is scheduled, and its backward and update are later
inserted on that device. The ranks are computed over the whole training graph, so a
forward's priority includes the backward path behind it; since a task's rank is never below
its successors', decreasing rank is a topological order and every forward is placed before
its backward. The device chosen for a forward minimises its earliest finish time *plus the
op's own backward and update time on that device*: that work is committed by the choice,
and without it a forward that is slightly quicker on a CPU (its input already there, the
GPU's copy still in flight) drags a backward ten times slower onto the CPU. Equal finish
times (zero-cost ops) go to the device that is fastest overall rather than to the first
listed. With ``forward_only`` the task graph is the forward DAG alone, the extra term is
zero, and this is textbook HEFT exactly.

Variants: ``heft-nocomm`` ignores communication when ranking and placing (the dissertation's
TF-Mapper, Ch. 7, eq. 7.2-7.4), so its planned makespan ignores it too; ``heft-memory`` skips a device on which the op would not fit
(weights, activations kept for the backward pass, received inputs; see
:class:`.baselines.MemoryEstimate`) and, when it fits nowhere, takes the least overflowing.

``extras()`` carries HEFT's own plan (``planned_makespan_s`` and every task's start and end);
the driver's result carries the simulator's verdict on the placement, which differs when
queues are FIFO, channels are shared, or there are several batches.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

from ..problem import Problem
from .base import register
from .fixed_candidates import BWD, FWD, UPD, FixedCandidates, Links, MemoryEstimate

PHASES = ("fwd", "bwd", "update")
PROGRESS_EVERY = 2000  # tasks planned between progress reports


@dataclass(frozen=True)
class TaskGraph:
    """The training step as a DAG of tasks. An edge's bytes are None when nothing is sent."""

    op: np.ndarray  # [tasks] op index
    phase: np.ndarray  # [tasks] FWD | BWD | UPD
    cost: np.ndarray  # [tasks, devices] seconds
    pos: np.ndarray  # [tasks] a topological position (the tie-break)
    preds: tuple[tuple[tuple[int, float | None], ...], ...]
    succs: tuple[tuple[tuple[int, float | None], ...], ...]

    def __len__(self) -> int:
        return len(self.op)


def task_graph(problem: Problem) -> TaskGraph:
    """Forward tasks 0..n-1 (the ops' indices); then backward n..2n-1 and updates, when training."""
    g, c, costs = problem.graph, problem.compiled, problem.costs
    n = len(g)
    ops, phases, rows, pos = list(range(n)), [FWD] * n, [costs.fwd], list(range(n))
    preds: list[list] = [[(p, g.edge_bytes(p, i)) for p in g.parents[i]] for i in range(n)]
    if not problem.settings.forward_only:
        ops += list(range(n))
        phases += [BWD] * n
        rows.append(costs.bwd)
        pos += [2 * n - 1 - i for i in range(n)]  # backwards run in reverse topological order
        for i in range(n):
            grads = c.ch_grad[c.ch_ptr[i]:c.ch_ptr[i + 1]]
            kids = c.ch_idx[c.ch_ptr[i]:c.ch_ptr[i + 1]]
            preds.append([(i, None)] + [(n + int(k), float(b) if b > 0 else None) for k, b in zip(kids, grads)])
        updated = [i for i in range(n) if (costs.update[i] > 0).any()]
        ops += updated
        phases += [UPD] * len(updated)
        rows.append(costs.update[updated])
        pos += [3 * n - 1 - i for i in updated]
        preds += [[(n + i, None)] for i in updated]
    succs: list[list] = [[] for _ in ops]
    for t, ps in enumerate(preds):
        for p, b in ps:
            succs[p].append((t, b))
    return TaskGraph(op=np.array(ops, dtype=np.int64), phase=np.array(phases, dtype=np.int64),
                     cost=np.vstack(rows).astype(float), pos=np.array(pos, dtype=np.int64),
                     preds=tuple(tuple(p) for p in preds), succs=tuple(tuple(s) for s in succs))


def upward_ranks(tasks: TaskGraph, links: Links | None) -> np.ndarray:
    """rank(t) = mean cost + max over successors of (mean communication + their rank); no links: no comm."""
    mean_cost = tasks.cost.mean(axis=1)
    rank = np.zeros(len(tasks))
    for t in np.argsort(-tasks.pos, kind="stable"):
        tail = 0.0
        for s, b in tasks.succs[t]:
            comm = links.mean_time(b) if (links is not None and b is not None) else 0.0
            tail = max(tail, comm + rank[s])
        rank[t] = mean_cost[t] + tail
    return rank


class Timeline:
    """One device's busy intervals in time order, in blocks that know their widest idle gap.

    The insertion policy asks for the first idle gap of a given length at or after a ready
    time. Walking the intervals one by one made HEFT quadratic (a task whose inputs are ready
    early on a device that is busy to the end walked every interval); here whole blocks whose
    widest gap is too short are skipped with one vectorised comparison, so a query costs
    about a block's length plus a scan over block maxima, and the answers are exactly those
    of the walk (:meth:`earliest` compares ``end + length <= start`` as the walk did; the
    block test only prunes with a margin above float rounding).
    """

    BLOCK = 64  # intervals per block (split at twice this)

    def __init__(self):
        self.starts: list[list[float]] = []
        self.ends: list[list[float]] = []
        self.last_end: list[float] = []  # per block; ends never decrease along the timeline
        self.widest = np.empty(0)  # per block: widest gap before one of its intervals (not the very first)
        self.top = 0.0  # the latest start: bounds the rounding in the block test

    def __len__(self) -> int:
        return sum(map(len, self.starts))

    def intervals(self) -> list[tuple[float, float]]:
        return [iv for st, en in zip(self.starts, self.ends) for iv in zip(st, en)]

    def earliest(self, ready: float, length: float) -> tuple[float, int, int]:
        """(start of the first idle gap of ``length`` at or after ``ready``, block, index to insert at)."""
        nb = len(self.starts)
        b = bisect_right(self.last_end, ready)
        if b == nb:  # idle from ``ready`` on
            return ready, nb, 0
        i = bisect_right(self.ends[b], ready)
        if ready + length <= self.starts[b][i]:
            return ready, b, i
        prev = self.ends[b][i]
        i += 1
        while True:
            st, en = self.starts[b], self.ends[b]
            for k in range(i, len(st)):
                if prev + length <= st[k]:
                    return prev, b, k
                prev = en[k]
            if b + 1 == nb:
                return prev, nb, 0
            # fits: prev + length <= start, so start - prev >= length - 2**-52 * (start + length)
            hit = np.flatnonzero(self.widest[b + 1:] >= length - 1e-15 * (self.top + length))
            if not len(hit):
                return self.last_end[-1], nb, 0
            b += 1 + int(hit[0])
            prev, i = self.last_end[b - 1], 0

    def insert(self, b: int, i: int, start: float, end: float) -> None:
        """Add the interval where :meth:`earliest` said (it fits there: the order stays sorted)."""
        self.top = max(self.top, start)
        if not self.starts:
            self.starts, self.ends, self.last_end = [[start]], [[end]], [end]
            self.widest = np.array([-np.inf])
            return
        if b == len(self.starts):
            b, i = b - 1, len(self.starts[b - 1])
        st, en = self.starts[b], self.ends[b]
        nb = len(self.starts)
        prev = en[i - 1] if i else (self.last_end[b - 1] if b else None)
        nxt = st[i] if i < len(st) else (self.starts[b + 1][0] if b + 1 < nb else None)
        owner = b if i < len(st) else b + 1  # the gap before an interval belongs to that interval's block
        st.insert(i, start)
        en.insert(i, end)
        self.last_end[b] = en[-1]
        widest = self.widest
        if prev is None or nxt is None:  # a new first or last interval: one new gap, none split
            if prev is not None:
                widest[b] = max(widest[b], start - prev)
            if nxt is not None:
                widest[owner] = max(widest[owner], nxt - end)
        else:  # the split gap's two parts are narrower: only a block whose widest gap it was changes
            if nxt - prev >= widest[owner]:
                self._refresh(owner)
            if owner != b:
                widest[b] = max(widest[b], start - prev)
        if len(st) > 2 * self.BLOCK:
            h = len(st) // 2
            self.starts[b:b + 1] = [st[:h], st[h:]]
            self.ends[b:b + 1] = [en[:h], en[h:]]
            self.last_end[b:b + 1] = [en[h - 1], en[-1]]
            self.widest = np.insert(self.widest, b, 0.0)
            self._refresh(b)
            self._refresh(b + 1)

    def _refresh(self, b: int) -> None:
        widest = -np.inf
        prev = self.last_end[b - 1] if b else None
        for s, e in zip(self.starts[b], self.ends[b]):
            if prev is not None and s - prev > widest:
                widest = s - prev
            prev = e
        self.widest[b] = widest


@dataclass
class HeftPlan:
    placement: np.ndarray  # [ops] device index
    makespan: float
    ranks: np.ndarray  # [tasks]
    tasks: TaskGraph
    device: np.ndarray  # [tasks]
    start: np.ndarray
    end: np.ndarray

    @property
    def op_ranks(self) -> np.ndarray:
        """Upward rank of every op's forward task, by op index."""
        n = len(self.placement)
        return self.ranks[:n]

    def entries(self, problem: Problem) -> list[dict]:
        """The plan as JSON-able rows, by start time."""
        order = np.lexsort((self.tasks.pos, self.device, self.start))
        names, devs = problem.graph.ops, problem.devices.names
        return [{"op": names[int(self.tasks.op[t])].name, "phase": PHASES[int(self.tasks.phase[t])],
                 "device": devs[int(self.device[t])], "start": float(self.start[t]), "end": float(self.end[t])}
                for t in order]


def heft_schedule(problem: Problem, *, comm: bool = True, memory: bool = False, progress=None,
                  devices=None) -> HeftPlan:
    """HEFT's placement and planned schedule of one training step (see the module docstring); ``devices``
    (indices) restricts the devices it may choose (default: all).

    ``progress(planned, tasks)``, when given, is called about every ``PROGRESS_EVERY`` tasks
    (a 50,000-op network has 125,000 tasks: some seconds of planning).
    """
    tasks = task_graph(problem)
    links = Links(problem)
    ranks = upward_ranks(tasks, links if comm else None)
    n, d = problem.n_ops, problem.n_devices
    scale = float(np.abs(ranks).max(initial=0.0)) or 1.0
    # Equal ranks (up to rounding) keep the topological order, as in the paper's n3/n4 tie.
    order = np.lexsort((tasks.pos, -np.round(ranks / scale, 9)))
    mem = MemoryEstimate(problem) if memory else None
    placement = np.full(n, -1, dtype=np.int32)
    device = np.full(len(tasks), -1, dtype=np.int64)
    start = np.zeros(len(tasks))
    end = np.zeros(len(tasks))
    busy = [Timeline() for _ in range(d)]
    # The op's backward and update will land on the device chosen for its forward.
    pending = (np.zeros((n, d)) if problem.settings.forward_only
               else np.asarray(problem.costs.bwd + problem.costs.update, dtype=float))
    # Equal finish times (zero-cost ops) go to the device that is fastest overall.
    total = np.asarray(problem.costs.fwd, dtype=float).sum(axis=0) + pending.sum(axis=0)
    preference = np.argsort(np.lexsort((np.arange(d), total)))

    # Plain lists in the loop: indexing numpy arrays one element at a time costs more than the planning.
    cost, preds = tasks.cost.tolist(), tasks.preds
    dev_of, end_of = [-1] * len(tasks), [0.0] * len(tasks)
    transfer = links.time if comm else None

    def finish_on(t: int, dev: int) -> tuple[float, float, int, int]:
        ready = 0.0
        for p, b in preds[t]:
            arrive = end_of[p] if transfer is None or b is None else end_of[p] + transfer(dev_of[p], dev, b)
            if arrive > ready:
                ready = arrive
        s, block, at = busy[dev].earliest(ready, cost[t][dev])
        return s, s + cost[t][dev], block, at

    for k, t in enumerate(order.tolist()):
        if progress is not None and k % PROGRESS_EVERY == 0:
            progress(k, len(tasks))
        op = int(tasks.op[t])
        if tasks.phase[t] == FWD:
            best = None
            for dev in (range(d) if devices is None else devices):
                s, e, block, at = finish_on(t, dev)
                key = (mem.overflow(op, dev, placement) if mem else 0.0, e + pending[op, dev], preference[dev])
                if best is None or key < best[0]:
                    best = (key, dev, s, e, block, at)
            _, dev, s, e, block, at = best
            if mem:
                mem.place(op, dev, placement)
            placement[op] = dev
        else:
            dev = int(placement[op])
            s, e, block, at = finish_on(t, dev)
        dev_of[t], end_of[t], start[t] = dev, e, s
        busy[dev].insert(block, at, s, e)
    device[:] = dev_of
    end[:] = end_of
    if progress is not None:
        progress(len(tasks), len(tasks))
    return HeftPlan(placement=placement, makespan=float(end.max(initial=0.0)), ranks=ranks, tasks=tasks,
                    device=device, start=start, end=end)


@register
class Heft(FixedCandidates):
    name = "heft"
    title = "HEFT (earliest finish time)"
    COMM = True
    MEMORY = False

    def __init__(self, problem, **kw):
        super().__init__(problem, **kw)
        self.plan: HeftPlan | None = None

    def schedule(self) -> HeftPlan:
        if self.plan is None:
            report = self.report
            progress = None if report is None else (
                lambda planned, total: report({"stage": "planning", "planned_tasks": planned, "tasks": total}))
            self.plan = heft_schedule(self.problem, comm=self.COMM, memory=self.MEMORY, progress=progress)
        return self.plan

    def candidates(self):
        return self.schedule().placement[None, :], [self.name]

    def extras(self) -> dict:
        plan = self.schedule()
        return {**super().extras(), "planned_makespan_s": plan.makespan, "plan": plan.entries(self.problem)}


@register
class HeftNoComm(Heft):
    name = "heft-nocomm"
    title = "HEFT without communication (TF-Mapper)"
    COMM = False


@register
class HeftMemory(Heft):
    name = "heft-memory"
    title = "HEFT, memory-aware"
    MEMORY = True


__all__ = ["Heft", "HeftMemory", "HeftNoComm", "HeftPlan", "TaskGraph", "heft_schedule", "task_graph",
           "upward_ranks"]
