"""The ask/tell loop: budget, evaluation backend, history, progress and the stop flag."""

from __future__ import annotations

import time
from collections import deque
from typing import Callable

import numpy as np

from ..base.errors import InputError
from ..parallel import Done, Evaluator, SerialEvaluator
from ..problem import Problem
from . import variation
from .base import OptimizeResult, Optimizer, Progress
from .variation import Recipe
from .best_kept import KEEP, KeptBest

ProgressCallback = Callable[[Progress], None]


def check_budget(evaluations: int | None, seconds: float | None) -> None:
    if evaluations is None and seconds is None:
        raise InputError("give a budget in evaluations and/or seconds", field="budget", fix="e.g. --budget 20000")
    if evaluations is not None and (isinstance(evaluations, bool) or int(evaluations) < 1):
        raise InputError(f"the evaluation budget must be at least 1, got {evaluations!r}", field="budget")
    if seconds is not None and not seconds > 0:
        raise InputError(f"the time budget must be positive, got {seconds!r}", field="seconds")


def drive(optimizer: Optimizer, *, evaluations: int | None = None, seconds: float | None = None,
          evaluator: Evaluator | None = None, progress: ProgressCallback | None = None, stop=None,
          snapshot_every_s: float = 0.5, state: dict | None = None,
          checkpoint: Callable[[dict], None] | None = None, checkpoint_every: int = 1,
          keep: int = KEEP) -> OptimizeResult:
    """Run ``optimizer`` until the budget is spent, it finishes, or ``stop`` is set.

    ``stop`` is anything with ``is_set()`` (a threading.Event) or a callable; it is checked before
    every batch, i.e. within one generation or step. ``state`` resumes from a checkpoint made by
    ``checkpoint``, which is called with the loop state at the first batch boundary after every
    ``checkpoint_every`` evaluations (1 = after every batch).
    """
    check_budget(evaluations, seconds)
    problem: Problem = optimizer.problem
    if evaluator is None:
        evaluator = SerialEvaluator(problem)
    stopped_by = _stop_test(stop)
    best_x = None
    best_f = float("inf")
    used = 0
    history: list[tuple[float, float, float]] = []
    elapsed_before = 0.0
    batches = 0
    resubmit: list[Recipe] = []
    kept = KeptBest(keep)
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        used = int(state["evaluations"])
        best_f = float(state["best_objective"])
        best_x = None if state["best_placement"] is None else np.asarray(state["best_placement"], dtype=np.int32)
        history = [tuple(row) for row in state["history"]]
        elapsed_before = float(state.get("elapsed_s", 0.0))
        batches = int(state.get("batches", 0))
        resubmit = [Recipe.from_dict(r, problem.n_ops) for r in state.get("pending", [])]
        kept.load(state.get("kept"))  # checkpoints made before kept placements existed have none
    else:
        optimizer.configure(evaluator, evaluations)
    send = _sender(optimizer, evaluator)
    start = time.perf_counter() - elapsed_before
    last_snapshot = -1e9
    last_checkpoint = used
    stopped = False

    def emit(done: bool = False) -> None:
        nonlocal last_snapshot
        if progress is None:
            return
        now = time.perf_counter()
        snap = None
        if done or now - last_snapshot >= snapshot_every_s:
            snap = optimizer.snapshot()
            last_snapshot = now
        progress(Progress(optimizer.name, used, evaluations, best_f, optimizer.current, now - start, snap, done))

    if progress is not None:  # long work inside one ask() (HEFT's planning) reports through the same callback
        optimizer.report = lambda snap: progress(Progress(optimizer.name, used, evaluations, best_f, optimizer.current,
                                                          time.perf_counter() - start, snap))
    pending: deque[tuple[Recipe, object]] = deque((r, send(r)) for r in resubmit)
    asked = sum(len(r) for r, _ in pending)  # evaluations asked for and not yet told
    while True:
        while not stopped and len(pending) < optimizer.pending:
            if stopped_by():
                stopped = True
                break
            if evaluations is not None and used + asked >= evaluations:
                break
            if seconds is not None and time.perf_counter() - start >= seconds:
                break
            if optimizer.finished or not optimizer.ready():
                break
            limit = evaluations - used - asked if evaluations is not None else 1 << 30
            recipe = optimizer.next_recipe(limit)
            if len(recipe) == 0:
                optimizer.finished = True
                break
            pending.append((recipe, send(recipe)))
            asked += len(recipe)
        if not pending:  # also when an optimizer says it is not ready with nothing outstanding: a dead end
            break
        # A stop still tells what is already being evaluated: no evaluation is lost or counted twice.
        recipe, handle = pending.popleft()
        asked -= len(recipe)
        xs, fs, rates = handle.result()
        fs = np.asarray(fs, dtype=float)
        optimizer.take_results(xs, fs, rates)
        kept.offer(xs, fs)
        used += len(xs)
        i = int(np.argmin(fs))
        if fs[i] < best_f:
            best_f = float(fs[i])
            best_x = xs[i].copy()
        history.append((used, best_f, float(optimizer.current)))
        batches += 1
        emit()
        if checkpoint is not None and used - last_checkpoint >= checkpoint_every:
            last_checkpoint = used
            checkpoint(_loop_state(optimizer, used, best_f, best_x, history, time.perf_counter() - start, batches,
                                   pending, kept))
    wall = time.perf_counter() - start
    if stopped and checkpoint is not None and used > last_checkpoint:
        checkpoint(_loop_state(optimizer, used, best_f, best_x, history, wall, batches, pending, kept))  # resume here
    if best_x is None:
        raise InputError("the optimizer evaluated nothing", field="budget",
                         fix="Give a budget of at least one evaluation")
    best = problem.simulate(best_x)
    emit(done=True)
    hist = np.array(history, dtype=float).reshape(-1, 3)
    return OptimizeResult(algorithm=optimizer.name, params=dict(optimizer.params), seed=optimizer.seed,
                          best_placement=best_x, best_objective=best_f, best=best, history=hist, evaluations=used,
                          wall_s=wall, stopped=stopped, extras=optimizer.extras(), kept=kept.ranked())


