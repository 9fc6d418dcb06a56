"""``min-cut``: recursive bisection of the undirected op graph (edge weight = tensor bytes, node weight =
compute time) refined by Kernighan-Lin/Fiduccia-Mattheyses passes under a balance constraint, into one part
per GPU, like the Scotch/METIS baselines of Placeto and Post."""

from __future__ import annotations

import numpy as np

from ..problem import Problem
from .base import Param, register
from .fixed_candidates import DEVICE_CHOICE, FixedCandidates, _names, op_work, target_devices

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


@register
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
