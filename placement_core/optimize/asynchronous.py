"""Asynchronous variants of the GA and MAP-Elites, for parallel backends.

The synchronous algorithms wait for a whole generation (the GA's 45 children, MAP-Elites' batch of
50) before proposing more: with ResNet-50 that is 2 ms of simulation, less than a Dask task's
overhead. These variants keep ``pending`` batches of ``batch`` placements evaluating while they
generate the next from what they know so far, so workers never wait for the driver:

* ``ga-steady``: a steady-state GA. Each batch's children come from the current population (rank or
  tournament selection, crossover, self-adaptive point mutation, zone mutation, as in ``ga``); when a
  batch returns, population and children compete and the best ``population`` survive (mu + lambda).
* ``map-elites-async``: children from the current archive as in ``map-elites``; each batch enters
  the archive when it returns.

A batch is proposed as a :class:`~.variation.Recipe`: the parents are chosen here, and the children
are made from them with a seed of their own, by the driver or, on a parallel backend, by the worker
that evaluates them (``vary_on_workers``), with the same result either way. Batches are told in the
order they were asked. Batch k is always generated after batch k − pending was told. So for a
given ``batch`` and ``pending``, a seed gives the same run on every backend, serial included, however fast the workers
are. Both default to "auto" (0): ``batch`` so that a task carries at least 20 times the backend's
measured cost per task (50 ms of work on Dask), ``pending`` two per worker; the values used are
recorded in the run's parameters. Large batches mean few selection rounds and stale parents, which cost
quality at equal evaluations: an automatic batch is capped so that the budget makes at least
``QUALITY_ROUNDS`` (1,000) batches, never below ``SERIAL_BATCH`` (50) (see ``quality_cap``).
"""

from __future__ import annotations

from collections import deque

import numpy as np

from . import operators as ops
from . import variation
from .base import Optimizer, Param, register
from .genetic import GeneticAlgorithm
from .map_elites import MapElites
from .variation import Recipe

PIPELINE_PARAMS = {
    "batch": Param(0, "placements per batch, evaluated as one task; 0: sized from measured costs (the value used "
                      "is recorded)", int, low=0, high=10_000_000),
    "pending": Param(0, "batches asked for and not yet told (evaluating at once); 0: two per worker (the value "
                       "used is recorded)", int, low=0, high=100_000),
    "vary_on_workers": Param(True, "make each batch's children on the worker that evaluates them (parallel backends; "
                                   "the run is the same either way, the driver just does less)", bool),
}
SERIAL_BATCH = 50  # on one core nothing is gained by large batches: keep the parents fresh
# Large batches mean few selection rounds and stale parents. Measured on ResNet-50 (malvik-4gpu-limited-resnet50,
# 20,000 evaluations, 4 pending, seeds 0-2): ga-steady's best 3.37-3.49 s with batches of 50 (the synchronous GA
# 3.54-3.97), 4.26-4.75 with 200, 5.95-6.71 with 500, 6.51-8.08 with 1,500; map-elites-async 2.46-2.79, 2.79-3.41,
# 2.89-3.88, 5.60-6.73. With 80,000 evaluations, batches of 200 (400 rounds) still cost 8-10 %. So an automatic
# batch gives the search at least QUALITY_ROUNDS batches over its budget, and never less than SERIAL_BATCH.
QUALITY_ROUNDS = 1000
UNBUDGETED_BATCH = 10 * SERIAL_BATCH  # a run bounded only by time: the largest automatic batch


