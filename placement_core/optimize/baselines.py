"""Baseline placements (DESIGN §5), each a deterministic optimizer that proposes a fixed list.

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
* ``min-cut``: recursive bisection of the undirected op graph (edge weight = tensor bytes,
  node weight = compute time) refined by Kernighan-Lin/Fiduccia-Mattheyses passes under a
  balance constraint, into one part per GPU, like the Scotch/METIS baselines of Placeto and
  Post.

The baselines place on the GPUs when there are any, as the papers they come from do; by
default (``devices=auto``) the memory-aware ones add the other devices, after the GPUs, when
the GPUs together cannot hold the network (the thesis' "limited" machines); ``devices=all``
uses every device in listed order. The module also holds what HEFT shares with them: the
fixed-candidate optimizer, the transfer-time table and the memory estimate.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..problem import Problem
from .base import Optimizer, Param

FWD, BWD, UPD = 0, 1, 2


# -- shared machinery ---------------------------------------------------------------------------

class FixedCandidates(Optimizer):
    """A deterministic algorithm: computes its candidates once, proposes them, then finishes.

    ``initial`` is ignored. ``extras()`` lists each candidate's label and objective.
    """

    deterministic = True
    PARAMS: dict = {}

    def __init__(self, problem, **kw):
        super().__init__(problem, **kw)
        self._cands: np.ndarray | None = None
        self._labels: list[str] = []
        self._objectives: list[float] = []
        self._next = 0

    def candidates(self) -> tuple[np.ndarray, list[str]]:
        """(placements [k, n_ops], a label per placement)."""
        raise NotImplementedError

    def all_candidates(self) -> np.ndarray:
        if self._cands is None:
            xs, labels = self.candidates()
            xs = np.ascontiguousarray(np.atleast_2d(xs), dtype=np.int32)
            keep, seen = [], set()
            for i, x in enumerate(xs):  # the same placement twice would waste an evaluation
                if x.tobytes() not in seen:
                    seen.add(x.tobytes())
                    keep.append(i)
            self._cands = xs[keep]
            self._labels = [labels[i] for i in keep]
        return self._cands

    def ask(self, limit: int) -> np.ndarray:
        xs = self.all_candidates()
        return xs[self._next:self._next + max(int(limit), 0)]

    def tell(self, placements: np.ndarray, objectives: np.ndarray) -> None:
        self._next += len(placements)
        self._objectives.extend(float(f) for f in objectives)
        if len(objectives):
            self.current = min(self.current, float(np.min(objectives)))
        if self._next >= len(self.all_candidates()):
            self.finished = True

    def snapshot(self) -> dict:
        return {"proposed": self._next, "candidates": len(self.all_candidates())}

    def extras(self) -> dict:
        self.all_candidates()
        return {"candidates": [{"label": lab, "objective": f}
                               for lab, f in zip(self._labels, self._objectives)]}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "next": self._next, "objectives": list(self._objectives)}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._next = int(state["next"])
        self._objectives = [float(f) for f in state["objectives"]]


class Links:
    """Transfer times between devices as the simulator charges them (no contention)."""

    def __init__(self, problem: Problem):
        d = problem.n_devices
        costs = problem.costs
        self.channel = np.full((d, d), -1, dtype=np.int64)
        for (a, b), c in problem.devices.route.items():
            self.channel[a, b] = c
        self.latency = np.asarray(costs.ch_latency, dtype=float)
        self.inv_rate = np.asarray(costs.ch_inv_rate, dtype=float)
        self.min_transfer = np.asarray(costs.min_transfer, dtype=float)
        off = ~np.eye(d, dtype=bool)
        if d > 1:
            ch = self.channel[off]
            # Topcuoglu et al.: mean cost = mean startup + bytes / mean transfer rate, over the
            # ordered pairs of distinct processors (a tensor on its own device costs nothing).
            self.mean_latency = float(self.latency[ch].mean())
            self.mean_rate = float((1.0 / self.inv_rate[ch]).mean())
            self.mean_min = float(np.broadcast_to(self.min_transfer[:, None], (d, d))[off].mean())
        self.d = d

    def time(self, src: int, dst: int, nbytes: float) -> float:
        if src == dst:
            return 0.0
        c = self.channel[src, dst]
        return max(float(self.latency[c] + nbytes * self.inv_rate[c]), float(self.min_transfer[src]))

    def mean_time(self, nbytes: float) -> float:
        if self.d < 2:
            return 0.0
        return max(self.mean_latency + nbytes / self.mean_rate, self.mean_min)


class MemoryEstimate:
    """What placing an op adds to its device's peak memory, the way the simulator counts it.

    Training: its resident weights (and gradients), its activation (kept for the backward
    pass when it has consumers) and a copy of each remote input not yet on the device; these
    stay until the backward pass, so at the end of the forward pass they are all resident at
    once. On top of that, the largest set of gradients one backward op of the device holds at
    once (those it consumes plus those it produces). Forward only: weights stay, the op's
    output only while it runs. Gradients of several branches pending together are not
    counted, so this can slightly underestimate the simulated peak.
    """

    def __init__(self, problem: Problem):
        c = problem.compiled
        self.graph = problem.graph
        self.static = np.asarray(c.static_mem, dtype=float)
        self.out = np.asarray(c.out_bytes, dtype=float)
        self.capacity = np.asarray(problem.capacity, dtype=float)
        self.training = not problem.settings.forward_only
        self.keeps_output = np.array([bool(ch) for ch in problem.graph.children])
        self.used = np.zeros(problem.n_devices)
        self.copies: list[set[int]] = [set() for _ in range(problem.n_devices)]
        n = len(problem.graph)
        ops = np.arange(n)
        grads_in = np.bincount(np.repeat(ops, np.diff(c.ch_ptr)), weights=c.ch_grad, minlength=n)
        grads_out = np.bincount(np.repeat(ops, np.diff(c.par_ptr)), weights=c.par_grad, minlength=n)
        self.transient = (grads_in + grads_out) if self.training else self.out.copy()
        self.peak_transient = np.zeros(problem.n_devices)

    def total(self) -> float:
        """Everything the network keeps resident if it ran on one device (no copies)."""
        if not self.training:
            return float(self.static.sum() + self.out.max(initial=0.0))
        return float(self.static.sum() + self.out[self.keeps_output].sum() + self.transient.max(initial=0.0))

    def _remote_inputs(self, i: int, d: int, placement: np.ndarray) -> list[int]:
        return [p for p in self.graph.parents[i] if placement[p] != d and p not in self.copies[d]]

    def need(self, i: int, d: int, placement: np.ndarray) -> float:
        """Bytes that stay on ``d`` once op ``i`` is placed there."""
        if not self.training:
            return float(self.static[i])
        b = self.static[i] + (self.out[i] if self.keeps_output[i] else 0.0)
        return float(b + sum(self.graph.edge_bytes(p, i) for p in self._remote_inputs(i, d, placement)))

    def overflow(self, i: int, d: int, placement: np.ndarray) -> float:
        """Bytes by which ``d``'s estimated peak would exceed its capacity with op ``i`` on it."""
        peak = self.used[d] + self.need(i, d, placement) + max(self.peak_transient[d], self.transient[i])
        return max(0.0, float(peak - self.capacity[d]))

    def place(self, i: int, d: int, placement: np.ndarray) -> None:
        self.used[d] += self.need(i, d, placement)
        self.peak_transient[d] = max(self.peak_transient[d], self.transient[i])
        if self.training:
            self.copies[d].update(self._remote_inputs(i, d, placement))


