"""Evaluation backends: serial, a local process pool, a Dask cluster.

All three take batches of placements and return objectives in order, so a
run with a given seed gives the same result on any backend. The problem is
shipped once per worker (process initializer / Dask scatter with broadcast),
never once per evaluation.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from .errors import InputError
from .problem import Problem


@runtime_checkable
class Evaluator(Protocol):
    """What the driver needs from an evaluation backend.

    ``evaluate`` takes a ``(k, n_ops)`` int32 array of placements and returns the k objectives
    (float64, seconds per batch plus the memory penalty) in the same order, exactly as
    ``Problem.evaluate_many`` would: a backend changes where the work runs, never a number.
    ``workers`` is how many evaluations it runs at once (the driver sizes batches from it);
    ``close`` releases its processes or connection, and the backend is a context manager.
    """

    name: str
    workers: int

    def evaluate(self, placements: np.ndarray) -> np.ndarray: ...

    def close(self) -> None: ...

    def __enter__(self) -> "Evaluator": ...

    def __exit__(self, *exc) -> None: ...


class SerialEvaluator:
    """Every evaluation in this process (the fastest for one-batch problems: no transfer at all)."""

    name = "serial"

    def __init__(self, problem: Problem):
        self.problem = problem
        self.workers = 1

    def evaluate(self, placements: np.ndarray) -> np.ndarray:
        return self.problem.evaluate_many(placements)

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_WORKER_PROBLEM: Problem | None = None


def _init_worker(problem: Problem) -> None:
    global _WORKER_PROBLEM
    _WORKER_PROBLEM = problem


def _evaluate_chunk(chunk: np.ndarray) -> np.ndarray:
    assert _WORKER_PROBLEM is not None
    return _WORKER_PROBLEM.evaluate_many(chunk)


def _evaluate_chunk_with(problem: Problem, chunk: np.ndarray) -> np.ndarray:
    return problem.evaluate_many(chunk)


def _chunks(placements: np.ndarray, parts: int) -> list[np.ndarray]:
    parts = max(1, min(parts, len(placements)))
    return [c for c in np.array_split(placements, parts) if len(c)]


class ProcessPoolEvaluator(SerialEvaluator):
    """A local pool of worker processes; small batches stay in this process (no round trip)."""

    name = "processes"

    def __init__(self, problem: Problem, workers: int, min_batch: int = 8):
        super().__init__(problem)
        import concurrent.futures
        import multiprocessing

        if workers < 1:
            raise InputError(f"workers must be at least 1, got {workers}", field="workers")
        self.workers = workers
        self.min_batch = min_batch
        ctx = multiprocessing.get_context("spawn")
        self._pool = concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker,
                                                            initargs=(problem,))

    def evaluate(self, placements: np.ndarray) -> np.ndarray:
        placements = np.ascontiguousarray(placements, dtype=np.int32)
        if len(placements) < self.min_batch:
            return self.problem.evaluate_many(placements)
        parts = list(self._pool.map(_evaluate_chunk, _chunks(placements, self.workers)))
        return np.concatenate(parts)

    def close(self) -> None:
        self._pool.shutdown(cancel_futures=True)


class DaskEvaluator(SerialEvaluator):
    """Batches go to a Dask cluster (``distributed.Client(address)``); the problem is broadcast once."""

    name = "dask"

    def __init__(self, problem: Problem, address, min_batch: int = 8):
        super().__init__(problem)
        try:
            from distributed import Client
        except ImportError:
            raise InputError("Dask is not installed", field="dask",
                             fix='Install it with .venv/bin/pip install -e ".[dask]"') from None
        self._own_client = not hasattr(address, "scatter")
        try:
            self.client = Client(address, timeout="10s") if self._own_client else address
        except OSError as e:
            raise InputError(f"cannot reach the Dask scheduler at {address!r}: {e}", field="dask",
                             fix="Start one with `dask scheduler` and workers with `dask worker ADDRESS`") from None
        self.workers = max(1, len(self.client.scheduler_info().get("workers", {})))
        self.min_batch = min_batch
        [self._problem_future] = self.client.scatter([problem], broadcast=True)

    def evaluate(self, placements: np.ndarray) -> np.ndarray:
        placements = np.ascontiguousarray(placements, dtype=np.int32)
        if len(placements) < self.min_batch:
            return self.problem.evaluate_many(placements)
        chunks = _chunks(placements, self.workers)
        futures = self.client.map(_evaluate_chunk_with, [self._problem_future] * len(chunks), chunks, pure=False)
        return np.concatenate(self.client.gather(futures))

    def close(self) -> None:
        if self._own_client:
            self.client.close()


def make_evaluator(problem: Problem, workers: int = 1, dask: str | None = None) -> Evaluator:
    if dask:
        return DaskEvaluator(problem, dask)
    if workers and workers > 1:
        return ProcessPoolEvaluator(problem, workers)
    return SerialEvaluator(problem)
