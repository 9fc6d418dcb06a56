"""Many independent runs at once (seeds, algorithms, parameter sweeps), each a whole task on one core.

When there are more runs than cores, running each run serially on its own core beats splitting
every run's evaluations: nothing travels but the job and its result. A seed gives the same
result wherever its run lands (the serial backend runs it there).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ..problem import Problem
from .base import OptimizeResult


@dataclass(frozen=True)
class RunJob:
    """One run, complete: it travels to a worker as it is (the problem pickles as its inputs)."""

    problem: Problem
    algorithm: str
    seed: int = 0
    evaluations: int | None = 20000
    seconds: float | None = None
    params: dict = field(default_factory=dict)


def run_job(job: RunJob) -> OptimizeResult:
    """A job's run, on the serial backend of whichever process executes it."""
    from . import run
    return run(job.problem, job.algorithm, evaluations=job.evaluations, seconds=job.seconds, seed=job.seed,
               params=dict(job.params))


def run_many(jobs: list[RunJob], *, workers: int = 1, dask=None,
             on_result: Callable[[int, RunJob, OptimizeResult], None] | None = None) -> list[OptimizeResult]:
    """Every job's result, in job order; ``on_result(index, job, result)`` is called as each finishes."""
    for job in jobs:  # a bad algorithm or parameter fails here, before anything is started
        from . import make_optimizer
        make_optimizer(job.problem, job.algorithm, seed=job.seed, params=dict(job.params),
                       evaluations=job.evaluations)
    results: list[OptimizeResult | None] = [None] * len(jobs)
    for i, result in iter_runs(jobs, workers=workers, dask=dask):
        results[i] = result
        if on_result is not None:
            on_result(i, jobs[i], result)
    return results  # type: ignore[return-value]


def iter_runs(jobs: list[RunJob], *, workers: int = 1, dask=None) -> Iterator[tuple[int, OptimizeResult]]:
    from ..parallel.tasks import map_unordered
    return map_unordered(run_job, jobs, workers=workers, dask=dask)


def grid(problem: Problem, algorithms: list[str], seeds: list[int], *, evaluations: int | None = 20000,
         seconds: float | None = None, params: dict[str, list] | None = None) -> list[RunJob]:
    """The jobs of a sweep: every algorithm x every combination of the parameter values it knows x every seed.

    A parameter is given only to the algorithms that have it (a sweep of the GA's ``mutation_rate``
    beside MAP-Elites runs MAP-Elites once per seed); one no algorithm has is an error."""
    from ..base.errors import InputError
    from . import algorithm_class, problem_for

    params = params or {}
    classes = {a: algorithm_class(a) for a in algorithms}
    for key in params:
        if not any(key in cls.PARAMS for cls in classes.values()):
            raise InputError(f"no chosen algorithm has a parameter {key!r}", field="--param",
                             fix="See `placement algorithms` for each algorithm's parameters")
    jobs = []
    for algorithm, cls in classes.items():
        own = {k: v for k, v in params.items() if k in cls.PARAMS}
        mine = problem_for(problem, algorithm)  # data parallel's splits, for its jobs only
        for values in itertools.product(*own.values()):
            for seed in seeds:
                jobs.append(RunJob(mine, algorithm, seed, evaluations, seconds, dict(zip(own, values))))
    return jobs
