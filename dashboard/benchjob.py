"""The Benchmark page's job: placements measured for real with ``placement_core.torch.benchmark`` in a background
thread, on the dashboard's job board (:mod:`.jobs`), keyed by session like optimization runs, so a benchmark keeps
going while the user looks elsewhere; finished jobs' measurements are collected into the session.

torch is imported only by the benchmark itself, in the job's thread (and its worker processes) once the user
presses Run; drawing the page imports no torch.
"""

from __future__ import annotations

import importlib.util
import itertools
import threading
import traceback
from dataclasses import dataclass, field

from placement_core import InputError
from placement_core.analysis import kendall_tau

from . import state
from .jobs import JobBoard

_ids = itertools.count(1)


def benchmark_backend():
    """``placement_core.torch.benchmark`` when it and torch are installed, else None (no torch import)."""
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        if importlib.util.find_spec("placement_core.torch.benchmark") is None:
            return None
    except (ImportError, ValueError):
        return None
    import placement_core.torch.benchmark as bench
    return bench if hasattr(bench, "benchmark") else None


def run_benchmark(source, shape, placements, devices, runner, batch_size, settings, progress):
    """The real thing (tests replace this to check the page without running PyTorch)."""
    bench = benchmark_backend()
    return bench.benchmark(source, shape, placements, devices, runner=runner, batch_size=batch_size,
                           settings=settings, progress=progress)


@dataclass
class BenchJob:
    labels: list[str]
    simulated: list[float]
    assignments: list[dict]
    source: str
    shape: tuple
    devices: str
    runner: str
    batch_size: int
    settings: object
    network_name: str = ""
    network_hash: str | None = None  # content of the network at the benchmark's batch size
    run_ids: list = field(default_factory=list)  # the stored run each placement came from, or None
    stored_ids: list = field(default_factory=list)  # the measurements' ids in the run store
    store_note: str | None = None
    ranking: dict | None = None  # a run's top K: {"title", "objectives"} (the run's own simulated objectives)
    # per placement, (low, high) seconds of the simulated time from the calibration's spread, or None
    intervals: list | None = None
    indistinct: list = field(default_factory=list)  # pairs of labels the simulator cannot tell apart
    id: int = field(default_factory=lambda: next(_ids))
    status: str = "running"
    done: int = 0
    results: list = field(default_factory=list)
    error: str | None = None
    collected: bool = False
    thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return self.status == "running"

    def stop(self) -> None:
        """Benchmarks run to their end: their worker processes have their own timeouts."""

    def work(self) -> None:
        try:
            self.results = run_benchmark(self.source, self.shape, self.assignments, self.devices, self.runner,
                                         self.batch_size, self.settings, self._progress)
            self._record()
            self.status = "done"
        except InputError as e:
            self.error, self.status = str(e), "failed"
        except Exception as e:  # report, never crash the page
            traceback.print_exc()
            self.error, self.status = f"the benchmark failed ({type(e).__name__}: {e})", "failed"

    def _progress(self, done: int, total: int) -> None:
        self.done = done

    def _record(self) -> None:
        """Keep every measurement in the run store (the scatter of earlier measurements reads it back)."""
        from placement_core.store import RunStore
        try:
            with RunStore() as store:
                run_ids = self.run_ids or [None] * len(self.labels)
                self.stored_ids = [
                    store.add_benchmark(network_name=self.network_name, devices_spec=self.devices, runner=self.runner,
                                        placement=a, simulated_s=sim, measured_median_s=r.median_step_s,
                                        result=r.to_dict(), run_id=run_id, label=label,
                                        network_hash=self.network_hash, batch_size=self.batch_size)
                    for label, sim, a, r, run_id in zip(self.labels, self.simulated, self.assignments, self.results,
                                                        run_ids)]
        except InputError as e:
            self.store_note = f"The measurements were not stored: {e}"


BOARD: JobBoard[BenchJob] = JobBoard("benchmark")


def jobs(session: str) -> list[BenchJob]:
    return BOARD.jobs(session)


def submit(session: str, job: BenchJob) -> None:
    job.thread = threading.Thread(target=job.work, name=f"placement-bench-{job.id}", daemon=True)
    BOARD.add(session, job)
    job.thread.start()


def collect(session: str) -> None:
    """Move finished jobs' measurements into the session's list of benchmarked placements."""
    s = state.session()
    points = s.setdefault("bench_points", [])
    for job in jobs(session):
        if job.status == "running" or job.collected:
            continue
        job.collected = True
        if job.error:
            s.bench_error = job.error
            continue
        if job.store_note:
            s.bench_error = job.store_note
        ids = job.stored_ids or [None] * len(job.labels)
        if job.ranking is not None:
            s.setdefault("bench_rankings", []).append(ranking_of(job))
        if job.indistinct:
            s.setdefault("bench_indistinct", []).extend(job.indistinct)
        intervals = job.intervals or [None] * len(job.labels)
        for label, sim, r, stored_id, iv in zip(job.labels, job.simulated, job.results, ids, intervals):
            q = r.quartiles_s
            points.append({"placement": label, "status": r.status, "simulated_s": sim,
                           "sim_interval_s": None if iv is None else list(iv),
                           "measured_s": r.median_step_s, "iqr_s": None if q is None else q[1] - q[0],
                           "devices": job.devices, "runner": job.runner, "batch": job.batch_size,
                           "message": r.message, "stored_id": stored_id})


def ranking_of(job: BenchJob) -> dict:
    """A measured top K: simulated rank (the run's objective) beside measured rank, and Kendall τ of the two."""
    objectives = job.ranking["objectives"]
    ok = [i for i, r in enumerate(job.results) if r.status == "ok" and r.median_step_s is not None]
    order = sorted(ok, key=lambda i: job.results[i].median_step_s)
    rows = [{"simulated rank": i + 1, "placement": label, "simulated objective (ms)": objectives[i] * 1e3,
             "measured median (ms)": None if r.median_step_s is None else r.median_step_s * 1e3,
             "measured rank": order.index(i) + 1 if i in order else None, "status": r.status}
            for i, (label, r) in enumerate(zip(job.labels, job.results))]
    tau = kendall_tau([objectives[i] for i in ok], [job.results[i].median_step_s for i in ok])
    return {"title": job.ranking["title"], "rows": rows, "tau": tau, "n": len(ok), "devices": job.devices,
            "runner": job.runner, "batch": job.batch_size}
