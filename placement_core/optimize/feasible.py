"""Memory as a constraint of the learned placers: what they return never overflows when their start fits.

A placement is checked on the simulator itself (its peak memory on every device, the numbers every evaluation
reports; :func:`overflowing`), so the guarantee is exact, not an estimate's. Two ways to keep it:

- **Masking** (a policy that decides node by node, Placeto's greedy pass): a move after which the placement would
  overflow is masked and the next most likely device taken; keeping the node where it is always fits, since the
  placement before the move did (by induction from the start). :func:`fits` is the check.
- **Falling back move by move** (a placement decided at once: pg, ppo and post's samples, GDP's one-shot
  placement, Placeto's sampled episodes): :class:`MemoryGuard` takes the placement's moves (the units it places
  elsewhere than the start does, in the order they were made, or the units' order), applies them to the start
  one after another and skips a move after which the placement would overflow. The result fits and keeps every
  move that fits in that order. The first overflowing move of the rest is found by bisection (about log2 m
  checks for m moves); a placement that fits as it is costs one check.

These checks are simulations, but not evaluations of the objective: the guard counts them (``checks``) and the
optimizers report the count, apart from the evaluations their budget counts.
"""

from __future__ import annotations

import numpy as np

from ..problem import Problem


def overflowing(problem: Problem, placements) -> np.ndarray:
    """[k] whether each placement's simulated peak memory exceeds a device's capacity."""
    arr = problem.checked(np.atleast_2d(placements))
    if not len(arr):
        return np.zeros(0, dtype=bool)
    results = problem.simulator.run_many(arr)
    return np.array([bool((r.peak_memory > problem.capacity).any()) for r in results], dtype=bool)


def fits(problem: Problem, placement) -> bool:
    return not bool(overflowing(problem, np.asarray(placement, dtype=np.int32)[None, :])[0])


def tied_units(problem: Problem) -> np.ndarray:
    """[ops] one unit per op, except that the calls of a shared module with weights (``Problem.tied``) are one."""
    unit = np.arange(problem.n_ops)
    for calls in problem.tied:
        unit[calls] = calls[0]
    _, first = np.unique(unit, return_index=True)
    label = np.empty(problem.n_ops, dtype=np.int64)
    label[np.sort(first)] = np.arange(len(first))
    return label[unit]


def guarded(problem: Problem, placements, start, order=None) -> np.ndarray:
    """Placements with the tied calls joined (``Problem.tie``) and each one that overflows fallen back toward
    ``start`` move by move (when ``start`` fits): what a learned placer may return."""
    return MemoryGuard(problem, problem.tie(start))(problem.tie(placements), order)


class MemoryGuard:
    """Falls placements back toward ``start`` move by move until each fits (a no-op when ``start`` overflows).

    ``unit_of`` ([ops] unit index; default one unit per op, the calls of a shared module with weights one) says
    which ops move together."""

    def __init__(self, problem: Problem, start, unit_of=None):
        self.problem = problem
        self.start = np.ascontiguousarray(start, dtype=np.int32).copy()
        self.unit_of = tied_units(problem) if unit_of is None else np.asarray(unit_of, dtype=np.int64)
        order = np.argsort(self.unit_of, kind="stable")
        bounds = np.flatnonzero(np.diff(self.unit_of[order])) + 1
        self.members = np.split(order, bounds)  # unit -> its ops (units numbered 0..U-1)
        self.checks = 1
        self.repaired = 0  # placements that overflowed and fell back
        self.skipped = 0  # moves skipped
        self.active = fits(problem, self.start)

    def _over(self, placements) -> np.ndarray:
        self.checks += len(placements)
        return overflowing(self.problem, placements)

    def __call__(self, placements, order=None) -> np.ndarray:
        """The placements, each one that overflows fallen back (a copy). ``order``: the op order the moves were
        made in (a node-by-node policy's visiting order); default: the units' own order."""
        out = np.array(np.atleast_2d(placements), dtype=np.int32, copy=True)
        if not self.active or not len(out):
            return out
        for k in np.flatnonzero(self._over(out)):
            out[k] = self.fall_back(out[k], order)
            self.repaired += 1
        return out

    def moves(self, placement: np.ndarray, order=None) -> list[int]:
        """The units ``placement`` puts elsewhere than the start, in the order they were made."""
        ops = np.flatnonzero(placement != self.start)
        if order is not None:
            rank = np.empty(self.problem.n_ops, dtype=np.int64)
            rank[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
            ops = ops[np.argsort(rank[ops], kind="stable")]
        return list(dict.fromkeys(self.unit_of[ops].tolist()))

    def fall_back(self, placement: np.ndarray, order=None) -> np.ndarray:
        """The start with ``placement``'s moves applied in order, skipping each one after which it would overflow."""
        moves = self.moves(placement, order)
        cur = self.start.copy()

        def applied(base: np.ndarray, units) -> np.ndarray:
            y = base.copy()
            for u in units:
                idx = self.members[u]
                y[idx] = placement[idx]
            return y

        i = 0
        while i < len(moves):
            whole = applied(cur, moves[i:])
            if not self._over(whole[None])[0]:
                return whole
            lo, hi = i, len(moves)  # moves[i:lo] applied to cur fits (cur does), moves[i:hi] overflows
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if self._over(applied(cur, moves[i:mid])[None])[0]:
                    hi = mid
                else:
                    lo = mid
            cur = applied(cur, moves[i:lo])  # moves[lo] is the first that overflows: skip it
            self.skipped += 1
            i = lo + 1
        return cur

    def report(self) -> dict:
        return {"memory_checks": self.checks, "fallen_back": self.repaired, "moves_skipped": self.skipped}
