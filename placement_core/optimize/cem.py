"""Cross-entropy method for placement (Post, NeurIPS 2018, §3.2 and Theorem 1).

One independent categorical distribution over devices per op. Each update
samples ``samples`` placements, keeps the best ``elite_fraction``, and sets
each op's probabilities to the device frequencies among those elites (the
closed-form cross-entropy minimiser), mixed with the uniform distribution by
epsilon, which decays linearly from ``epsilon`` to 0 over the run so the
distribution cannot collapse early.
"""

from __future__ import annotations

import numpy as np

from .base import Optimizer, Param


class CrossEntropy(Optimizer):
    name = "cem"
    title = "Cross-entropy method"
    PARAMS = {
        "samples": Param(60, "placements sampled per distribution update", int, low=2, high=100_000),
        "elite_fraction": Param(0.1, "fraction of each sample kept as elites", float, low=0.001, high=1),
        "epsilon": Param(0.1, "initial weight of the uniform distribution mixed in", float, low=0, high=1),
        "steps": Param(20000, "evaluations over which epsilon decays to 0 (the budget, usually)", int, low=1),
        "smoothing": Param(1.0, "weight of the new frequencies against the old distribution (1 = Post's "
                                "closed-form update)", float, low=0.01, high=1),
    }

    def __init__(self, problem, **kw):
        super().__init__(problem, **kw)
        self.probs = np.full((self.n, self.d), 1.0 / self.d)
        self.used = 0
        self.updates = 0

    def epsilon(self) -> float:
        p = self.params
        return p["epsilon"] * max(0.0, 1.0 - self.used / p["steps"])

    def ask(self, limit: int) -> np.ndarray:
        k = min(self.params["samples"], limit)
        seeds = self.initial[:k] if self.updates == 0 else self.initial[:0]
        cum = np.cumsum(self.probs, axis=1)
        cum[:, -1] = 1.0
        u = self.rng.random((k - len(seeds), self.n, 1))
        drawn = (u > cum[None, :, :]).sum(axis=2).astype(np.int32)
        return np.concatenate([seeds, drawn]).astype(np.int32)

    def tell(self, placements: np.ndarray, objectives: np.ndarray) -> None:
        self.used += len(placements)
        if not len(placements):
            return
        self.current = float(objectives.min())
        n_elite = max(1, int(round(self.params["elite_fraction"] * len(placements))))
        elites = placements[np.argsort(objectives, kind="stable")[:n_elite]]
        freq = np.zeros((self.n, self.d))
        np.add.at(freq, (np.repeat(np.arange(self.n)[None, :], len(elites), axis=0), elites), 1.0)
        freq /= len(elites)
        eps = self.epsilon()
        a = self.params["smoothing"]
        self.probs = (1 - eps) * (a * freq + (1 - a) * self.probs) + eps / self.d
        self.updates += 1

    def snapshot(self) -> dict:
        return {"updates": self.updates, "epsilon": self.epsilon(),
                "entropy": float(-(self.probs * np.log(np.clip(self.probs, 1e-12, 1))).sum(axis=1).mean())}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "probs": self.probs.tolist(), "used": self.used, "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.probs = np.array(state["probs"], dtype=float)
        self.used, self.updates = state["used"], state["updates"]