def _loop_state(optimizer, used, best_f, best_x, history, elapsed, batches, pending, kept) -> dict:
    """What a resume needs: the optimizer (which has already asked for the pending batches), those
    batches themselves, to be evaluated again rather than asked for anew, and the best placements kept."""
    return {"kept": kept.state(), "optimizer": optimizer.state_dict(), "evaluations": used, "best_objective": best_f,
            "best_placement": None if best_x is None else best_x.tolist(), "history": [list(h) for h in history],
            "elapsed_s": elapsed, "batches": batches, "pending": [r.to_dict() for r, _ in pending]}


class _Made:
    """Children made here, their objectives coming from the backend."""

    def __init__(self, kids, rates, handle):
        self.kids, self.rates, self.handle = kids, rates, handle

    def result(self):
        return self.kids, self.handle.result(), self.rates


def _sender(optimizer: Optimizer, evaluator):
    """How a proposed batch reaches the backend. One batch at a time: its children are made here, evaluated
    and waited for (a backend may split them over its workers). Several: each batch is one task, submitted at
    once; on a parallel backend that supports it the worker also makes the children (``vary_on_workers``)."""
    space = optimizer.space
    # the calls of a shared module with weights go where its first call goes (a real run refuses to split them;
    # Problem.tie): every search keeps that constraint, and nothing changes for a network without such modules
    tie = optimizer.problem.tie if optimizer.problem.tied else None
    if optimizer.pending <= 1:
        return lambda recipe: _made(recipe, lambda kids: Done(evaluator.evaluate(kids)), space, tie)
    if (optimizer.params.get("vary_on_workers") and getattr(evaluator, "workers", 1) > 1
            and hasattr(evaluator, "submit_recipe") and tie is None):
        return evaluator.submit_recipe
    submit = getattr(evaluator, "submit", None) or (lambda kids: Done(evaluator.evaluate(kids)))
    return lambda recipe: _made(recipe, submit, space, tie)


def _made(recipe: Recipe, dispatch, space=None, tie=None) -> _Made:
    kids, rates = variation.apply(recipe, space)
    if tie is not None:
        kids = tie(kids)
    return _Made(kids, rates, dispatch(kids))



def _stop_test(stop) -> Callable[[], bool]:
    if stop is None:
        return lambda: False
    if hasattr(stop, "is_set"):
        return stop.is_set
    if callable(stop):
        return stop
    raise TypeError("stop must be an Event-like object or a callable")
