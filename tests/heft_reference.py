"""HEFT as it was before the indexed timelines: a linear walk over each device's busy list.

Kept verbatim (bar names) as the reference the fast implementation must match exactly.
"""

from __future__ import annotations

from bisect import bisect_right, insort

import numpy as np

from placement_core.optimize.fixed_candidates import FWD, Links, MemoryEstimate
from placement_core.optimize.heft import task_graph, upward_ranks


def earliest_slot(busy: list[tuple[float, float]], ready: float, length: float) -> float:
    """Start of the first idle gap of ``length`` at or after ``ready`` (busy: sorted, disjoint)."""
    t = ready
    for s, e in busy[bisect_right(busy, ready, key=lambda iv: iv[1]):]:
        if t + length <= s:
            break
        t = max(t, e)
    return t


def reference_schedule(problem, *, comm: bool = True, memory: bool = False):
    """(placement, device, start, end) per task, as the quadratic implementation planned them."""
    tasks = task_graph(problem)
    links = Links(problem)
    ranks = upward_ranks(tasks, links if comm else None)
    n, d = problem.n_ops, problem.n_devices
    scale = float(np.abs(ranks).max(initial=0.0)) or 1.0
    order = np.lexsort((tasks.pos, -np.round(ranks / scale, 9)))
    mem = MemoryEstimate(problem) if memory else None
    placement = np.full(n, -1, dtype=np.int32)
    device = np.full(len(tasks), -1, dtype=np.int64)
    start = np.zeros(len(tasks))
    end = np.zeros(len(tasks))
    busy: list[list[tuple[float, float]]] = [[] for _ in range(d)]
    pending = (np.zeros((n, d)) if problem.settings.forward_only
               else np.asarray(problem.costs.bwd + problem.costs.update, dtype=float))
    total = np.asarray(problem.costs.fwd, dtype=float).sum(axis=0) + pending.sum(axis=0)
    preference = np.argsort(np.lexsort((np.arange(d), total)))

    def finish_on(t: int, dev: int) -> tuple[float, float]:
        ready = 0.0
        for p, b in tasks.preds[t]:
            arrive = end[p] + (links.time(int(device[p]), dev, b) if comm and b is not None else 0.0)
            ready = max(ready, arrive)
        s = earliest_slot(busy[dev], ready, float(tasks.cost[t, dev]))
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
    return placement, device, start, end
