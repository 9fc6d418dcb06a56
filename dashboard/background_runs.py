"""Background optimization runs that survive page switches.

A run executes in a daemon thread and records its progress under a lock; it
never calls ``st.*``. Runs live on the dashboard's job board (:mod:`.jobs`) keyed by the
browser session's key (kept in ``st.session_state.session_key``), so switching
pages, or the script rerunning, never loses them; the Optimize page polls them
from a fragment. Every run is also recorded in the run store
(``placement_core.store.recording.start_run``: checkpoints, history, archive), so it
outlives the dashboard process and can be reopened or resumed from the Runs
page or the CLI; a stored run is resumed here with ``RunSpec.resume_id``.
"""

from __future__ import annotations

import itertools
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from placement_core import InputError, Problem
from placement_core.analysis.benchmark_plan import RunPlacements
from placement_core.model.devices import DeviceGraph
from placement_core.model.graph import Graph

from .jobs import JobBoard
from .settings import SimChoices

MAX_CURVE_POINTS = 4000  # improvements kept per run's best-so-far curve; past it the smallest steps merge
MAX_FINISHED_PER_SESSION = 24
# Evaluations between a dashboard run's checkpoints (the CLI's default is 500). Each checkpoint writes the
# optimizer's state and history to SQLite (~10 ms for MAP-Elites on ResNet-50, about a tenth of the run's time
# at 500); a crash loses at most this many evaluations (about a second), and Stop still checkpoints exactly
# where the run stopped, so a resume continues from there.
CHECKPOINT_EVERY = 2000
MAX_SESSIONS = 64  # sessions whose runs are kept; the oldest idle ones are forgotten first
_ids = itertools.count(1)


@dataclass
class RunSpec:
    """What to run, and on which problem (kept so a result can be adopted with its network)."""

    algorithm: str
    title: str
    params: dict
    evaluations: int | None
    seconds: float | None
    seed: int
    workers: int
    graph: Graph
    graph_key: str
    network_label: str
    devices: DeviceGraph
    devices_key: str
    devices_label: str
    sim: SimChoices  # the simulator settings it was started with (adopted with its result)
    initial: Any = None  # placements to seed the search with (k, ops) or None
    init: str | None = None  # initial mappings to compute in the run's thread (seeding.parse_init's syntax)
    resume_id: int | None = None  # continue this stored run (from its last checkpoint) instead of starting one


