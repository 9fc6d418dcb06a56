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

from bisect import bisect_right, insort
from dataclasses import dataclass

import numpy as np

from ..problem import Problem
from .baselines import BWD, FWD, UPD, FixedCandidates, Links, MemoryEstimate

PHASES = ("fwd", "bwd", "update")


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


def _earliest_slot(busy: list[tuple[float, float]], ready: float, length: float) -> float:
    """Start of the first idle gap of ``length`` at or after ``ready`` (busy: sorted, disjoint)."""
    t = ready
    for s, e in busy[bisect_right(busy, ready, key=lambda iv: iv[1]):]:
        if t + length <= s:
            break
        t = max(t, e)
    return t


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


def heft_schedule(problem: Problem, *, comm: bool = True, memory: bool = False) -> HeftPlan:
    """HEFT's placement and planned schedule of one training step (see the module docstring)."""
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
    busy: list[list[tuple[float, float]]] = [[] for _ in range(d)]
    # The op's backward and update will land on the device chosen for its forward.
    pending = (np.zeros((n, d)) if problem.settings.forward_only
               else np.asarray(problem.costs.bwd + problem.costs.update, dtype=float))
    # Equal finish times (zero-cost ops) go to the device that is fastest overall.
    total = np.asarray(problem.costs.fwd, dtype=float).sum(axis=0) + pending.sum(axis=0)
    preference = np.argsort(np.lexsort((np.arange(d), total)))

    def finish_on(t: int, dev: int) -> tuple[float, float]:
        ready = 0.0
        for p, b in tasks.preds[t]:
            arrive = end[p] + (links.time(int(device[p]), dev, b) if comm and b is not None else 0.0)
            ready = max(ready, arrive)
        s = _earliest_slot(busy[dev], ready, float(tasks.cost[t, dev]))
        return s, s + float(tasks.cost[t, dev])

    for t in order:
        op = int(tasks.op[t])
        if tasks.phase[t] == FWD:
            best = None
            for dev in range(d):
                s, e = finish_on(t, dev)
                key = (mem.overflow(op, dev, placement) if mem else 0.0, e + pending[op, dev], preference[dev])
                if best is None or key < best[0]:
                    best = (key, dev, s, e)
            _, dev, s, e = best
            if mem:
                mem.place(op, dev, placement)
            placement[op] = dev
        else:
            dev = int(placement[op])
            s, e = finish_on(t, dev)
        device[t], start[t], end[t] = dev, s, e
        insort(busy[dev], (s, e))
    return HeftPlan(placement=placement, makespan=float(end.max(initial=0.0)), ranks=ranks, tasks=tasks,
                    device=device, start=start, end=end)


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
            self.plan = heft_schedule(self.problem, comm=self.COMM, memory=self.MEMORY)
        return self.plan

    def candidates(self):
        return self.schedule().placement[None, :], [self.name]

    def extras(self) -> dict:
        plan = self.schedule()
        return {**super().extras(), "planned_makespan_s": plan.makespan, "plan": plan.entries(self.problem)}


class HeftNoComm(Heft):
    name = "heft-nocomm"
    title = "HEFT without communication (TF-Mapper)"
    COMM = False


class HeftMemory(Heft):
    name = "heft-memory"
    title = "HEFT, memory-aware"
    MEMORY = True


def _register() -> None:
    from . import register  # the package defines register before importing this module

    for cls in (Heft, HeftNoComm, HeftMemory):
        register(cls)


_register()

__all__ = ["Heft", "HeftMemory", "HeftNoComm", "HeftPlan", "TaskGraph", "heft_schedule", "task_graph",
           "upward_ranks"]