DEVICE_CHOICE = Param("auto", "devices to place on: gpus (all devices when there is none); auto: the GPUs, "
                      "then the others too if the GPUs cannot hold the network (memory-aware placers only); "
                      "all: every device in listed order", str, choices=("auto", "gpus", "all"))


def target_devices(problem: Problem, which: str = "auto", need: float | None = None) -> list[int]:
    """Device indices a baseline places on, in the order it fills them.

    ``need``: the bytes the network needs (memory-aware placers pass it); with ``auto``, when
    the GPUs' capacity is below it, the other devices follow the GPUs.
    """
    everything = list(range(problem.n_devices))
    gpus = [i for i, dev in enumerate(problem.devices.devices) if dev.kind == "gpu"]
    if which == "all" or not gpus:
        return everything
    if which == "auto" and need is not None and float(problem.capacity[gpus].sum()) < need:
        return gpus + [i for i in everything if i not in gpus]
    return gpus


def op_work(problem: Problem) -> np.ndarray:
    """Compute time of a whole training step per op and device [ops, devices] (forward only: fwd)."""
    c = problem.costs
    if problem.settings.forward_only:
        return np.asarray(c.fwd, dtype=float)
    return np.asarray(c.fwd + c.bwd + c.update, dtype=float)


def _names(problem: Problem, devs) -> str:
    return ",".join(problem.devices.names[d] for d in devs)


