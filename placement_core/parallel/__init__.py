"""Evaluation backends: serial, local worker processes, a Dask cluster.

Every backend returns exactly what ``Problem.evaluate_many`` would, in input order, so a run with
a given seed gives the same result on any of them. The problem travels once per worker and is
compiled there; a task carries placements as compact arrays (:mod:`.wire`) sized from measured
costs (:mod:`.pacing`). ``evaluate`` is for a batch the caller waits for (a generation);
``submit`` starts one and returns at once, so the driver can keep several in flight while it
generates the next (:mod:`placement_core.optimize.driver`).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from ..base.errors import InputError
from ..problem import Problem
from .cluster import DASK_FLOOR_S, ClusterSession
from .pacing import PROBE_GROUP, Pacing, driver_batch_cost, median_round_trip, probe_eval_seconds
from .pool import POOL_FLOOR_S, WorkerError, WorkerPool


class Pending(Protocol):
    def result(self) -> np.ndarray: ...


@runtime_checkable
class Evaluator(Protocol):
    """What the driver needs from an evaluation backend.

    ``evaluate`` takes a ``(k, n_ops)`` int32 array of placements and returns the k objectives
    (float64, seconds per batch plus the memory penalty) in the same order, exactly as
    ``Problem.evaluate_many`` would: a backend changes where the work runs, never a number.
    ``submit`` does the same without waiting. ``workers`` is how many evaluations run at once and
    ``pacing`` what a task costs there (the driver sizes batches from both); ``close`` releases
    processes or the problem's copies on a cluster, and the backend is a context manager.
    """

    name: str
    workers: int
    pacing: Pacing

    def evaluate(self, placements: np.ndarray) -> np.ndarray: ...

    def submit(self, placements: np.ndarray) -> Pending: ...

    def close(self) -> None: ...

    def __enter__(self) -> "Evaluator": ...

    def __exit__(self, *exc) -> None: ...


class Done:
    """A result that is already there."""

    def __init__(self, value: np.ndarray):
        self.value = value

    def result(self) -> np.ndarray:
        return self.value


class _Later:
    def __init__(self, fetch, handle):
        self._fetch, self._handle = fetch, handle

    def result(self) -> np.ndarray:
        return self._fetch(self._handle)


class SerialEvaluator:
    """Every evaluation in this process (the fastest for small batches: nothing travels)."""

    name = "serial"

    def __init__(self, problem: Problem):
        self.problem = problem
        self.workers = 1
        self._pacing: Pacing | None = None

    @property
    def pacing(self) -> Pacing:
        if self._pacing is None:
            self._pacing = Pacing(1, probe_eval_seconds(self.problem), 0.0)
        return self._pacing

    def evaluate(self, placements: np.ndarray) -> np.ndarray:
        return self.problem.evaluate_many(placements)

    def submit(self, placements: np.ndarray) -> Pending:
        return Done(self.evaluate(placements))

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _Shipping(SerialEvaluator):
    """What the two remote backends share: checking placements here, splitting a batch into tasks."""

    def __init__(self, problem: Problem, min_batch: int | None):
        super().__init__(problem)
        self.min_batch = min_batch
        self.tasks_sent = 0  # tasks shipped to workers (tests check that work really left this process)
        self.recipes_sent = 0  # of which the workers also made the children

    def _parts(self, k: int) -> int:
        if self.min_batch is not None:  # explicit: ship anything this large, one task per worker
            return 0 if k < self.min_batch else min(self.workers, k)
        return self.pacing.parts(k)

    def evaluate(self, placements: np.ndarray) -> np.ndarray:
        placements = self.problem.checked(placements)
        parts = self._parts(len(placements))
        if parts == 0:
            return self.problem.evaluate_valid(placements)  # checked just above
        handles = [self._ship(c) for c in np.array_split(placements, parts) if len(c)]
        return np.concatenate([self._receive(h) for h in handles])

    def submit(self, placements: np.ndarray) -> Pending:
        placements = self.problem.checked(placements)
        if not len(placements):
            return Done(np.zeros(0))
        return _Later(self._receive, self._ship(placements))

    def _ship(self, placements: np.ndarray):
        self.tasks_sent += 1
        return self._send(placements)

    def submit_recipe(self, recipe) -> Pending:
        """Make a batch's children on a worker and evaluate them there; the handle's result is
        (children, objectives, rates)."""
        self.tasks_sent += 1
        self.recipes_sent += 1
        return _Later(self._receive_made, self._send_recipe(recipe))

    def _measure(self, floor_s: float) -> Pacing:
        # the round trip first: it waits for the workers to be up, so their start (compiling the problem on
        # every core) does not slow the probe of the simulator's time down
        round_trip = median_round_trip(self._ping)
        return Pacing(self.workers, probe_eval_seconds(self.problem, group=PROBE_GROUP), round_trip, floor_s,
                      driver_batch_cost(self.problem.n_ops))


class ProcessPoolEvaluator(_Shipping):
    """``workers`` local processes over pipes (:mod:`.pool`); a batch too small to gain from them
    stays in this process."""

    name = "processes"

    def __init__(self, problem: Problem, workers: int, min_batch: int | None = None,
                 start_method: str | None = None):
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise InputError(f"workers must be a positive integer, got {workers!r}", field="workers")
        super().__init__(problem, min_batch)
        self.workers = workers
        self.pool = WorkerPool(problem, workers, start_method=start_method)
        self._ping = self.pool.ping
        self._send = self.pool.submit
        self._receive = self.pool.result
        self._send_recipe = self.pool.submit_recipe
        self._receive_made = self.pool.result
        self.pool.ping_every()  # every worker up before anything is timed (its start would share a core)
        self._pacing = self._measure(POOL_FLOOR_S)

    def close(self) -> None:
        self.pool.close()


class DaskEvaluator(_Shipping):
    """Tasks on a Dask cluster: ``address`` is a scheduler address (tcp://HOST:8786) or a
    ``distributed.Client`` (which stays open: it is the caller's)."""

    name = "dask"

    def __init__(self, problem: Problem, address, min_batch: int | None = None, transport: str = "auto"):
        super().__init__(problem, min_batch)
        self.session = ClusterSession(problem, address, transport=transport)
        self.client = self.session.client
        self.workers = self.session.workers
        self.via = self.session.via  # "direct", "actors" or "tasks" (parallel/cluster.py)
        self._ping = self.session.ping
        self._send = self.session.submit
        self._receive = self.session.result
        self._send_recipe = self.session.submit_recipe
        self._receive_made = self.session.made
        try:  # a direct frame or an actor call costs the scheduler nothing: the pool's floor, not the scheduler's
            self._pacing = self._measure(DASK_FLOOR_S if self.via == "tasks" else POOL_FLOOR_S)
        except BaseException:
            self.session.close()
            raise

    def close(self) -> None:
        self.session.close()


def pacing_of(evaluator) -> Pacing:
    """An evaluator's measured costs; one that predates ``pacing`` counts as free and serial."""
    pacing = getattr(evaluator, "pacing", None)
    return pacing if pacing is not None else Pacing(getattr(evaluator, "workers", 1), 0.0, 0.0)


def make_evaluator(problem: Problem, workers: int = 1, dask=None) -> Evaluator:
    """``dask`` (an address or a Client) wins; else ``workers`` > 1 local processes; else serial."""
    if dask is not None and dask != "":
        return DaskEvaluator(problem, dask)
    if workers and workers > 1:
        return ProcessPoolEvaluator(problem, workers)
    return SerialEvaluator(problem)


__all__ = ["DaskEvaluator", "Done", "Evaluator", "Pacing", "Pending", "ProcessPoolEvaluator", "SerialEvaluator",
           "WorkerError", "WorkerPool", "make_evaluator", "pacing_of"]
