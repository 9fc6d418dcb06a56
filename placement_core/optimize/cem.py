"""Cross-entropy method for placement (Post, NeurIPS 2018, §3.2 and Theorem 1).

One independent categorical distribution over devices per op, uniform at the
start (Post's u(0) = 0). Each update samples ``samples`` placements, keeps the
best ``elite_fraction`` of *that* batch (P = ρN placements, Theorem 1; ties at
the threshold γ_t go to the earlier sample), and sets each op's probabilities
to the device frequencies among those elites (Eq. 10, the closed-form
cross-entropy minimiser), mixed with the uniform distribution: p = (1 − ε)·freq
+ ε/|D| (Algorithm 1, line 12), where ε decays linearly from ``epsilon`` to 0
over ``steps`` evaluations (the budget when run through ``run``). The best
placement ever evaluated is kept by the driver, not by the distribution.
``smoothing`` < 1 blends the new frequencies with the old distribution (the
smoothed update of de Boer et al.'s CE tutorial); it is not part of Post.

The defaults are Post's (60 samples per update, elite fraction 0.1, ε = 0.1
decaying to 0), and with them the method converges fast and for good: the
frequencies of 6 elites move in steps of 1/6, so after a few updates every
op's elites agree and the distribution sits on the ε floor (ε/|D| per other
device). On the 8-op × 3-device brute-force instance of the tests (6,561
placements, 4 optima at 14.4 s) the 6 elites of a batch are identical from a
median of 5–6 updates (≈ 330 evaluations) on; over 100 seeds the method finds
the optimum in 68 / 73 / 78 runs at 300 / 600 / 2,000 evaluations (random
search: 17 / 31 / 71 %, the closed form 1 − (1 − 4/6561)^B), with the first
hit after a median of 180 evaluations. Every miss has converged on one of the 15.4 s
placements that are local minima under single-op moves, 4 ops away from the
nearest optimum; leaving it needs 4 specific ops to draw a specific other
device at once, ≈ (ε/|D|)^4 ≈ 1e-6 per sample, so more budget does not help.
This is the method as published (Post interleaves it with PPO steps: the ``post``
optimizer, :mod:`.policy_gradient`), not a defect of this implementation; the knobs that
delay the collapse are measured on that instance (hits in 30 seeds at 300 /
600 / 2,000 evaluations; defaults 19 / 21 / 24): smoothing 0.5 → 23 / 28 / 28,
elite_fraction 0.2 → 21 / 26 / 27, epsilon 0.3 → 21 / 26 / 28. Counting every
sample tied with the P-th best as an elite (Eq. 9's indicator read literally)
gives 74 / 73 / 80 in 100 seeds, the same as the defaults.
"""

from __future__ import annotations

import numpy as np

from .base import Optimizer, Param, register
from .search_space import POSTS_OWN, sample_categorical, setup, space_params


@register
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
        # the space pg, ppo and post search (search_space.py); by default Post's own: a uniform softmax per op
        **space_params(**POSTS_OWN),
    }

    def __init__(self, problem, **kw):
        super().__init__(problem, **kw)
        # the uniform distribution over devices, or over the gene space's draw when ops may be split, or the units'
        # start distribution (search_space.py)
        self.search = self.guard = None
        if self.sharded:
            self.base = self.space.base_probabilities()
            self.probs = self.base.copy()
        elif self.params == {**self.params, **POSTS_OWN}:  # Post's own space: exactly what cem always did
            self.base = 1.0 / self.d
            self.probs = np.full((self.n, self.d), 1.0 / self.d)
        else:
            self.search, self.base, self.guard = setup(self)
            self.probs = self.base.copy()
        self.used = 0
        self.updates = 0

    def epsilon(self) -> float:
        p = self.params
        return p["epsilon"] * max(0.0, 1.0 - self.used / p["steps"])

    def ask(self, limit: int) -> np.ndarray:
        from .search_space import draw
        return draw_batch(self, limit) if self.search is None else draw(self, self.probs, limit)

    def tell(self, placements: np.ndarray, objectives: np.ndarray) -> None:
        self.used += len(placements)
        if not len(placements):
            return
        if self.search is not None:
            placements = self.search.contract(placements)
        self.current = float(objectives.min())
        self.cross_entropy_update(placements, objectives)

    def cross_entropy_update(self, placements: np.ndarray, objectives: np.ndarray) -> None:
        """Eq. 10: each op's new distribution is its device frequencies among the elites, mixed with ε times the
        uniform draw (ε/|D|, or the gene space's draw when ops may be split)."""
        freq = elite_frequencies(placements, objectives, self.params["elite_fraction"], self.probs.shape[1])
        eps = self.epsilon()
        a = self.params["smoothing"]
        self.probs = (1 - eps) * (a * freq + (1 - a) * self.probs) + eps * self.base
        self.updates += 1

    def snapshot(self) -> dict:
        return {"updates": self.updates, "epsilon": self.epsilon(),
                "entropy": float(-(self.probs * np.log(np.clip(self.probs, 1e-12, 1))).sum(axis=1).mean()),
                **(self.guard.report() if self.guard is not None else {})}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "probs": self.probs.tolist(), "used": self.used, "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.probs = np.array(state["probs"], dtype=float)
        self.used, self.updates = state["used"], state["updates"]


def draw_batch(opt, limit: int) -> np.ndarray:
    """A sample of ``opt.params['samples']`` placements (at most ``limit``) from ``opt.probs``; before the first
    update the initial placements come first (CEM and the policy-gradient family share this)."""
    k = min(opt.params["samples"], limit)
    seeds = opt.initial[:k] if opt.updates == 0 else opt.initial[:0]
    drawn = sample_categorical(opt.probs, opt.rng, k - len(seeds))
    if opt.sharded:  # a gene of probability 0 is never drawn, but the last column takes the cumsum's rounding
        drawn = opt.space.repair(drawn)
    return np.concatenate([seeds, drawn]).astype(np.int32)


def elite_frequencies(placements: np.ndarray, objectives: np.ndarray, elite_fraction: float, d: int) -> np.ndarray:
    """[ops, devices] device frequencies among the best ``elite_fraction`` (ties: the earlier sample first)."""
    n_elite = max(1, int(round(elite_fraction * len(placements))))
    elites = placements[np.argsort(objectives, kind="stable")[:n_elite]]
    n = placements.shape[1]
    freq = np.zeros((n, d))
    np.add.at(freq, (np.repeat(np.arange(n)[None, :], len(elites), axis=0), elites), 1.0)
    return freq / len(elites)
