"""Optimization runs recorded in the store: start one, checkpoint it as it goes, resume it after a crash.

With the serial backend a resumed run reaches exactly the result of an
uninterrupted one: the checkpoint holds the optimizer's whole state (including
its random generator) and the loop's counters and history.
"""

from __future__ import annotations

from ..optimize import make_optimizer
from ..optimize.driver import check_budget, drive
from ..parallel import make_evaluator
from ..parallel.cluster import ClusterLost
from ..problem import Problem
from . import STOP_IT_FIRST, RunStore, StoreError

CHECKPOINT_EVERY = 500  # evaluations between checkpoints (at the next generation / step boundary)


def start_run(store: RunStore, problem: Problem, algorithm: str, *, evaluations: int | None = None,
              seconds: float | None = None, seed: int = 0, params: dict | None = None, label: str | None = None,
              workers: int = 1, dask=None, evaluator=None, progress=None, stop=None,
              checkpoint_every: int = CHECKPOINT_EVERY, on_created=None, initial=None, seeding=None):
    """Create the run, then optimize; returns (run id, OptimizeResult). Bad input writes nothing.

    The evaluator is built (a Dask scheduler connected to) before the run is recorded, so
    an unreachable cluster leaves no failed run behind. ``initial`` placements seed the
    search and are stored with the run, so a resume before the first checkpoint starts
    exactly as the original did; ``seeding`` (what they were) is stored beside them.
    """
    check_budget(evaluations, seconds)
    optimizer = make_optimizer(problem, algorithm, seed=seed, params=params, evaluations=evaluations,
                               initial=initial)
    own = evaluator is None
    evaluator = evaluator or make_evaluator(problem, workers=workers, dask=dask)
    try:
        run_id = store.create_run(problem, algorithm, optimizer.params, seed, evaluations=evaluations,
                                  seconds=seconds, label=label, initial=optimizer.initial, seeding=seeding)
        if on_created is not None:
            on_created(run_id)
    except BaseException:
        if own:
            evaluator.close()
        raise
    return run_id, _drive(store, run_id, optimizer, evaluations, seconds, None, evaluator, own, progress, stop,
                          checkpoint_every)


def resume_run(store: RunStore, run_id: int, *, workers: int = 1, dask=None, evaluator=None, progress=None,
               stop=None, checkpoint_every: int = CHECKPOINT_EVERY, force: bool = False):
    """Continue a stopped or interrupted run from its last checkpoint (from the start if it has none).

    A run that is still running in a live process is refused: two processes must never drive
    one run. ``force`` takes it over anyway (for a claim that cannot be checked, such as a
    process on a host that is gone); a process still driving it stops at its next checkpoint.
    Nothing is written until the evaluator is ready and the run is claimed.
    """
    rec = store.get(run_id)
    from ..base.errors import InputError
    if rec.algorithm.startswith("measured-"):
        raise InputError(f"run {run_id} is a measured search (it times placements for real)", field="--resume",
                         fix=f"Resume it with `placement optimize --resume {run_id}` (needs PyTorch and its devices)")
    if rec.status == "done":
        raise InputError(f"run {run_id} has already finished", field="--resume",
                         fix="Start a new run, or resume one that was stopped or interrupted")
    if rec.alive and not force:
        raise InputError(f"run {run_id} is still running ({rec.where}); two processes must not drive one run",
                         field="--resume", fix=f"{STOP_IT_FIRST} resumed (--force takes it over anyway, e.g. when "
                                               "it runs on a host that is gone)")
    problem = store.problem(run_id)
    optimizer = make_optimizer(problem, rec.algorithm, seed=rec.seed, params=rec.params,
                               evaluations=rec.budget_evaluations, initial=store.initial(run_id))
    state = store.load_checkpoint(run_id)
    own = evaluator is None
    evaluator = evaluator or make_evaluator(problem, workers=workers, dask=dask)
    try:
        store.claim(run_id, expected=rec)
    except BaseException:
        if own:
            evaluator.close()
        raise
    return _drive(store, run_id, optimizer, rec.budget_evaluations, rec.budget_seconds, state, evaluator, own,
                  progress, stop, checkpoint_every)


def _drive(store, run_id, optimizer, evaluations, seconds, state, evaluator, own, progress, stop,
           checkpoint_every):
    try:
        try:
            result = drive(optimizer, evaluations=evaluations, seconds=seconds, evaluator=evaluator,
                           progress=progress, stop=stop, state=state,
                           checkpoint=lambda s: store.checkpoint(run_id, s), checkpoint_every=checkpoint_every)
        finally:
            if own:
                evaluator.close()
    except StoreError as e:  # the store was replaced or the run taken over: nothing more can be recorded
        raise _lost(run_id, e) from None
    except ClusterLost as e:  # the work out on the cluster is lost, the run is not: it resumes from its checkpoint
        try:
            store.interrupt(run_id, e.problem)
        except StoreError:
            pass
        raise ClusterLost(f"{e.problem}; run {run_id} is interrupted", field=e.field,
                          fix=f"`placement optimize --resume {run_id}` continues it from its last checkpoint (add "
                              "--dask ADDRESS once a scheduler runs again, or leave it out to evaluate here)") from None
    except BaseException as e:
        from ..base.errors import InputError
        try:
            if isinstance(e, KeyboardInterrupt):
                store.stop(run_id)
            else:
                store.fail(run_id, str(e) if isinstance(e, InputError) else f"{type(e).__name__}: {e}")
        except StoreError:
            pass  # the original failure is what the user needs to see
        raise
    try:
        store.finish(run_id, result, status="stopped" if result.stopped else "done")
    except StoreError as e:
        raise _lost(run_id, e) from None
    return result


def _lost(run_id: int, e: StoreError) -> StoreError:
    problem = e.problem if e.problem.startswith(f"run {run_id} ") else f"run {run_id} stopped: {e.problem}"
    return StoreError(problem, source=e.source, fix=e.fix)


def load_archive(store: RunStore, run_id: int, problem: Problem | None = None):
    """A stored MAP-Elites run's archive, rebuilt as an :class:`~.optimize.archive.Archive` (None if it has none).

    Descriptors are rebuilt by name with the stored sizes, so a reopened archive
    bins, labels and draws exactly like the one the run produced.
    """
    import numpy as np

    from ..optimize.archive import Archive, CrossDeviceEdges, Elite, make_descriptors

    rows = store.archive_rows(run_id)
    if not rows:
        return None
    problem = problem or store.problem(run_id)
    dims = store.get(run_id).extras.get("archive_dimensions") or []
    descriptors = []
    for d in dims:
        if d["name"] == "cross_device_edges":
            descriptors.append(CrossDeviceEdges(problem, bins=int(d["size"])))
        else:
            descriptors.extend(make_descriptors(problem, [d["name"]]))
    if len(descriptors) != len(rows[0]["niche"]):
        from ..base.errors import InputError
        raise InputError(f"run {run_id}'s archive has dimensions this version does not know", field="run",
                         fix="Export it with `placement runs export --what archive` instead")
    archive = Archive(problem, descriptors)
    archive.elites = {r["niche"]: Elite(r["niche"], np.asarray(r["placement"], dtype=np.int32), float(r["objective"]),
                                        tuple(float(v) for v in r["descriptors"])) for r in rows}
    return archive
