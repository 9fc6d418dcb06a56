"""Asynchronous variants of the GA and MAP-Elites, for parallel backends.

The synchronous algorithms wait for a whole generation (the GA's 45 children, MAP-Elites' batch of
50) before proposing more: with ResNet-50 that is 2 ms of simulation, less than a Dask task's
overhead. These variants keep ``in_flight`` batches of ``batch`` placements evaluating while they
generate the next from what they know so far, so workers never wait for the driver:

* ``ga-steady``: a steady-state GA. Each batch's children come from the current population (rank or
  tournament selection, crossover, self-adaptive point mutation, zone mutation, as in ``ga``); when a
  batch returns, population and children compete and the best ``population`` survive (mu + lambda).
* ``map-elites-async``: children from the current archive as in ``map-elites``; each batch enters
  the archive when it returns.

Batches are told in the order they were asked, and batch k is always generated after batch
k - in_flight was told, so for given ``batch`` and ``in_flight`` a seed gives the same run on every
backend, serial included, however fast the workers are. Both default to "auto" (0): ``batch`` so
that a task carries at least 20 times the backend's measured cost per task (50 ms of work on Dask),
``in_flight`` two per worker; the values used are recorded in the run's parameters. Large batches
mean stale parents: the batch is capped at a tenth of the budget over the batches in flight.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from . import operators as ops
from .base import Optimizer, Param, register
from .genetic import GeneticAlgorithm
from .map_elites import MapElites

PIPELINE_PARAMS = {
    "batch": Param(0, "placements per batch, evaluated as one task; 0: sized from measured costs (the value used "
                      "is recorded)", int, low=0, high=10_000_000),
    "in_flight": Param(0, "batches evaluating at once; 0: two per worker (the value used is recorded)", int,
                       low=0, high=100_000),
}
SERIAL_BATCH = 50  # on one core nothing is gained by large batches: keep the parents fresh


class _Pipelined(Optimizer):
    """Resolves ``batch`` and ``in_flight`` from the backend, and tracks what each asked batch needs."""

    def configure(self, evaluator, budget: int | None) -> None:
        from ..parallel import pacing_of
        p = self.params
        pacing = pacing_of(evaluator) if not (p["batch"] and p["in_flight"]) else None
        if not p["in_flight"]:
            p["in_flight"] = 1 if pacing.workers <= 1 else 2 * pacing.workers
        if not p["batch"]:
            size = SERIAL_BATCH if pacing.workers <= 1 else pacing.task_size()
            if budget:
                size = min(size, max(1, budget // (10 * p["in_flight"])))
            p["batch"] = max(1, size)
        self.in_flight = p["in_flight"]

    def _batch(self, limit: int) -> int:
        return max(1, min(self.params["batch"] or SERIAL_BATCH, limit))

    def state_dict(self) -> dict:
        return {**super().state_dict(), "batch": self.params["batch"], "in_flight": self.params["in_flight"]}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.params["batch"], self.params["in_flight"] = state["batch"], state["in_flight"]
        self.in_flight = max(1, state["in_flight"])


@register
class SteadyStateGA(_Pipelined):
    name = "ga-steady"
    title = "Genetic algorithm, steady state (for parallel backends)"
    PARAMS = {**{k: v for k, v in GeneticAlgorithm.PARAMS.items() if k != "elite"}, **PIPELINE_PARAMS}

    def __init__(self, problem, **kw):
        super().__init__(problem, **kw)
        if not ops.valid_crossover(self.params["crossover"]):
            from ..errors import InputError
            raise InputError(f"crossover must be single-point, N-point or uniform, got {self.params['crossover']!r}",
                             field="crossover")
        self.pop = np.zeros((0, self.n), dtype=np.int32)
        self.pop_f = np.zeros(0)
        self.pop_rate = np.zeros(0)
        self._rates: deque[np.ndarray] = deque()  # the mutation rate of each child of each batch in flight
        self._seeded = False  # the first population has been asked for

    def ready(self) -> bool:
        return not self._seeded or len(self.pop) > 0

    def _clamp(self, r):
        return np.clip(r, self.params["min_mutation_rate"], self.params["max_mutation_rate"])

    def ask(self, limit: int) -> np.ndarray:
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
        else:
            xs, rates = self._children(self._batch(limit))
        xs, rates = xs[:limit], rates[:limit]
        self._rates.append(rates)
        return xs

    def _parents(self, k: int) -> np.ndarray:
        p = self.params
        if p["selection"] == "tournament":
            return ops.tournament(self.rng, self.pop_f, p["tournament_size"], k)
        probs = (ops.linear_rank_probabilities(len(self.pop), p["selection_pressure"])
                 if p["selection"] == "linear-rank" else ops.exponential_rank_probabilities(len(self.pop)))
        return self.rng.choice(len(self.pop), size=k, p=probs)

    def _children(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        p = self.params
        a, b = self._parents(k), self._parents(k)
        kids = self.pop[a].copy()
        cross = np.flatnonzero(self.rng.random(k) < p["crossover_rate"])
        if len(cross):
            take_b = ops.batch_crossover_mask(self.rng, len(cross), self.n, p["crossover"])
            kids[cross] = np.where(take_b, self.pop[b[cross]], kids[cross])
        alpha = self.rng.random(k)
        rates = alpha * self.pop_rate[a] + (1 - alpha) * self.pop_rate[b]
        if p["self_adaptive"]:
            rates = self._clamp(rates + self.rng.normal(0, p["rate_drift"], k))
        kids = ops.batch_point_mutation(self.rng, kids, rates, self.d)
        zone = np.flatnonzero(self.rng.random(k) < p["zone_mutation_rate"])
        if len(zone):
            kids[zone] = ops.batch_zone_mutation(self.rng, kids[zone], self.d)
        return kids, rates

    def tell(self, placements: np.ndarray, objectives: np.ndarray) -> None:
        rates = self._rates.popleft()[: len(placements)]
        xs = np.concatenate([self.pop, placements])
        fs = np.concatenate([self.pop_f, objectives])
        rs = np.concatenate([self.pop_rate, rates])
        order = np.argsort(fs, kind="stable")[: self.params["population"]]
        self.pop, self.pop_f, self.pop_rate = xs[order], fs[order], rs[order]
        self.current = float(objectives.min()) if len(objectives) else self.current

    def snapshot(self) -> dict:
        return {"population": self.pop_f.tolist(), "in_flight": len(self._rates),
                "mean_mutation_rate": float(self.pop_rate.mean()) if len(self.pop_rate) else None}

    def state_dict(self) -> dict:
        return {**super().state_dict(), "pop": self.pop.tolist(), "pop_f": self.pop_f.tolist(),
                "pop_rate": self.pop_rate.tolist(), "rates": [r.tolist() for r in self._rates],
                "seeded": self._seeded}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.pop = np.array(state["pop"], dtype=np.int32).reshape(-1, self.n)
        self.pop_f = np.array(state["pop_f"], dtype=float)
        self.pop_rate = np.array(state["pop_rate"], dtype=float)
        self._rates = deque(np.array(r, dtype=float) for r in state["rates"])
        self._seeded = state["seeded"]


@register
class AsyncMapElites(_Pipelined, MapElites):
    name = "map-elites-async"
    title = "MAP-Elites, asynchronous (for parallel backends)"
    PARAMS = {**{k: v for k, v in MapElites.PARAMS.items() if k != "batch"}, **PIPELINE_PARAMS}

    def __init__(self, problem, descriptors=None, **kw):
        super().__init__(problem, descriptors=descriptors, **kw)
        self._seeded = False

    def ready(self) -> bool:
        return not self._seeded or self._started

    def ask(self, limit: int) -> np.ndarray:
        if not self._seeded:
            self._seeded = True
            return MapElites.ask(self, limit)  # the seeds: initial placements, single devices, random ones
        return self._children(self._batch(limit))

    def _children(self, k: int) -> np.ndarray:
        p = self.params
        _, xs, fs = self._pool
        kids = xs[ops.tournament(self.rng, fs, p["tournament_size"], k)].copy()
        other = xs[ops.tournament(self.rng, fs, p["tournament_size"], k)]
        cross = np.flatnonzero(self.rng.random(k) < p["crossover_rate"])
        if len(cross):
            take_b = ops.batch_crossover_mask(self.rng, len(cross), self.n, "single-point")
            kids[cross] = np.where(take_b, other[cross], kids[cross])
        u = self.rng.random(k)
        replace = u < p["replace_mutation_rate"]
        zone = ~replace & (self.rng.random(k) < p["zone_mutation_rate"])
        gene = ~replace & ~zone
        if replace.any():
            kids[replace] = ops.batch_replace_mutation(self.rng, kids[replace], self.d)
        if zone.any():
            kids[zone] = ops.batch_zone_mutation(self.rng, kids[zone], self.d)
        if gene.any():
            kids[gene] = ops.batch_copy_point_mutation(self.rng, kids[gene], p["copy_mutation_rate"],
                                                       p["mutation_rate"], self.d)
        return kids

    def state_dict(self) -> dict:
        return {**super().state_dict(), "seeded": self._seeded}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self._seeded = state["seeded"]
