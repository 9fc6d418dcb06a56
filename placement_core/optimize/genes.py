"""What a gene may be when ops may be split, and how the searches draw one (docs/sharding.md).

Without splits a gene is a device and the searches draw ``rng.integers(0, d)`` exactly as they always
did (the operators take the device count, an int). With splits (``--sharding``) they take a
:class:`Genes` instead: a fresh gene is a device with probability 1 - ``SHARD_RATE`` (uniform over
the devices) and otherwise one of the splits its op can take (uniform over those), so half the draws
keep ops whole however many splits the table has. A gene that lands on an op that cannot take it (a
zone mutation's split over a ReLU, a copied neighbour's channel split) is *repaired*: the same devices
split along the other dimension if the op allows it, else the split's first device.
"""

from __future__ import annotations

import numpy as np

SHARD_RATE = 0.5


class Genes:
    def __init__(self, problem):
        nd, T, n = problem.n_devices, len(problem.splits), problem.n_ops
        self.nd, self.T, self.n, self.total = nd, T, n, nd + T
        allowed = problem.allowed
        # per op: its splits as genes, padded (uniform draws index the first count[i] entries)
        self.count = allowed.sum(axis=1).astype(np.int64)
        width = max(int(self.count.max()), 1)
        self.choices = np.zeros((n, width), dtype=np.int32)
        for i in range(n):
            ts = np.flatnonzero(allowed[i])
            self.choices[i, :len(ts)] = nd + ts
        # repair[i, g]: g when op i may take it, else the same devices along the other dimension, else a device
        self.repair_table = np.tile(np.arange(self.total, dtype=np.int32), (n, 1))
        index = {(s.dim, s.devices, s.sizes): t for t, s in enumerate(problem.splits)}
        for t, s in enumerate(problem.splits):
            other = index.get(("batch" if s.dim == "channel" else "channel", s.devices, None))
            bad = ~allowed[:, t]
            fix = np.full(n, s.devices[0], dtype=np.int32)
            if other is not None:
                fix = np.where(allowed[:, other], nd + other, fix).astype(np.int32)
            self.repair_table[bad, nd + t] = fix[bad]
        # the devices each gene runs on (descriptors count them)
        self.uses = np.zeros((self.total, nd), dtype=bool)
        self.uses[np.arange(nd), np.arange(nd)] = True
        for t, s in enumerate(problem.splits):
            self.uses[nd + t, list(s.devices)] = True
        self.first = np.array(list(range(nd)) + [s.devices[0] for s in problem.splits], dtype=np.int32)

    def draw(self, rng: np.random.Generator, positions: np.ndarray) -> np.ndarray:
        """A fresh gene for the op at each of ``positions``."""
        positions = np.asarray(positions, dtype=np.int64)
        shape = positions.shape
        flat = positions.ravel()
        split = (rng.random(flat.size) < SHARD_RATE) & (self.count[flat] > 0)
        devices = rng.integers(0, self.nd, flat.size)
        pick = (rng.random(flat.size) * self.count[flat]).astype(np.int64)
        out = np.where(split, self.choices[flat, np.minimum(pick, self.choices.shape[1] - 1)], devices)
        return out.astype(np.int32).reshape(shape)

    def draw_any(self, rng: np.random.Generator) -> int:
        """One gene for a run of ops (a zone mutation): a device, or any split (repaired per op)."""
        if self.T and rng.random() < SHARD_RATE:
            return self.nd + int(rng.integers(0, self.T))
        return int(rng.integers(0, self.nd))

    def repair(self, x: np.ndarray) -> np.ndarray:
        """Every gene made one its op can take (the array's last axis is over the ops)."""
        x = np.asarray(x)
        pos = np.broadcast_to(np.arange(self.n), x.shape)
        return self.repair_table[pos, x].astype(np.int32)

    def other(self, rng: np.random.Generator, i: int, current: int) -> int:
        """A gene for op ``i`` different from ``current`` (local search's move)."""
        for _ in range(64):
            g = int(self.draw(rng, np.array([i]))[0])
            if g != current:
                return g
        return (current + 1) % self.nd if current < self.nd else 0

    def base_probabilities(self) -> np.ndarray:
        """``[ops, genes]``: the draw's distribution per op (the cross-entropy method's uniform)."""
        p = np.zeros((self.n, self.total))
        has = self.count > 0
        p[:, :self.nd] = np.where(has, 1.0 - SHARD_RATE, 1.0)[:, None] / self.nd
        for i in np.flatnonzero(has):
            p[i, self.choices[i, :self.count[i]]] = SHARD_RATE / self.count[i]
        return p


def gene_space(problem):
    """The problem's device count (int) without splits, its :class:`Genes` with them (made once per problem)."""
    if not problem.splits:
        return problem.n_devices
    cached = getattr(problem, "_gene_space", None)
    if cached is None:
        cached = Genes(problem)
        problem._gene_space = cached
    return cached
