"""The K best distinct placements a run has evaluated, whatever its algorithm.

A GA's population converges and forgets, annealing keeps one state: without this a finished run offers
only its best placement to re-benchmark for real (thesis E4 measures the best few a simulator found, since
its ranking is not perfect). The driver offers every evaluated batch; only placements better than the
worst kept are hashed, so keeping costs nothing next to a simulation.
"""

from __future__ import annotations

import bisect
import math

import numpy as np

KEEP = 50  # the thesis' E4 benchmarked the 50 best of a MAP-Elites run


class KeptBest:
    """The ``k`` lowest-objective distinct placements offered so far (ties: the first offered stays)."""

    def __init__(self, k: int = KEEP):
        self.k = int(k)
        self._keys: set[bytes] = set()  # the placements kept, as their int32 bytes
        self._ranked: list[tuple[float, int, bytes]] = []  # (objective, offer order, placement bytes), sorted
        self._order = 0  # offer order, breaks ties
        self._worst = float("inf")

    def __len__(self) -> int:
        return len(self._keys)

    def offer(self, placements: np.ndarray, objectives: np.ndarray) -> None:
        if self.k <= 0 or len(objectives) == 0:
            return
        fs = np.asarray(objectives, dtype=float)
        full = len(self._keys) >= self.k
        if full and not fs.min() < self._worst:  # most batches of a long run: nothing to keep (a NaN never is)
            return
        xs = np.ascontiguousarray(placements, dtype=np.int32)
        values = fs.tolist()
        for i in (np.flatnonzero(fs < self._worst).tolist() if full else range(len(fs))):
            f = values[i]
            if not math.isfinite(f) or (len(self._keys) >= self.k and not f < self._worst):
                continue
            key = xs[i].tobytes()
            if key in self._keys:
                continue
            self._keys.add(key)
            bisect.insort(self._ranked, (f, self._order, key))
            self._order += 1
            if len(self._keys) > self.k:  # the worst (the last offered among equals) goes
                self._keys.discard(self._ranked.pop()[2])
            if len(self._keys) >= self.k:
                self._worst = self._ranked[-1][0]

    def ranked(self) -> list[tuple[float, np.ndarray]]:
        """(objective, placement) pairs, best first."""
        return [(f, np.frombuffer(key, dtype=np.int32).copy()) for f, _, key in self._ranked]

    def state(self) -> list:
        return [[f, o, np.frombuffer(key, dtype=np.int32).tolist()] for f, o, key in self._ranked]

    def load(self, state: list | None) -> None:
        entries = {}
        self._order = 0
        for f, o, x in state or []:
            entries[np.asarray(x, dtype=np.int32).tobytes()] = (float(f), int(o))
            self._order = max(self._order, int(o) + 1)
        self._keys = set(entries)
        self._ranked = sorted((f, o, key) for key, (f, o) in entries.items())
        self._worst = self._ranked[-1][0] if len(self._keys) >= self.k else float("inf")
