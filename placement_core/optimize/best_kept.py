"""The K best distinct placements a run has evaluated, whatever its algorithm.

A GA's population converges and forgets, annealing keeps one state: without this a finished run offers
only its best placement to re-benchmark for real (thesis E4 measures the best few a simulator found, since
its ranking is not perfect). The driver offers every evaluated batch; only placements better than the
worst kept are hashed, so keeping costs nothing next to a simulation.
"""

from __future__ import annotations

import numpy as np

KEEP = 50  # the thesis' E4 benchmarked the 50 best of a MAP-Elites run


class KeptBest:
    """The ``k`` lowest-objective distinct placements offered so far (ties: the first offered stays)."""

    def __init__(self, k: int = KEEP):
        self.k = int(k)
        self._by_key: dict[bytes, tuple[float, int, np.ndarray]] = {}
        self._order = 0  # offer order, breaks ties
        self._worst = float("inf")

    def __len__(self) -> int:
        return len(self._by_key)

    def offer(self, placements: np.ndarray, objectives: np.ndarray) -> None:
        if self.k <= 0 or len(objectives) == 0:
            return
        fs = np.asarray(objectives, dtype=float)
        full = len(self._by_key) >= self.k
        for i in (np.flatnonzero(fs < self._worst) if full else range(len(fs))):
            f = float(fs[i])
            if not np.isfinite(f) or (len(self._by_key) >= self.k and not f < self._worst):
                continue
            key = np.ascontiguousarray(placements[i], dtype=np.int32).tobytes()
            if key in self._by_key:
                continue
            self._by_key[key] = (f, self._order, np.frombuffer(key, dtype=np.int32).copy())
            self._order += 1
            if len(self._by_key) > self.k:
                drop = max(self._by_key, key=lambda kk: (self._by_key[kk][0], self._by_key[kk][1]))
                del self._by_key[drop]
            if len(self._by_key) >= self.k:
                self._worst = max(v[0] for v in self._by_key.values())

    def ranked(self) -> list[tuple[float, np.ndarray]]:
        """(objective, placement) pairs, best first."""
        return [(f, x) for f, _, x in sorted(self._by_key.values(), key=lambda v: (v[0], v[1]))]

    def state(self) -> list:
        return [[f, o, x.tolist()] for f, o, x in sorted(self._by_key.values(), key=lambda v: (v[0], v[1]))]

    def load(self, state: list | None) -> None:
        self._by_key.clear()
        self._order = 0
        for f, o, x in state or []:
            arr = np.asarray(x, dtype=np.int32)
            self._by_key[arr.tobytes()] = (float(f), int(o), arr)
            self._order = max(self._order, int(o) + 1)
        self._worst = max((v[0] for v in self._by_key.values()), default=float("inf")) \
            if len(self._by_key) >= self.k else float("inf")
