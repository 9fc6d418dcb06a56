"""Measured searches recorded in the run store: start one from a stored run, resume one that was killed.

A measured search is a run of its own (algorithm ``measured-assisted``, ``measured-ga`` or
``measured-top-k``) on the problem of the run it starts from; every measurement is stored with it as a
benchmark (``placement runs benchmarks`` lists them) the moment it is made. Resuming runs the search
again against those measurements (:mod:`.learn.search`): nothing measured is measured again. The torch
side is handed in (``truth``): the store layer never imports torch.
"""

from __future__ import annotations

import os
import time
from typing import Callable

import numpy as np

from ..base.errors import InputError
from ..model.sharding import gene_entry
from ..surrogate.search import Ledger, SearchSettings, run_search
from ..surrogate.model import SurrogateSpec
from ..optimize.base import OptimizeResult
from . import STOP_IT_FIRST, RunStore

PREFIX = "measured-"


def is_measured(algorithm: str) -> bool:
    return str(algorithm).startswith(PREFIX)


class StoredLedger(Ledger):
    """A ledger whose measurements live in the run store, with run ``run_id``."""

    def __init__(self, store: RunStore, run_id: int, problem, truth, *, devices_spec: str, runner: str,
                 details: Callable[[bytes], dict] | None = None, batch_size: int | None = None):
        from ..formats.network import network_hash

        self.store, self.run_id, self.problem = store, run_id, problem
        self.devices_spec, self.runner, self.details = devices_spec, runner, details
        self.batch_size = batch_size or problem.graph.batch_size
        self.network_hash = network_hash(problem.graph.with_batch_size(self.batch_size))
        super().__init__(truth, stored_measurements(store, run_id, problem))

    def record(self, placements, values, labels) -> None:
        names = self.problem.devices.names
        for x, v, label in zip(placements, values, labels):
            key = np.ascontiguousarray(x, dtype=np.int32).tobytes()
            result = (self.details(key) if self.details else None) or {"status": "ok" if np.isfinite(v) else "error"}
            self.store.add_benchmark(
                network_name=self.problem.graph.name, devices_spec=self.devices_spec, runner=self.runner,
                placement={op.name: gene_entry(int(i), names, self.problem.splits)
                           for op, i in zip(self.problem.graph.ops, x)},
                simulated_s=float(self.problem.simulate(x).result.batch_time),
                measured_median_s=float(v) if np.isfinite(v) else None, result=result, run_id=self.run_id,
                label=label, network_hash=self.network_hash, batch_size=self.batch_size)


def stored_measurements(store: RunStore, run_id: int, problem) -> dict[bytes, float]:
    """placement key -> measured median (``inf``: it failed) of every measurement stored with the run."""
    names = problem.devices.names
    out: dict[bytes, float] = {}
    for b in store.benchmarks(run_id=run_id):
        a = b["placement"]
        if any(a.get(op.name) not in names for op in problem.graph.ops):
            continue
        x = np.array([names.index(a[op.name]) for op in problem.graph.ops], dtype=np.int32)
        v = b["measured_median_s"]
        out[x.tobytes()] = float(v) if v is not None else float("inf")
    return out


def start_measured(store: RunStore, from_run: int, settings: SearchSettings, truth, *, params: dict,
                   initial=None, label: str | None = None, details=None, progress=None, stop=None,
                   on_created=None) -> tuple[int, OptimizeResult]:
    """Record a measured search on run ``from_run``'s problem and run it. ``params`` (the model source, local
    devices, device mapping, benchmark settings) are stored so that a resume can rebuild ``truth``."""
    settings.check()
    problem = store.problem(from_run)
    run_params = {**params, "from_run": int(from_run), "search": settings.search, "population": settings.population,
                  "initial_evaluations": settings.initial, "batch": settings.batch,
                  "generations": settings.generations, "encoding": settings.surrogate.encoding,
                  "learner": settings.surrogate.learner}
    run_id = store.create_run(problem, PREFIX + settings.search, run_params, settings.seed,
                              evaluations=settings.budget, label=label, initial=initial)
    if on_created is not None:
        on_created(run_id)
    return run_id, _drive(store, run_id, problem, settings, truth, params, initial, details, progress, stop)


def settings_of(rec) -> SearchSettings:
    p = rec.params
    return SearchSettings(budget=int(rec.budget_evaluations), search=p["search"], seed=int(rec.seed),
                          population=int(p["population"]), initial=int(p["initial_evaluations"]),
                          batch=int(p["batch"]), generations=int(p["generations"]),
                          surrogate=SurrogateSpec(encoding=p["encoding"], learner=p["learner"], simulated=True,
                                                  seed=int(rec.seed)))


def resume_measured(store: RunStore, run_id: int, truth_for: Callable[[dict, object], object], *, details=None,
                    progress=None, stop=None, force: bool = False) -> OptimizeResult:
    """Continue a stopped or killed measured search; ``truth_for(params, problem)`` rebuilds its truth."""
    rec = store.get(run_id)
    if not is_measured(rec.algorithm):
        raise InputError(f"run {run_id} is not a measured search", field="--resume")
    if rec.status == "done":
        raise InputError(f"run {run_id} has already finished", field="--resume",
                         fix="Start a new measured search, or resume one that was stopped or interrupted")
    if rec.alive and not force:
        raise InputError(f"run {run_id} is still running ({rec.where}); two processes must not drive one run",
                         field="--resume", fix=f"{STOP_IT_FIRST} resumed")
    problem = store.problem(run_id)
    truth = truth_for(rec.params, problem)
    store.claim(run_id, expected=rec)
    return _drive(store, run_id, problem, settings_of(rec), truth, rec.params, store.initial(run_id), details,
                  progress, stop)


def _drive(store, run_id, problem, settings, truth, params, initial, details, progress, stop) -> OptimizeResult:
    ledger = StoredLedger(store, run_id, problem, truth, devices_spec=params.get("devices", ""),
                          runner=params.get("runner", "ranks"), details=details, batch_size=params.get("batch_size"))
    start = time.perf_counter()
    try:
        found = run_search(problem, ledger, settings, initial=initial, progress=progress, stop=stop)
    except KeyboardInterrupt:
        store.stop(run_id)
        raise
    except BaseException as e:
        store.fail(run_id, str(e) if isinstance(e, InputError) else f"{type(e).__name__}: {e}")
        raise
    stopped = found.evaluations < settings.budget
    history = np.array([(u, b, b) for u, b in found.history], dtype=float).reshape(-1, 3)
    kept = sorted(((v, np.frombuffer(k, dtype=np.int32).copy()) for k, v in ledger.values.items()
                   if np.isfinite(v)), key=lambda t: t[0])[:50]
    result = OptimizeResult(algorithm=PREFIX + settings.search, params=dict(params), seed=settings.seed,
                            best_placement=found.best_placement, best_objective=found.best_value,
                            best=problem.simulate(found.best_placement), history=history,
                            evaluations=found.evaluations, wall_s=time.perf_counter() - start, stopped=stopped,
                            extras={"measurements_made": ledger.asked, "rounds": found.rounds,
                                    "load_average_at_end": list(os.getloadavg())}, kept=kept)
    store.finish(run_id, result, status="stopped" if stopped else "done")
    return result
