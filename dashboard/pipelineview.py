"""The Pipeline page's cached simulations: the schedules side by side and the micro-batch sweep."""

from __future__ import annotations

import numpy as np
import streamlit as st

from placement_core.analysis.pipeline import (ScheduleRun, divisors, ideal_profile, run_schedule, schedule_blocks,
                                              schedule_rows, sweep)
from placement_core.devices import DeviceGraph
from placement_core.graph import Graph

SWEEP_MAX_M = 64  # the sweep tries every divisor of the batch up to this (and the chosen m)


def problem_kw(cost: dict, penalty: str, ideal: bool) -> dict:
    """Problem keywords for the page's settings (``cost``: :func:`state.cost_kw`, the profile and any measured
    op times; the ideal pipeline: free transfers and weight updates)."""
    if not ideal:
        return {**cost, "penalty": penalty}
    rest = {k: v for k, v in cost.items() if k != "profile"}
    return {"profile": ideal_profile(cost["profile"], **rest), "penalty": penalty}


@st.cache_resource(max_entries=8, show_spinner="Simulating the schedules…")
def _runs(graph_key: str, devices_key: str, placement_key: bytes, schedules: tuple, m: int, cost_key: str,
          penalty: str, ideal: bool, _graph: Graph, _devices: DeviceGraph, _placement, _cost: dict) -> list[dict]:
    out = []
    for schedule in schedules:
        run = run_schedule(_graph, _devices, _placement, schedule, m, trace=True,
                           **problem_kw(_cost, penalty, ideal))
        rows = schedule_rows(run, _devices)
        out.append({"run": run, "rows": rows, "blocks": schedule_blocks(run.evaluation.result.trace, rows)})
    return out


def schedule_runs(graph_key: str, devices_key: str, graph: Graph, devices: DeviceGraph, placement,
                  schedules, m: int, cost_key: str, cost: dict, penalty: str, ideal: bool) -> list[dict]:
    """For each schedule: its :class:`ScheduleRun` (traced), Gantt rows and blocks. Cached per inputs
    (``cost_key`` names ``cost``: the profile and the calibration file, if any)."""
    placement = np.asarray(placement, dtype=np.int32)
    return _runs(graph_key, devices_key, placement.tobytes(), tuple(schedules), int(m), cost_key, penalty,
                 bool(ideal), graph, devices, placement, cost)


def sweep_counts(batch_size: int, chosen: int) -> list[int]:
    """The micro-batch counts of the sweep: every divisor of the batch up to 64, and the chosen one."""
    return sorted(set(divisors(batch_size, SWEEP_MAX_M)) | {int(chosen)})


@st.cache_data(max_entries=8, show_spinner="Sweeping the number of micro-batches…")
def _sweep(graph_key: str, devices_key: str, placement_key: bytes, schedules: tuple, counts: tuple, cost_key: str,
           penalty: str, ideal: bool, _graph: Graph, _devices: DeviceGraph, _placement, _cost: dict) -> list[dict]:
    return sweep(_graph, _devices, _placement, schedules, list(counts), **problem_kw(_cost, penalty, ideal))


def sweep_rows(graph_key: str, devices_key: str, graph: Graph, devices: DeviceGraph, placement, schedules,
               counts, cost_key: str, cost: dict, penalty: str, ideal: bool) -> list[dict]:
    placement = np.asarray(placement, dtype=np.int32)
    return _sweep(graph_key, devices_key, placement.tobytes(), tuple(schedules), tuple(int(c) for c in counts),
                  cost_key, penalty, bool(ideal), graph, devices, placement, cost)


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
        name = {"thesis": "Thesis scheme", "gpipe": "GPipe", "1f1b": "1F1B"}.get(run.schedule, run.schedule)
        parts.append(f"{name} stage {k + 1} ({device_names[run.stage_devices[k]]}, {fmt_bytes(peaks[k])})")
    return f"Highest peak memory at m = {m}: " + "; ".join(parts) + "."


__all__ = ["peak_stage_note", "ScheduleRun", "problem_kw", "schedule_runs", "sweep_counts", "sweep_rows"]
