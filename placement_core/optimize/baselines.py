"""Baseline placements (docs/design.md §6), each a deterministic optimizer that proposes a fixed list.

* ``single``: every op on one device, for every device; the driver keeps the best.
* ``expert``: contiguous stages in topological order, one per GPU, with stage boundaries
  that minimise the slowest stage's compute (fwd + bwd + update on that stage's GPU); one
  candidate per stage count 1..#GPUs, the k-stage one on the k fastest GPUs.
* ``m-topo`` and ``m-etf``: Baechi's memory-constrained placers (Jeon et al., SoCC 2020,
  read from its published code): m-TOPO walks the topological order and fills the devices one
  after another up to an equal share of the total op memory (weights + output) plus the
  largest op's (Baechi's slack; ``balance=compute`` shares compute time instead) and never
  beyond a device's capacity; m-ETF is earliest-task-first list scheduling (Hwang et al.
  1989) of the forward pass: repeatedly start the ready (op, device) pair that can start
  earliest, given transfers queued on the route's channel, among devices the op still fits
  on. The backward pass mirrors the forward on the same devices and only becomes ready once
  the forward reaches the sink, so ETF does not schedule it. Two departures from Baechi:
  "fits" is :class:`MemoryEstimate` (which also counts received copies and gradients, as the
  simulator does), and where Baechi stops with an error when an op fits nowhere, the op goes
  where it overflows least, so the simulator's penalty judges the result.
* ``min-cut`` (:mod:`.mincut`): recursive bisection of the op graph refined by Kernighan-Lin
  passes, like the Scotch/METIS baselines of Placeto and Post.

The baselines place on the GPUs when there are any, as the papers they come from do; by
default (``devices=auto``) the memory-aware ones add the other devices, after the GPUs, when
the GPUs together cannot hold the network (the thesis' "limited" machines); ``devices=all``
uses every device in listed order. What they share with HEFT (the fixed-candidate optimizer,
the transfer-time table, the memory estimate) is in :mod:`.fixed`.
"""

from __future__ import annotations

import numpy as np

from ..base.errors import InputError
from ..problem import Problem
from .base import Param, register
from .fixed_candidates import DEVICE_CHOICE, FixedCandidates, Links, MemoryEstimate, _names, op_work, target_devices

# -- single device ------------------------------------------------------------------------------

@register
class SingleDevice(FixedCandidates):
    name = "single"
    title = "Best single device"

    def candidates(self):
        xs = np.repeat(np.arange(self.d, dtype=np.int32)[:, None], self.n, axis=1)
        return xs, list(self.problem.devices.names)


# -- expert: balanced contiguous stages ---------------------------------------------------------

def balanced_stages(work: np.ndarray) -> list[int]:
    """Cut points 0 = b0 < b1 < ... < bk = n minimising the slowest stage (stage s costs work[:, s]).

    ``work`` is [ops, stages]; stage s runs ops b_s..b_{s+1}-1. Exact dynamic programme over
    prefix sums, O(k n^2), each stage's ends b worked out together in blocks of rows (a plan of a
    1,400-op GPT in 32 stages took 1.5 s one b at a time); among equal bottlenecks the earliest cut wins.
    """
    n, k = work.shape
    if not 1 <= k <= n:
        raise InputError(f"cannot split {n} ops into {k} non-empty stages", field="stages")
    prefix = np.vstack([np.zeros((1, k)), np.cumsum(work, axis=0)])
    best = np.full((k + 1, n + 1), np.inf)
    best[0, 0] = 0.0
    arg = np.zeros((k + 1, n + 1), dtype=np.int64)
    block = 64  # ends b per block; a block's starts a run up to its last b
    for s in range(1, k + 1):
        for lo in range(s, n - (k - s) + 1, block):
            b = np.arange(lo, min(lo + block, n - (k - s) + 1))
            a = np.arange(s - 1, b[-1])  # the starts stage s may have before these ends
            cand = np.maximum(best[s - 1, a][None, :], prefix[b, s - 1][:, None] - prefix[a, s - 1][None, :])
            cand[a[None, :] >= b[:, None]] = np.inf  # stage s is ops a..b-1: a < b
            j = np.argmin(cand, axis=1)
            best[s, b], arg[s, b] = cand[np.arange(len(b)), j], a[j]
    cuts = [n]
    for s in range(k, 0, -1):
        cuts.append(int(arg[s, cuts[-1]]))
    return cuts[::-1]


@register
class Expert(FixedCandidates):
    name = "expert"
    title = "Expert: balanced contiguous stages"
    PARAMS = {"devices": DEVICE_CHOICE}

    def candidates(self):
        targets = target_devices(self.problem, self.params["devices"])
        work = op_work(self.problem)
        speed_order = sorted(targets, key=lambda t: (work[:, t].sum(), t))
        xs, labels = [], []
        for k in range(1, min(len(targets), self.n) + 1):
            devs = sorted(speed_order[:k])
            cuts = balanced_stages(work[:, devs])
            x = np.empty(self.n, dtype=np.int32)
            for s, dev in enumerate(devs):
                x[cuts[s]:cuts[s + 1]] = dev
            xs.append(x)
            labels.append(f"{k} stage{'s' if k > 1 else ''} on {_names(self.problem, devs)}")
        return np.array(xs), labels


