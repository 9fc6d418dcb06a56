"""The Pipeline page's cached work: the schedules side by side (each on its own placement: interleaved 1F1B
on p V chunks), the bubble's parts, the micro-batch sweep, and the stored pipelined benchmarks."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from contextlib import nullcontext

import numpy as np
import streamlit as st

from placement_core.analysis.bubble import bubble_breakdown
from placement_core.analysis.pipeline import (ScheduleRun, divisors, even_stages, ideal_profile, run_schedule,
                                              schedule_blocks, schedule_rows, sweep)
from placement_core.model.devices import DeviceGraph
from placement_core.base.errors import InputError
from placement_core.model.graph import Graph

log = logging.getLogger("placement.dashboard")

SWEEP_MAX_M = 64  # the sweep tries every divisor of the batch up to this (and the chosen m)
NAMES = {"thesis": "Thesis scheme (whole batch)", "gpipe": "GPipe", "1f1b": "1F1B (PipeDream-flush)",
         "interleaved-1f1b": "Interleaved 1F1B", "zb-h1": "ZB-H1 (zero bubble)"}
SHORT = {"thesis": "Thesis scheme", "gpipe": "GPipe", "1f1b": "1F1B", "interleaved-1f1b": "Interleaved 1F1B",
         "zb-h1": "ZB-H1"}


def problem_kw(cost: dict, penalty: str, ideal: bool) -> dict:
    """Problem keywords for the page's settings (``cost``: :func:`state.cost_kw`, the profile and any measured
    op times; the ideal pipeline: free transfers and weight updates)."""
    if not ideal:
        return {**cost, "penalty": penalty}
    rest = {k: v for k, v in cost.items() if k != "profile"}
    return {"profile": ideal_profile(cost["profile"], **rest), "penalty": penalty}


@st.cache_data(max_entries=16, show_spinner="Cutting the network into stages…")
def _even(graph_key: str, devices_key: str, cost_key: str, p: int, v: int, _graph: Graph, _devices: DeviceGraph,
          _cost: dict) -> np.ndarray:
    return even_stages(_graph, _devices, p, virtual_stages=v, **_cost)


def placements(graph_key: str, devices_key: str, cost_key: str, graph: Graph, devices: DeviceGraph, schedules,
               source: str, p: int, v: int, current, cost: dict) -> dict[str, np.ndarray]:
    """Each schedule's placement. An even split gives every schedule p balanced stages, and interleaved 1F1B
    p V balanced chunks placed round-robin (Megatron's layout); the current placement is every schedule's
    (interleaved 1F1B cuts a device's single run into V chunks)."""
    if source != "even":
        return {s: np.asarray(current, dtype=np.int32) for s in schedules}
    base = _even(graph_key, devices_key, cost_key, int(p), 1, graph, devices, cost)
    out = {s: base for s in schedules}
    if "interleaved-1f1b" in schedules and v > 1:
        try:
            out["interleaved-1f1b"] = _even(graph_key, devices_key, cost_key, int(p), int(v), graph, devices, cost)
        except InputError:
            out["interleaved-1f1b"] = base  # fewer ops than p V chunks: the schedule cuts each run instead
    return out


# The traced runs behind the timelines (the reference simulator: the page's slowest work, about a second for
# four schedules of ResNet-50 at m = 8), one entry per schedule and inputs, shared by every session. A plain
# cache rather than st.cache_resource so that a thread outside any script run can fill it: after a page is
# drawn, :func:`prefetch` simulates the micro-batch counts next to the chosen one, so the next click on m finds
# them done. An entry being computed is a Future: a second asker waits for it instead of simulating again.
_RUNS: OrderedDict = OrderedDict()
_RUNS_LOCK = threading.Lock()
RUNS_KEPT = 48  # entries (a schedule at one m): four schedules at a dozen settings
_ASKED = [0]  # how many times a page asked for runs: a prefetch stops when this moves


def _cached_run(key: tuple, compute):
    with _RUNS_LOCK:
        future = _RUNS.get(key)
        mine = future is None
        if mine:
            future = _RUNS[key] = Future()
            while len(_RUNS) > RUNS_KEPT:
                _RUNS.popitem(last=False)
        else:
            _RUNS.move_to_end(key)
    if mine:
        try:
            future.set_result(compute())
        except BaseException as e:
            with _RUNS_LOCK:
                if _RUNS.get(key) is future:
                    del _RUNS[key]
            future.set_exception(e)
    return future.result()


def _one_run(graph_key: str, devices_key: str, schedule: str, placement: np.ndarray, m: int, v: int, cost_key: str,
             penalty: str, ideal: bool, graph: Graph, devices: DeviceGraph, cost: dict) -> dict:
    def compute():
        run = run_schedule(graph, devices, placement, schedule, m, trace=True, virtual_stages=v,
                           **problem_kw(cost, penalty, ideal))
        rows = schedule_rows(run, devices)
        return {"run": run, "rows": rows, "placement": placement,
                "blocks": schedule_blocks(run.evaluation.result.trace, rows, chunk_of=run.chunk_of)}
    key = (graph_key, devices_key, schedule, placement.tobytes(), m, v, cost_key, penalty, ideal)
    return _cached_run(key, compute)


def _is_cached(graph_key, devices_key, schedule, placement, m, v, cost_key, penalty, ideal) -> bool:
    key = (graph_key, devices_key, schedule, placement.tobytes(), m, v, cost_key, penalty, ideal)
    with _RUNS_LOCK:
        return key in _RUNS


def schedule_runs(graph_key: str, devices_key: str, graph: Graph, devices: DeviceGraph, placement_of: dict,
                  m: int, v: int, cost_key: str, cost: dict, penalty: str, ideal: bool) -> list[dict]:
    """For each schedule: its :class:`ScheduleRun` (traced), Gantt rows and blocks. Cached per schedule and
    inputs (``cost_key`` names ``cost``: the profile and the calibration file, if any)."""
    placement_of = {s: np.asarray(p, dtype=np.int32) for s, p in placement_of.items()}
    args = (int(m), int(v), cost_key, penalty, bool(ideal))
    _ASKED[0] += 1  # a prefetch under way stops after its current run: this page's work comes first
    todo = [s for s, p in placement_of.items() if not _is_cached(graph_key, devices_key, s, p, *args)]
    with st.spinner("Simulating the schedules…") if todo else nullcontext():
        return [_one_run(graph_key, devices_key, s, p, *args, graph, devices, cost) for s, p in placement_of.items()]


def prefetch(graph_key: str, devices_key: str, graph: Graph, devices: DeviceGraph, placement_of: dict, counts,
             v: int, cost_key: str, cost: dict, penalty: str, ideal: bool, delay_s: float = 3.0) -> None:
    """Simulate the schedules at the micro-batch ``counts`` (the page passes the neighbours of the chosen m), then
    split their bubbles into parts (:func:`breakdowns`, unless ideal), in one background thread, ``delay_s`` after the page is drawn (its browser draws first). It stops, between
    two runs, as soon as any page asks for runs again, so it never holds up what a user asked for by more
    than one schedule's simulation."""
    placement_of = {s: np.asarray(p, dtype=np.int32) for s, p in placement_of.items()}
    jobs = [(s, p, int(c)) for c in counts for s, p in placement_of.items()
            if not _is_cached(graph_key, devices_key, s, p, int(c), int(v), cost_key, penalty, bool(ideal))]
    if not jobs:
        return

    asked = _ASKED[0]

    def work():
        time.sleep(delay_s)
        for s, p, c in jobs:
            if _ASKED[0] != asked:  # a page (any session) was drawn since: leave the processor to it
                return
            try:
                _one_run(graph_key, devices_key, s, p, c, int(v), cost_key, penalty, bool(ideal), graph, devices, cost)
            except Exception:  # noqa: BLE001 - the page simulates it again when asked, and shows the error there
                log.debug("prefetching %s at m = %d failed", s, c, exc_info=True)
        for c in [] if ideal else sorted({c for _, _, c in jobs}, key=list(counts).index):
            if _ASKED[0] != asked:
                return
            try:  # the bubble's parts too: the page splits the bubble at every m (the line on transfers)
                breakdowns(graph_key, devices_key, graph, devices, placement_of, c, int(v), cost_key, cost, penalty)
            except Exception:  # noqa: BLE001 - as above
                log.debug("prefetching the bubble's parts at m = %d failed", c, exc_info=True)

    threading.Thread(target=work, name="pipeline-prefetch", daemon=True).start()


def neighbours(batch_size: int, m: int) -> list[int]:
    """The micro-batch counts next to ``m`` among the divisors of the batch (up to the sweep's largest), the
    larger first: where a user goes from m."""
    options = divisors(batch_size, max(SWEEP_MAX_M, int(m)))
    above = [c for c in options if c > m][:1]
    below = [c for c in options if c < m][-1:]
    return above + below


@st.cache_data(max_entries=8, show_spinner="Splitting the bubble into its parts…")
def _breakdowns(graph_key: str, devices_key: str, placement_keys: tuple, m: int, v: int, cost_key: str,
                penalty: str, _graph: Graph, _devices: DeviceGraph, _placements: dict, _cost: dict) -> list[dict]:
    return [bubble_breakdown(_graph, _devices, _placements[s], s, m, virtual_stages=v, penalty=penalty, **_cost)
            for s, _ in placement_keys]


def breakdowns(graph_key: str, devices_key: str, graph: Graph, devices: DeviceGraph, placement_of: dict, m: int,
               v: int, cost_key: str, cost: dict, penalty: str) -> list[dict]:
    """Per schedule, the stages' idle seconds split into schedule, imbalance, updates and transfers."""
    placement_of = {s: np.asarray(p, dtype=np.int32) for s, p in placement_of.items()}
    keys = tuple((s, p.tobytes()) for s, p in placement_of.items())
    return _breakdowns(graph_key, devices_key, keys, int(m), int(v), cost_key, penalty, graph, devices,
                       placement_of, cost)


def sweep_counts(batch_size: int, chosen: int) -> list[int]:
    """The micro-batch counts of the sweep: every divisor of the batch up to 64, and the chosen one."""
    return sorted(set(divisors(batch_size, SWEEP_MAX_M)) | {int(chosen)})


@st.cache_data(max_entries=8, show_spinner="Sweeping the number of micro-batches…")
def _sweep(graph_key: str, devices_key: str, placement_keys: tuple, counts: tuple, v: int, cost_key: str,
           penalty: str, ideal: bool, _graph: Graph, _devices: DeviceGraph, _placements: dict, _cost: dict) -> list[dict]:
    schedules = [s for s, _ in placement_keys]
    first = _placements[schedules[0]]
    return sweep(_graph, _devices, first, schedules, list(counts), placements=_placements, virtual_stages=v,
                 **problem_kw(_cost, penalty, ideal))


def sweep_rows(graph_key: str, devices_key: str, graph: Graph, devices: DeviceGraph, placement_of: dict, counts,
               v: int, cost_key: str, cost: dict, penalty: str, ideal: bool) -> list[dict]:
    placement_of = {s: np.asarray(p, dtype=np.int32) for s, p in placement_of.items()}
    keys = tuple((s, p.tobytes()) for s, p in placement_of.items())
    return _sweep(graph_key, devices_key, keys, tuple(int(c) for c in counts), int(v), cost_key, penalty,
                  bool(ideal), graph, devices, placement_of, cost)


def gantt_figure(view: dict, x_max: float, title: str, unit: str, chunks: bool, big: bool, legend: bool = True):
    """The schedule's timeline, built once per view and drawing settings: ``view`` is one of
    :func:`schedule_runs`' cached dicts, so a rerun that changes nothing on it (the sweep, another schedule's
    setting, a click elsewhere) reuses its figure."""
    from .charts import pipeline_gantt
    return _memo(view, ("gantt", x_max, title, unit, chunks, big, legend), lambda: pipeline_gantt.schedule_gantt(
        view["blocks"], view["rows"], len(view["run"].stage_devices), x_max, title, unit, chunks=chunks, big=big,
        legend=legend))


def memory_figure(view: dict, devices: list[str], peaks: list[float], capacity: list[float], x_max: float,
                  big: bool):
    """The view's peak memory per stage (:func:`.charts.pipeline_bars.stage_memory_figure`), built once."""
    from .charts import pipeline_bars
    return _memo(view, ("memory", tuple(devices), tuple(capacity), x_max, big), lambda: pipeline_bars.
                 stage_memory_figure(devices, peaks, capacity, x_max, big=big))


def _memo(view: dict, key: tuple, build):
    figures = view.setdefault("figures", {})
    if key not in figures:
        if len(figures) >= 8:  # a few drawing settings per view at most (presentation mode, x range)
            figures.clear()
        figures[key] = build()
    return figures[key]


TRANSFERS_DOMINATE = 0.5  # the transfers' share of the stages' idle time from which the page says so


def transfers_note(views: list[dict], parts: list[dict]) -> str | None:
    """One line when transfers are at least half of the stages' idle time under some schedule shown (``parts``:
    :func:`breakdowns` of ``views``), naming the schedules and shares; else None."""
    hit = [(SHORT.get(v["run"].schedule, v["run"].schedule), pt["transfers_share"]) for v, pt in zip(views, parts)
           if pt["transfers_share"] >= TRANSFERS_DOMINATE]
    if not hit:
        return None
    shares = ", ".join(f"{name} {share:.0%}" for name, share in hit)
    return (f"Transfers dominate: they are most of the stages' idle time ({shares}); the links, not the schedule, "
            "set this step. Turn them off to see the schedules alone:")


@st.cache_resource(max_entries=8, show_spinner=False)
def _sweep_figure(graph_key: str, devices_key: str, placement_keys: tuple, counts: tuple, v: int, cost_key: str,
                  penalty: str, ideal: bool, m: int, capacity: float, _graph: Graph, _devices: DeviceGraph,
                  _placements: dict, _cost: dict):
    from .charts import pipeline_bars
    rows = _sweep(graph_key, devices_key, placement_keys, counts, v, cost_key, penalty, ideal, _graph, _devices,
                  _placements, _cost)
    return pipeline_bars.sweep_figure(rows, m, capacity, NAMES)


def sweep_figure(graph_key: str, devices_key: str, graph: Graph, devices: DeviceGraph, placement_of: dict, counts,
                 v: int, cost_key: str, cost: dict, penalty: str, ideal: bool, m: int, capacity: float):
    """:func:`.charts.pipeline_bars.sweep_figure` of :func:`sweep_rows`, built once per inputs (a subplot
    figure, slow to build, that a change of V or of another setting would otherwise rebuild unchanged)."""
    placement_of = {s: np.asarray(p, dtype=np.int32) for s, p in placement_of.items()}
    keys = tuple((s, p.tobytes()) for s, p in placement_of.items())
    return _sweep_figure(graph_key, devices_key, keys, tuple(int(c) for c in counts), int(v), cost_key, penalty,
                         bool(ideal), int(m), float(capacity), graph, devices, placement_of, cost)


def peak_stage_note(views: list[dict], device_names: list[str], m: int) -> str:
    """Which stage holds the most memory under each schedule, e.g. "Highest peak at m = 8: GPipe stage 1
    (gpu0, 3.2 GB); 1F1B stage 2 (gpu1, 1.9 GB)." The stage is read from the simulation, not assumed: the first
    stage holds the most activations, but weights or a larger slice of the network can put the peak elsewhere."""
    from placement_core.analysis import fmt_bytes

    parts = []
    for v in views:
        run = v["run"]
        peaks = run.stage_peak_memory()
        k = int(np.argmax(peaks))
        parts.append(f"{SHORT.get(run.schedule, run.schedule)} stage {k + 1} "
                     f"({device_names[run.stage_devices[k]]}, {fmt_bytes(peaks[k])})")
    return f"Highest peak memory at m = {m}: " + "; ".join(parts) + "."


def measured_pipelines(graph: Graph) -> list[dict]:
    """Stored pipelined benchmarks (``placement benchmark --schedule``) of the current network, at any batch:
    schedule, micro-batches, measured step and bubble, and the simulated ones when the run was given
    ``--simulate``."""
    from placement_core.formats.network import network_hash

    from . import stored

    try:
        with stored.open_store() as store:
            rows = store.benchmarks(network_name=graph.name)
    except InputError:
        return []
    out, hashes = [], {}
    for b in rows:
        result = b.get("result") or {}
        pipe = result.get("pipeline") or {}
        batch = b.get("batch_size")
        if result.get("status") != "ok" or pipe.get("bubble_fraction") is None or batch is None:
            continue
        if batch not in hashes:
            hashes[batch] = network_hash(graph.with_batch_size(int(batch)))
        if hashes[batch] != b.get("network_hash"):
            continue
        sim = pipe.get("simulated") or {}
        out.append({"id": b["id"], "schedule": pipe["schedule"], "micro_batches": pipe["micro_batches"],
                    "virtual_stages": pipe.get("virtual_stages", 1), "stages": len(pipe.get("stages", [])),
                    "batch_size": int(batch), "measured_step_s": b.get("measured_median_s"),
                    "measured_bubble": pipe["bubble_fraction"], "simulated_step_s": sim.get("step_s"),
                    "simulated_bubble": sim.get("bubble_fraction"), "simulated_on": sim.get("devices"),
                    "label": b.get("label") or ""})
    return out


__all__ = ["NAMES", "SHORT", "TRANSFERS_DOMINATE", "ScheduleRun", "breakdowns", "gantt_figure", "measured_pipelines",
           "memory_figure", "neighbours", "peak_stage_note", "placements", "prefetch", "problem_kw", "schedule_runs",
           "sweep_counts", "sweep_figure", "sweep_rows", "transfers_note"]