def quality_cap(budget: int | None) -> int:
    """The largest automatic batch for a budget of evaluations (None: a run bounded by time)."""
    return UNBUDGETED_BATCH if not budget else max(SERIAL_BATCH, budget // QUALITY_ROUNDS)


class _Pipelined(Optimizer):
    """Resolves ``batch`` and ``pending`` from the backend; proposes recipes, accepts their results."""

    KIND = ""
    RENAMED = {"in_flight": "pending"}  # runs stored before the rename say in_flight
    VARIATION_PARAMS: tuple[str, ...] = ()

    def __init__(self, problem, **kw):
        super().__init__(problem, **kw)
        self._proposed = 0  # batches proposed: the seed of the next batch's variation
        self._outstanding = 0
        self._rates: deque = deque()  # for ask/tell callers: the children's rates of each batch asked

    def configure(self, evaluator, budget: int | None) -> None:
        from ..parallel import pacing_of
        p = self.params
        pacing = pacing_of(evaluator) if not (p["batch"] and p["pending"]) else None
        if not p["pending"]:
            p["pending"] = 1 if pacing.workers <= 1 else 2 * pacing.workers
        if not p["batch"]:
            size = SERIAL_BATCH if pacing.workers <= 1 else pacing.task_size()
            p["batch"] = max(1, min(size, quality_cap(budget)))
        self.pending = p["pending"]

    def _batch(self, limit: int) -> int:
        return max(1, min(self.params["batch"] or SERIAL_BATCH, limit))

    def _recipe(self, kind: str, a, b=None, rates_a=None, rates_b=None) -> Recipe:
        self._proposed += 1
        self._outstanding += 1
        return Recipe(kind, a, b, rates_a, rates_b, seed=(self.seed, self._proposed), n_devices=ops.gene_count(self.space),
                      params=tuple(sorted((k, self.params[k]) for k in self.VARIATION_PARAMS)))

    # The driver's interface: propose a recipe, accept its children. ask/tell do both steps here.
    def ask(self, limit: int) -> np.ndarray:
        kids, rates = variation.apply(self.next_recipe(limit), self.space)
        self._rates.append(rates)
        return kids

    def tell(self, placements: np.ndarray, objectives: np.ndarray) -> None:
        rates = self._rates.popleft()
        self.take_results(placements, objectives, None if rates is None else rates[: len(placements)])

    def ready(self) -> bool:
        return not self._seeded or self._populated()  # nothing to breed from before the first batch returns

    def state_dict(self) -> dict:
        return {**super().state_dict(), "batch": self.params["batch"], "pending": self.params["pending"],
                "proposed": self._proposed, "outstanding": self._outstanding}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        pending = state["pending"] if "pending" in state else state["in_flight"]  # checkpoints before the rename
        self.params["batch"], self.params["pending"] = state["batch"], pending
        self.pending = max(1, pending)
        self._proposed, self._outstanding = state["proposed"], state["outstanding"]


@register
class SteadyStateGA(_Pipelined):
    name = "ga-steady"
    title = "Genetic algorithm, steady state (for parallel backends)"
    PARAMS = {**{k: v for k, v in GeneticAlgorithm.PARAMS.items() if k != "elite"}, **PIPELINE_PARAMS}
    VARIATION_PARAMS = ("crossover", "crossover_rate", "self_adaptive", "rate_drift", "min_mutation_rate",
                        "max_mutation_rate", "zone_mutation_rate")

    def __init__(self, problem, **kw):
        super().__init__(problem, **kw)
        if not ops.valid_crossover(self.params["crossover"]):
            from ..base.errors import InputError
            raise InputError(f"crossover must be single-point, N-point or uniform, got {self.params['crossover']!r}",
                             field="crossover")
        self.pop = np.zeros((0, self.n), dtype=np.int32)
        self.pop_f = np.zeros(0)
        self.pop_rate = np.zeros(0)
        self._seeded = False  # the first population has been proposed

    def _populated(self) -> bool:
        return len(self.pop) > 0

    def _clamp(self, r):
        return np.clip(r, self.params["min_mutation_rate"], self.params["max_mutation_rate"])

    def next_recipe(self, limit: int) -> Recipe:
        p = self.params
        if not self._seeded:
            self._seeded = True
            first = [self.initial[: p["population"]]]
            if p["include_trivial"]:
                first.append(np.repeat(np.arange(self.d, dtype=np.int32)[:, None], self.n, axis=1))
            first = np.concatenate(first)[: p["population"]]
            xs = np.concatenate([first, self.random_placements(p["population"] - len(first))]).astype(np.int32)
            rates = (self._clamp(self.rng.normal(p["mutation_rate"], 0.1, len(xs))) if p["self_adaptive"]
                     else np.full(len(xs), p["mutation_rate"]))
            return self._recipe("given", xs[:limit], rates_a=rates[:limit])
        k = self._batch(limit)
        a, b = self._parents(k), self._parents(k)
        return self._recipe("ga", self.pop[a], self.pop[b], self.pop_rate[a], self.pop_rate[b])

    def _parents(self, k: int) -> np.ndarray:
        p = self.params
        if p["selection"] == "tournament":
            return ops.tournament(self.rng, self.pop_f, p["tournament_size"], k)
        return ops.ranked_choice(self.rng, self._rank_cdf(len(self.pop)), k)

    def _rank_cdf(self, n: int) -> np.ndarray:
        """The rank selection's cumulative probabilities for n individuals (the same every batch: made once)."""
        p = self.params
        if getattr(self, "_cdf", None) is None or len(self._cdf) != n:
            probs = (ops.linear_rank_probabilities(n, p["selection_pressure"]) if p["selection"] == "linear-rank"
                     else ops.exponential_rank_probabilities(n))
            self._cdf = ops.choice_cdf(probs)
        return self._cdf

    def take_results(self, placements: np.ndarray, objectives: np.ndarray, rates) -> None:
        self._outstanding -= 1
        xs = np.concatenate([self.pop, placements])
        fs = np.concatenate([self.pop_f, objectives])
        rs = np.concatenate([self.pop_rate, rates])
        order = np.argsort(fs, kind="stable")[: self.params["population"]]
        self.pop, self.pop_f, self.pop_rate = xs[order], fs[order], rs[order]
        self.current = float(objectives.min()) if len(objectives) else self.current

    def snapshot(self) -> dict:
        return {"population": self.pop_f.tolist(), "pending": self._outstanding,
                "mean_mutation_rate": float(self.pop_rate.mean()) if len(self.pop_rate) else None}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "pop": self.pop.tolist(), "pop_f": self.pop_f.tolist(),
                "pop_rate": self.pop_rate.tolist(), "seeded": self._seeded,
                "rates": [None if r is None else r.tolist() for r in self._rates]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.pop = np.array(state["pop"], dtype=np.int32).reshape(-1, self.n)
        self.pop_f = np.array(state["pop_f"], dtype=float)
        self.pop_rate = np.array(state["pop_rate"], dtype=float)
        self._seeded = state["seeded"]
        self._rates = deque(None if r is None else np.array(r, dtype=float) for r in state["rates"])


@register
class AsyncMapElites(_Pipelined, MapElites):
    name = "map-elites-async"
    title = "MAP-Elites, asynchronous (for parallel backends)"
    PARAMS = {**{k: v for k, v in MapElites.PARAMS.items() if k != "batch"}, **PIPELINE_PARAMS}
    VARIATION_PARAMS = ("crossover_rate", "mutation_rate", "copy_mutation_rate", "replace_mutation_rate",
                        "zone_mutation_rate")

    def __init__(self, problem, descriptors=None, **kw):
        super().__init__(problem, descriptors=descriptors, **kw)
        self._seeded = False

    def _populated(self) -> bool:
        return self._started

    def next_recipe(self, limit: int) -> Recipe:
        if not self._seeded:
            self._seeded = True
            return self._recipe("given", MapElites.ask(self, limit))  # initial, single devices, random
        a, b = self._parent_pairs(self._batch(limit))
        return self._recipe("map-elites", a, b)

    def take_results(self, placements: np.ndarray, objectives: np.ndarray, rates=None) -> None:
        self._outstanding -= 1
        MapElites.tell(self, placements, objectives)

    def state_dict(self) -> dict:
        return {**super().state_dict(), "seeded": self._seeded}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._seeded = state["seeded"]