class BestCurve:
    """A run's best-so-far curve as a step function: the first point, every improvement, and the latest point.

    Points between improvements repeat the best and carry nothing a step chart needs, so they are not kept:
    a 200,000-evaluation run keeps its early history exactly. Past ``limit`` improvements the half with the
    smallest drops go (the curve then steps down at the next kept improvement: still monotone, never below the
    true best, with its first, largest and latest improvements), so the size stays bounded.
    """

    def __init__(self, limit: int = MAX_CURVE_POINTS):
        self.limit = max(4, int(limit))
        self._x: list[float] = []  # evaluations at each improvement
        self._y: list[float] = []  # the best from there on
        self._last: float | None = None  # evaluations of the latest report, if after the last improvement

    def add(self, evaluations: float, best: float) -> None:
        if not np.isfinite(best):
            return
        if not self._y or best < self._y[-1]:
            self._x.append(float(evaluations))
            self._y.append(float(best))
            self._last = None
            if len(self._x) > self.limit:
                self._thin()
        elif evaluations > self._x[-1]:
            self._last = float(evaluations)

    def _thin(self) -> None:
        y = np.asarray(self._y)
        drops = y[:-1] - y[1:]  # drops[i]: the step down at point i + 1
        interior = np.arange(1, len(y) - 1)  # the first and the latest improvement always stay
        smallest = interior[np.argsort(drops[interior - 1], kind="stable")[:len(interior) // 2]]
        keep = np.ones(len(y), dtype=bool)
        keep[smallest] = False
        self._x = [x for x, k in zip(self._x, keep) if k]
        self._y = [v for v, k in zip(self._y, keep) if k]

    def points(self) -> list[tuple[float, float]]:
        pts = list(zip(self._x, self._y))
        if self._last is not None:
            pts.append((self._last, self._y[-1]))
        return pts

    def __len__(self) -> int:
        return len(self._x) + (self._last is not None)


@dataclass
class Run:
    spec: RunSpec
    problem: Problem
    id: int = field(default_factory=lambda: next(_ids))
    status: str = "starting"  # starting | running | done | stopped | failed
    started: float = field(default_factory=time.time)
    evaluations: int = 0
    best: float = float("inf")
    evals_per_s: float = 0.0
    elapsed_s: float = 0.0
    fraction: float | None = 0.0
    curve: BestCurve = field(default_factory=BestCurve)  # (evaluations, best so far) at every improvement
    snapshot: dict | None = None
    # MAP-Elites: (evaluations, coverage, elites, sum and max of their objectives) at every snapshot, for the
    # Archive page's coverage and QD-score over time
    quality: list = field(default_factory=list)
    result: Any = None  # OptimizeResult when finished
    error: str | None = None
    store_id: int | None = None  # the run's id in the run store, once recorded
    store_note: str | None = None  # why it could not be recorded, if it could not
    stage: str | None = None  # what the run does before its search starts (making the initial mappings)
    seeded: dict | None = None  # what the initial mappings were and cost, once made (as the CLI reports it)
    stop_event: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    thread: threading.Thread | None = None

    @property
    def name(self) -> str:
        """The run's one number everywhere is its id in the run store (the Runs page's "run 10 · HEFT"), known
        once the store has recorded it (after the initial mappings); before, or without a store, the title."""
        if self.spec.resume_id is not None:
            return f"run {self.spec.resume_id} · {self.spec.title} (resumed)"
        if self.store_id is not None:
            return f"run {self.store_id} · {self.spec.title}"
        if self.store_note:
            return f"{self.spec.title} (not stored, #{self.id} here)"
        return f"{self.spec.title} (starting)"

    @property
    def active(self) -> bool:
        return self.status in ("starting", "running")

    def stop(self) -> None:
        self.stop_event.set()

    def placements(self) -> RunPlacements | None:
        """What the finished run keeps that can be measured (its best, the best distinct placements it evaluated,
        its archive's elites), for ``benchmark_plan.top_k`` to rank as it ranks a stored run's; None while it
        runs."""
        result = self.result
        if result is None:
            return None
        archive = result.archive
        return RunPlacements(self.name, best=result.best_placement, kept=[x for _, x in result.kept],
                             elites=[(None, e.placement) for e in archive.ranked()] if archive is not None else [],
                             store_id=self.store_id)

    # called from the worker thread -------------------------------------------------------------
    def on_progress(self, p) -> None:
        with self.lock:
            self.status = "running" if not p.done else self.status
            self.stage = None
            self.evaluations = p.evaluations
            self.best = p.best
            self.evals_per_s = p.evals_per_s
            self.elapsed_s = p.elapsed_s
            if self.spec.seconds and not self.spec.evaluations:
                self.fraction = min(1.0, p.elapsed_s / self.spec.seconds)
            else:
                self.fraction = p.fraction
            self.curve.add(p.evaluations, p.best)
            if p.snapshot is not None:
                self.snapshot = p.snapshot
                fs = p.snapshot.get("objectives")
                if "coverage" in p.snapshot and fs is not None:
                    self.quality.append((p.evaluations, float(p.snapshot["coverage"]), len(fs), float(sum(fs)),
                                         float(max(fs, default=0.0))))

    def view(self) -> dict:
        """A consistent copy of the live fields for drawing."""
        with self.lock:
            return {"id": self.id, "name": self.name, "algorithm": self.spec.algorithm, "status": self.status,
                    "evaluations": self.evaluations, "budget": self.spec.evaluations, "best": self.best,
                    "evals_per_s": self.evals_per_s, "elapsed_s": self.elapsed_s, "fraction": self.fraction,
                    "curve": self.curve.points(), "snapshot": self.snapshot, "error": self.error,
                    "seconds": self.spec.seconds, "store_id": self.store_id, "stage": self.stage}


def _optimize(run: Run):
    """Run (or resume) the optimization, recorded in the run store when it can be opened."""
    from placement_core.optimize import run as optimize
    from placement_core.store.recording import resume_run, start_run
    from placement_core.store import RunStore

    spec = run.spec
    initial = spec.initial if spec.resume_id is not None else _seed(run)
    label = f"dashboard: {spec.network_label} on {spec.devices_label}"  # the seeding is a column of its own
    try:
        store = RunStore()
    except InputError as e:
        if spec.resume_id is not None:
            raise
        run.store_note = f"not recorded in the run store: {e}"
        return optimize(run.problem, spec.algorithm, evaluations=spec.evaluations, seconds=spec.seconds,
                        seed=spec.seed, params=spec.params, initial=initial, workers=spec.workers,
                        progress=run.on_progress, stop=run.stop_event)
    with store:
        if spec.resume_id is not None:
            run.store_id = spec.resume_id
            return resume_run(store, spec.resume_id, workers=spec.workers, progress=run.on_progress,
                              stop=run.stop_event, checkpoint_every=CHECKPOINT_EVERY)
        _, result = start_run(store, run.problem, spec.algorithm, evaluations=spec.evaluations,
                              seconds=spec.seconds, seed=spec.seed, params=spec.params, initial=initial,
                              workers=spec.workers, progress=run.on_progress, stop=run.stop_event,
                              checkpoint_every=CHECKPOINT_EVERY, label=label, seeding=run.seeded,
                              on_created=lambda run_id: setattr(run, "store_id", run_id))
        return result


class _Stopped(Exception):
    """Stop was pressed while the initial mappings were being made."""


def _seed(run: Run):
    """The placements the search starts from: the page's (the current placement) first, then the initial
    mappings ``spec.init`` names, computed here because HEFT on a large network or a Bayesian start of a few
    hundred trials takes seconds. Their evaluations are spent before the search, outside its budget, and
    recorded in ``run.seeded`` as the CLI reports them."""
    from placement_core.optimize.seeding import initial_placements, seeding_record

    spec = run.spec
    if not spec.init:
        return spec.initial
    with run.lock:
        run.stage = f"making the initial mappings ({spec.init})"

    def score(xs):  # Stop is honoured between the seeds' evaluations (a long Bayesian start)
        if run.stop_event.is_set():
            raise _Stopped
        return run.problem.evaluate_many(xs)

    seeds = initial_placements(run.problem, spec.init, seed=spec.seed, objective=score)
    with run.lock:
        run.stage = "starting the search"
        run.seeded = seeding_record(spec.init, seeds, with_current=spec.initial is not None)
    if spec.initial is None:
        return seeds.placements
    return np.vstack([np.atleast_2d(spec.initial).astype(np.int32), seeds.placements])


def _work(run: Run) -> None:
    run.status = "running"
    try:
        result = _optimize(run)
        with run.lock:
            run.result = result
            run.best = result.best_objective
            run.evaluations = result.evaluations
            run.elapsed_s = result.wall_s
            run.fraction = 1.0 if not result.stopped else run.fraction
            run.status = "stopped" if result.stopped else "done"
    except _Stopped:  # before the search: nothing was run or stored
        with run.lock:
            run.error, run.status, run.stage = "stopped while making the initial mappings: nothing was run", \
                "stopped", None
    except InputError as e:
        with run.lock:
            run.error, run.status = str(e), "failed"
    except Exception as e:  # a bug: keep the page alive, say what happened, log the details
        traceback.print_exc()
        with run.lock:
            run.error, run.status = f"the run failed ({type(e).__name__}: {e})", "failed"


class Registry:
    """Optimization runs per session, on the dashboard's one job board (:mod:`.jobs`)."""

    def __init__(self):
        self.board: JobBoard[Run] = JobBoard("optimization run", max_finished=MAX_FINISHED_PER_SESSION,
                                             max_sessions=MAX_SESSIONS)

    def start(self, session: str, spec: RunSpec, problem: Problem) -> Run:
        run = Run(spec, problem)
        run.thread = threading.Thread(target=_work, args=(run,), name=f"placement-run-{run.id}", daemon=True)
        self.board.add(session, run)
        run.thread.start()
        return run

    def runs(self, session: str) -> list[Run]:
        return self.board.jobs(session)

    def get(self, session: str, run_id: int) -> Run | None:
        return self.board.get(session, run_id)

    def remove(self, session: str, run_id: int) -> None:
        self.board.remove(session, run_id)

    def stop_all(self, session: str) -> None:
        self.board.stop_all(session)


REGISTRY = Registry()