# -- Baechi m-TOPO ------------------------------------------------------------------------------

@register
class MTopo(FixedCandidates):
    name = "m-topo"
    title = "m-TOPO (Baechi): topological fill"
    PARAMS = {
        "devices": DEVICE_CHOICE,
        "balance": Param("memory", "what each device gets an equal share of: op memory (Baechi) or compute",
                         str, choices=("memory", "compute")),
    }

    def candidates(self):
        p = self.problem
        c = p.compiled
        memory = np.asarray(c.static_mem + c.out_bytes, dtype=float)  # Baechi: persistent + output
        targets = target_devices(p, self.params["devices"], need=float(memory.sum()))
        load = memory if self.params["balance"] == "memory" else op_work(p)[:, targets].mean(axis=1)
        share = load.sum() / len(targets) + load.max()  # Baechi's uniform limit, with one op of slack
        x = np.full(self.n, -1, dtype=np.int32)
        fits = MemoryEstimate(p)  # the capacity check, with received copies and gradients
        k, loaded = 0, 0.0
        for i in range(self.n):  # graph.ops is a topological order
            while k < len(targets):
                t = targets[k]
                if loaded + load[i] <= share and fits.overflow(i, t, x) == 0.0:
                    break
                k, loaded = k + 1, 0.0
            if k == len(targets):  # Baechi gives up here; we put the rest where it overflows least
                t = min(targets, key=lambda t: (fits.overflow(i, t, x), t))
            fits.place(i, t, x)
            x[i] = t
            loaded += load[i]
        return x[None, :], [f"{self.params['balance']} share on {_names(p, targets)}"]


# -- Baechi m-ETF -------------------------------------------------------------------------------

def etf_schedule(problem: Problem, targets: list[int]) -> tuple[np.ndarray, float]:
    """Memory-constrained earliest-task-first schedule of the forward pass: (placement, makespan).

    Each step starts the (ready op, device) pair with the earliest start time among devices
    the op still fits on (ties: topological position, then device); when it fits nowhere, the
    device it overflows least. A remote input crosses the route's channel once per device,
    after the channel's previous transfer (FIFO, like the simulator).
    """
    g = problem.graph
    n = len(g)
    fwd = problem.costs.fwd
    links = Links(problem)
    mem = MemoryEstimate(problem)
    x = np.full(n, -1, dtype=np.int32)
    finish = np.zeros(n)
    avail = np.zeros(problem.n_devices)
    chan_free = np.zeros(max(len(problem.devices.channels), 1))
    arrival: dict[tuple[int, int], float] = {}  # (op, device) -> when its output is there
    missing = [len(ps) for ps in g.parents]
    ready = [i for i in range(n) if missing[i] == 0]

    def inputs_ready(i: int, d: int, commit: bool) -> float:
        t = 0.0
        free = chan_free if commit else chan_free.copy()
        for p in sorted(g.parents[i], key=lambda p: (finish[p], p)):
            if x[p] == d:
                t = max(t, finish[p])
            elif (p, d) in arrival:
                t = max(t, arrival[(p, d)])
            else:
                c = links.channel[x[p], d]
                start = max(finish[p], free[c])
                end = start + links.time(int(x[p]), d, g.edge_bytes(p, i))
                free[c] = end
                if commit:
                    arrival[(p, d)] = end
                t = max(t, end)
        return t

    makespan = 0.0
    while ready:
        best = None
        for i in ready:
            for d in targets:
                key = (mem.overflow(i, d, x), max(avail[d], inputs_ready(i, d, False)), i, d)
                if best is None or key < best:
                    best = key
        _, _, i, d = best
        start = max(avail[d], inputs_ready(i, d, True))
        mem.place(i, d, x)
        x[i] = d
        finish[i] = avail[d] = start + fwd[i, d]
        makespan = max(makespan, finish[i])
        ready.remove(i)
        for ch in g.children[i]:
            missing[ch] -= 1
            if missing[ch] == 0:
                ready.append(ch)
    return x, makespan


@register
class MEtf(FixedCandidates):
    name = "m-etf"
    title = "m-ETF (Baechi): earliest task first"
    PARAMS = {"devices": DEVICE_CHOICE}

    def candidates(self):
        targets = target_devices(self.problem, self.params["devices"], need=MemoryEstimate(self.problem).total())
        x, self.planned_makespan = etf_schedule(self.problem, targets)
        return x[None, :], [f"ETF on {_names(self.problem, targets)}"]

    def extras(self) -> dict:
        out = super().extras()
        out["planned_forward_s"] = float(self.planned_makespan)
        return out
