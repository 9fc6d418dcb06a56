"""Genetic algorithm with elitism and self-adaptive mutation rates (thesis §3.2.2, Table 4.3).

A generation: rank the population; the elite (5) is kept and always among the
parents; the other parents come from rank (or tournament) selection; pairs
cross over (single-point, rate 0.2) and each child inherits a random weighted
mix of its parents' mutation rates, drifts it (Gaussian), then mutates with it
(point mutation) and, at rate 0.2, with a zone mutation. The next population
is the elite plus the children, so no evaluation is spent on a child that is
thrown away.
"""

from __future__ import annotations

import numpy as np

from . import operators as ops
from . import variation
from .base import Optimizer, Param, register


@register
class GeneticAlgorithm(Optimizer):
    name = "ga"
    title = "Genetic algorithm"
    PARAMS = {
        "population": Param(50, "individuals per generation", int, low=2, high=100_000),
        "elite": Param(5, "best individuals kept unchanged and always among the parents", int, low=0),
        "mutation_rate": Param(0.5, "initial per-gene point-mutation rate (then self-adapted)", float, low=0, high=1),
        "min_mutation_rate": Param(0.05, "lower clamp of the self-adapted rate", float, low=0, high=1),
        "max_mutation_rate": Param(0.9, "upper clamp of the self-adapted rate", float, low=0, high=1),
        "rate_drift": Param(0.05, "standard deviation of the Gaussian drift of a child's rate", float, low=0),
        "self_adaptive": Param(True, "carry and evolve a mutation rate per individual", bool),
        "zone_mutation_rate": Param(0.2, "probability that a child also gets a zone mutation", float, low=0, high=1),
        "crossover_rate": Param(0.2, "probability that a pair of parents crosses over", float, low=0, high=1),
        "crossover": Param("single-point", "single-point, N-point (e.g. 3-point) or uniform", str,
                           options=("single-point", "2-point", "3-point", "uniform")),
        "selection": Param("linear-rank", "parent selection", str,
                           choices=("linear-rank", "exponential-rank", "tournament")),
        "selection_pressure": Param(2.0, "linear rank pressure s in [1, 2]", float, low=1, high=2),
        "tournament_size": Param(3, "tournament size when selection=tournament", int, low=1, high=100_000),
        "include_trivial": Param(False, "start with every single-device placement in the population", bool),
    }

    def __init__(self, problem, **kw):
        super().__init__(problem, **kw)
        p = self.params
        if not ops.valid_crossover(p["crossover"]):
            from ..base.errors import InputError
            raise InputError(f"crossover must be single-point, N-point or uniform, got {p['crossover']!r}",
                             field="crossover")
        if p["elite"] >= p["population"]:
            from ..base.errors import InputError
            raise InputError("elite must be smaller than the population", field="elite")
        self.pop = np.zeros((0, self.n), dtype=np.int32)
        self.pop_f = np.zeros(0)
        self.pop_rate = np.zeros(0)
        self._pending_rate = np.zeros(0)
        self.generation = 0

    def _clamp(self, r):
        return np.clip(r, self.params["min_mutation_rate"], self.params["max_mutation_rate"])

    def ask(self, limit: int) -> np.ndarray:
        p = self.params
        if self.generation == 0:
            first = [self.initial[: p["population"]]]
            if p["include_trivial"]:
                first.append(np.repeat(np.arange(self.d, dtype=np.int32)[:, None], self.n, axis=1))
            first = np.concatenate(first)[: p["population"]]
            rest = self.random_placements(p["population"] - len(first))
            xs = np.concatenate([first, rest]).astype(np.int32)
            rates = self._clamp(self.rng.normal(p["mutation_rate"], 0.1, len(xs))) if p["self_adaptive"] \
                else np.full(len(xs), p["mutation_rate"])
        else:
            xs, rates = self._children(p["population"] - p["elite"])
        self._pending_rate = rates[:limit]
        return xs[:limit]

    def _parents(self, k: int) -> np.ndarray:
        p = self.params
        n = len(self.pop)
        elite = np.arange(min(p["elite"], n))
        rest = max(k - len(elite), 0)
        if p["selection"] == "tournament":
            chosen = ops.tournament(self.rng, self.pop_f, p["tournament_size"], rest)
        else:
            probs = self._rank_probabilities(n)
            chosen = ops.stochastic_universal_sampling(self.rng, probs, rest, self._cum)
        parents = np.concatenate([elite, chosen])
        self.rng.shuffle(parents)
        return parents

    def _rank_probabilities(self, n: int) -> np.ndarray:
        """Selection probabilities of n ranked individuals (the same every generation: computed once)."""
        p = self.params
        if getattr(self, "_probs", None) is None or len(self._probs) != n:
            self._probs = (ops.linear_rank_probabilities(n, p["selection_pressure"]) if p["selection"] == "linear-rank"
                           else ops.exponential_rank_probabilities(n))
            self._cum = ops.sus_cdf(self._probs)
        return self._probs

    def _children(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """k children from consecutive pairs of parents, the whole generation at once (numpy over the batch)."""
        need = k + (k % 2)
        parents = self._parents(need)[:need]  # more elites than children asked for: an even count all the same
        a, b = parents[0::2], parents[1::2]
        kids, rates = variation.ga_pair_children(self.rng, self.pop[a], self.pop[b], self.pop_rate[a],
                                                 self.pop_rate[b], self.params, self.space)
        return kids[:k], rates[:k]

    def tell(self, placements: np.ndarray, objectives: np.ndarray) -> None:
        p = self.params
        rates = self._pending_rate[: len(placements)]
        if self.generation == 0:
            xs, fs, rs = placements, objectives, rates
        else:
            e = min(p["elite"], len(self.pop))
            xs = np.concatenate([self.pop[:e], placements])
            fs = np.concatenate([self.pop_f[:e], objectives])
            rs = np.concatenate([self.pop_rate[:e], rates])
        order = np.argsort(fs, kind="stable")
        self.pop, self.pop_f, self.pop_rate = xs[order], fs[order], rs[order]
        self.generation += 1
        self.current = float(objectives.min()) if len(objectives) else self.current

    def snapshot(self) -> dict:
        return {"generation": self.generation, "population": self.pop_f.tolist(),
                "mean_mutation_rate": float(self.pop_rate.mean()) if len(self.pop_rate) else None}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "pop": self.pop.tolist(), "pop_f": self.pop_f.tolist(),
                "pop_rate": self.pop_rate.tolist(), "generation": self.generation}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.pop = np.array(state["pop"], dtype=np.int32).reshape(-1, self.n)
        self.pop_f = np.array(state["pop_f"], dtype=float)
        self.pop_rate = np.array(state["pop_rate"], dtype=float)
        self.generation = state["generation"]
