"""A policy's training recorded in the run store, so `placement runs` and the Runs page list it.

The run is stored under the algorithm ``train-placeto`` or ``train-gdp`` with the
first training graph as its network (a run has one network; the others are
named in its extras), the training settings as parameters, and the reward
curve as its history: evaluations against the mean objective of a round of
graphs divided by each graph's best single device (lower is better; the reward
is its negative). Its best placement is the best one training found for that
first graph, so "use its best placement" gives a real placement of a real
network. The curve is checkpointed every few seconds while training runs, so a
dashboard in another process draws it live.
"""

from __future__ import annotations

import time

import numpy as np

from ...optimize.base import OptimizeResult
from ...store import RunStore, StoreError
from .train import TrainProgress, TrainResult, TrainSettings, train

CHECKPOINT_S = 2.0


def training_params(settings: TrainSettings) -> dict:
    return {"episodes": settings.episodes, "rollouts": settings.rollouts, "lr": settings.lr,
            "entropy": settings.entropy, "rewards": settings.rewards, "hidden": settings.hidden,
            "rounds": settings.rounds, "step_fraction": settings.step_fraction}


def train_recorded(store: RunStore | None, problems, settings: TrainSettings, *, label: str | None = None,
                   meta: dict | None = None, progress=None, stop=None, orders=None, on_created=None):
    """Train (see :func:`.train.train`), recording the run in ``store`` (None: not recorded).

    Returns (run id or None, TrainResult). A failure marks the run failed; Ctrl-C or ``stop`` stopped.
    """
    settings.check()
    run_id = None
    if store is not None:
        run_id = store.create_run(problems[0], f"train-{settings.method}", training_params(settings), settings.seed,
                                  label=label)
        if on_created is not None:
            on_created(run_id)
    last = [time.perf_counter()]

    def report(p: TrainProgress) -> None:
        if progress is not None:
            progress(p)
        if store is not None and (time.perf_counter() - last[0] >= CHECKPOINT_S):
            last[0] = time.perf_counter()
            curve = [[e, r, r] for e, r in p.curve]
            store.checkpoint(run_id, {"evaluations": p.evaluations, "best_objective": float("nan"),
                                      "best_placement": None, "history": _best_so_far(curve), "optimizer": {},
                                      "elapsed_s": p.elapsed_s})

    try:
        result = train(problems, settings, progress=report, stop=stop, orders=orders)
    except BaseException as e:
        if store is not None and not isinstance(e, StoreError):
            try:
                if isinstance(e, KeyboardInterrupt):
                    store.stop(run_id)
                else:
                    store.fail(run_id, f"{type(e).__name__}: {e}")
            except StoreError:
                pass
        raise
    if store is not None:
        store.finish(run_id, as_optimize_result(problems[0], settings, result, meta or {}),
                     status="stopped" if result.stopped else "done")
    return run_id, result


def _best_so_far(rows: list[list[float]]) -> list[list[float]]:
    best = np.inf
    out = []
    for e, _, r in rows:
        best = min(best, r)
        out.append([e, best, r])
    return out


def as_optimize_result(problem, settings: TrainSettings, result: TrainResult, meta: dict) -> OptimizeResult:
    """The training as the store keeps a run: its curve as history, the first graph's best placement."""
    if 0 in result.best:
        objective, placement = result.best[0]
    else:  # stopped before the first graph was visited: its start placement
        from ...policies.features import GraphInfo
        placement = GraphInfo(problem).start_placement(1)[0]
        objective = problem.evaluate(placement)
    extras = {"training": {"method": settings.method, "curve": "objective / best single device", **meta,
                           "episodes_done": result.episodes}}
    return OptimizeResult(algorithm=f"train-{settings.method}", params=training_params(settings),
                          seed=settings.seed, best_placement=np.asarray(placement, dtype=np.int32),
                          best_objective=float(objective), best=problem.simulate(placement),
                          history=result.curve, evaluations=result.evaluations, wall_s=result.wall_s,
                          stopped=result.stopped, extras=extras)