# -- single device ------------------------------------------------------------------------------

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
    prefix sums, O(k n^2); among equal bottlenecks the earliest cut wins.
    """
    n, k = work.shape
    if not 1 <= k <= n:
        raise InputError(f"cannot split {n} ops into {k} non-empty stages", field="stages")
    prefix = np.vstack([np.zeros((1, k)), np.cumsum(work, axis=0)])
    best = np.full((k + 1, n + 1), np.inf)
    best[0, 0] = 0.0
    arg = np.zeros((k + 1, n + 1), dtype=np.int64)
    for s in range(1, k + 1):
        for b in range(s, n - (k - s) + 1):
            a = np.arange(s - 1, b)
            cand = np.maximum(best[s - 1, a], prefix[b, s - 1] - prefix[a, s - 1])
            j = int(np.argmin(cand))
            best[s, b], arg[s, b] = cand[j], a[j]
    cuts = [n]
    for s in range(k, 0, -1):
        cuts.append(int(arg[s, cuts[-1]]))
    return cuts[::-1]


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


# -- min-cut: recursive Kernighan-Lin bisection -------------------------------------------------

def _cut(adj: np.ndarray, side: np.ndarray) -> float:
    return float(adj[side][:, ~side].sum())


def refine_bisection(adj: np.ndarray, weight: np.ndarray, side: np.ndarray, target: float, tol: float,
                     max_passes: int = 20) -> np.ndarray:
    """Kernighan-Lin passes with single-node moves (Fiduccia-Mattheyses) under a balance bound.

    ``side`` True = part A, whose weight should be ``target`` within ``tol``. Each pass moves
    every node once, always the unlocked one with the largest cut gain whose move keeps the
    balance (or improves it, if it is off), then keeps the best balanced prefix of the moves.
    """
    side = side.copy()
    n = len(side)
    if n < 2:
        return side

    def off(w_a: float) -> float:
        return max(abs(w_a - target) - tol, 0.0)

    for _ in range(max_passes):
        same = np.where(side[:, None] == side[None, :], adj, 0.0).sum(axis=1)
        gain = adj.sum(axis=1) - 2.0 * same  # external - internal
        w_a = float(weight[side].sum())
        cut = _cut(adj, side)
        start = (off(w_a), cut)
        best, best_len = start, 0
        locked = np.zeros(n, dtype=bool)
        moves = []
        for _ in range(n):
            w_after = np.where(side, w_a - weight, w_a + weight)
            imbalance = np.maximum(np.abs(w_after - target) - tol, 0.0)
            allowed = ~locked & (imbalance <= off(w_a))
            if not allowed.any():
                break
            v = int(np.argmax(np.where(allowed, gain, -np.inf)))
            cut -= gain[v]
            w_a = float(w_after[v])
            delta = np.where(side == side[v], 2.0, -2.0) * adj[v]  # neighbours on v's old side gain
            side[v] = ~side[v]
            gain += delta
            gain[v] = -gain[v]
            locked[v] = True
            moves.append(v)
            state = (off(w_a), cut)
            if state < best:
                best, best_len = state, len(moves)
        for v in moves[best_len:]:  # undo the moves after the best prefix
            side[v] = ~side[v]
        if best_len == 0 or not best < start:
            break
    return side


def bisect(adj: np.ndarray, weight: np.ndarray, fraction: float, rng: np.random.Generator, starts: int,
           imbalance: float) -> np.ndarray:
    """Split nodes into A (about ``fraction`` of the weight) and B, minimising the cut.

    Starts: the topological prefix holding ``fraction`` of the weight, then ``starts - 1``
    random splits of that size; each refined by :func:`refine_bisection`; the best kept.
    """
    n = len(weight)
    total = float(weight.sum())
    target = fraction * total
    tol = max(imbalance * total, float(weight.max(initial=0.0)))

    def prefix_split(order: np.ndarray) -> np.ndarray:
        side = np.zeros(n, dtype=bool)
        acc = np.cumsum(weight[order])
        side[order[: int(np.searchsorted(acc, target, side="right"))]] = True
        return side

    best, best_key = None, None
    for s in range(max(starts, 1)):
        order = np.arange(n) if s == 0 else rng.permutation(n)
        side = refine_bisection(adj, weight, prefix_split(order), target, tol)
        key = (max(abs(float(weight[side].sum()) - target) - tol, 0.0), _cut(adj, side))
        if best_key is None or key < best_key:
            best, best_key = side, key
    return best


def min_cut_partition(problem: Problem, targets: list[int], rng: np.random.Generator, starts: int = 4,
                      imbalance: float = 0.05) -> np.ndarray:
    """Recursive bisection into one part per target device, parts sized by device speed."""
    g = problem.graph
    n = len(g)
    adj = np.zeros((n, n))
    for p, c, b in g.edges():
        adj[p, c] += b
        adj[c, p] += b
    work = op_work(problem)
    weight = work[:, targets].mean(axis=1)
    if not weight.sum() > 0:  # nothing costs time: balance op counts instead
        weight = np.ones(n)
    speed = {t: 1.0 / max(float(work[:, t].sum()), 1e-300) for t in targets}
    x = np.full(n, targets[0], dtype=np.int32)

    def split(nodes: np.ndarray, devs: list[int]) -> None:
        if len(devs) == 1 or len(nodes) == 0:
            x[nodes] = devs[0]
            return
        half = (len(devs) + 1) // 2
        frac = sum(speed[t] for t in devs[:half]) / sum(speed[t] for t in devs)
        side = bisect(adj[np.ix_(nodes, nodes)], weight[nodes], frac, rng, starts, imbalance)
        split(nodes[side], devs[:half])
        split(nodes[~side], devs[half:])

    split(np.arange(n), list(targets))
    return x


class MinCut(FixedCandidates):
    name = "min-cut"
    title = "Min-cut (recursive Kernighan-Lin)"
    PARAMS = {
        "devices": DEVICE_CHOICE,
        "starts": Param(4, "initial splits refined per bisection (the first is the topological prefix)", int,
                        low=1, high=1000),
        "imbalance": Param(0.05, "allowed deviation of a part's compute from its share (fraction of the total)",
                           float, low=0, high=1),
    }

    def candidates(self):
        p = self.params
        targets = target_devices(self.problem, p["devices"])
        x = min_cut_partition(self.problem, targets, self.rng, p["starts"], p["imbalance"])
        return x[None, :], [f"{len(targets)} parts on {_names(self.problem, targets)}"]


def _register() -> None:
    from . import register  # the package defines register before importing this module

    for cls in (SingleDevice, Expert, MTopo, MEtf, MinCut):
        register(cls)


_register()

__all__ = ["Expert", "FixedCandidates", "Links", "MEtf", "MTopo", "MemoryEstimate", "MinCut", "SingleDevice",
           "balanced_stages", "bisect", "etf_schedule", "min_cut_partition", "op_work", "refine_bisection",
           "target_devices"]
