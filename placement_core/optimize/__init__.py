"""Placement optimizers behind one ask/tell interface, and ``run`` to drive any of them.

    from placement_core.optimize import run
    result = run(problem, "ga", evaluations=20_000, seed=1)
"""

from __future__ import annotations

from ..base.errors import InputError
from ..problem import Problem
# Importing an algorithm's module registers it (@register); this order is the order users see.
from . import genetic, map_elites, local, cem, policy_gradient, baselines, mincut, heft, asynchronous  # noqa: F401,E401  isort: skip
from . import dataparallel, heft_sharded  # noqa: F401,E401  isort: skip
from .base import ALGORITHMS, LEARNED, LEARNED_NAMES, OptimizeResult, Optimizer, Param, Progress, register
from .driver import drive


def algorithm_class(name: str) -> type[Optimizer]:
    if name in LEARNED:
        return LEARNED[name]
    if name in LEARNED_NAMES:
        raise InputError(f"{name} applies a trained policy and needs PyTorch's side of placement_core loaded",
                         field="algorithm", fix="Import placement_core.torch.policies first (the CLI and the "
                                                "dashboard do), with the torch extra installed")
    if name not in ALGORITHMS:
        raise InputError(f"unknown algorithm {name!r}", field="algorithm", fix="Use one of: " + ", ".join(ALGORITHMS))
    return ALGORITHMS[name]


def problem_for(problem: Problem, algorithm: str) -> Problem:
    """``problem`` with the splits ``algorithm`` proposes added to its table (data parallel, hybrid), else itself."""
    from ..model.sharding import merge_splits
    extra = dataparallel.needed_splits(problem, algorithm)
    return problem.with_splits(merge_splits(problem.splits, extra)[0]) if extra else problem


def make_optimizer(problem: Problem, algorithm: str, *, seed: int = 0, params: dict | None = None,
                   initial=None, evaluations: int | None = None, **extra) -> Optimizer:
    cls = algorithm_class(algorithm)
    params = dict(params or {})
    # Schedules that span the run (annealing's cooling, CEM's epsilon) default to the budget.
    if "steps" in cls.PARAMS and "steps" not in params and evaluations:
        params["steps"] = evaluations
    return cls(problem, seed=seed, initial=initial, **params, **extra)


def run(problem: Problem, algorithm: str, *, evaluations: int | None = None, seconds: float | None = None,
        seed: int = 0, params: dict | None = None, initial=None, workers: int = 1, dask=None, evaluator=None,
        progress=None, stop=None, **extra) -> OptimizeResult:
    """Optimize ``problem`` with ``algorithm`` within the budget; see :func:`.driver.drive`."""
    from ..parallel import make_evaluator

    optimizer = make_optimizer(problem, algorithm, seed=seed, params=params, initial=initial,
                               evaluations=evaluations, **extra)
    own = evaluator is None
    evaluator = evaluator or make_evaluator(problem, workers=workers, dask=dask)
    try:
        return drive(optimizer, evaluations=evaluations, seconds=seconds, evaluator=evaluator, progress=progress,
                     stop=stop)
    finally:
        if own:
            evaluator.close()


__all__ = ["ALGORITHMS", "LEARNED", "LEARNED_NAMES", "OptimizeResult", "Optimizer", "Param", "Progress",
           "algorithm_class", "drive", "make_optimizer", "problem_for", "register", "run"]
