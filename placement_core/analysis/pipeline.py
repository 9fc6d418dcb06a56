"""Pipeline-parallelism views: stages of a placement, schedules side by side, a sweep over micro-batches."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..devices import DeviceGraph
from ..errors import InputError
from ..graph import Graph
from ..problem import Evaluation, Problem
from ..simulate.schedules import pipeline_problem


def even_stages(graph: Graph, devices: DeviceGraph, p: int, *, profile: str = "default") -> np.ndarray:
    """p contiguous stages in topological order, balanced by training-step compute time,
    on the p fastest GPUs (all devices when there are fewer GPUs)."""
    from ..optimize.baselines import balanced_stages, op_work
    problem = Problem(graph, devices, profile=profile)
    work = op_work(problem)
    gpus = [i for i, d in enumerate(devices.devices) if d.kind == "gpu"]
    pool = gpus if len(gpus) >= p else list(range(len(devices)))
    if not 1 <= p <= min(len(pool), len(graph)):
        raise InputError(f"cannot make {p} stages from {len(pool)} devices and {len(graph)} ops", field="stages",
                         fix=f"Use 1 to {min(len(pool), len(graph))} stages")
    chosen = sorted(sorted(pool, key=lambda d: (work[:, d].sum(), d))[:p])
    cuts = balanced_stages(work[:, chosen])
    placement = np.empty(len(graph), dtype=np.int32)
    for s, d in enumerate(chosen):
        placement[cuts[s]:cuts[s + 1]] = d
    return placement


@dataclass(frozen=True)
class Stage:
    index: int
    device: str
    ops: int
    first_op: str
    last_op: str


def stages_of(placement: np.ndarray, graph: Graph, devices: DeviceGraph) -> list[Stage]:
    """Devices in order of their first op (the stage order the 1F1B schedule uses)."""
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    count: dict[int, int] = {}
    for i, d in enumerate(placement):
        d = int(d)
        first.setdefault(d, i)
        last[d] = i
        count[d] = count.get(d, 0) + 1
    order = sorted(first, key=first.get)
    return [Stage(s, devices.names[d], count[d], graph.ops[first[d]].name, graph.ops[last[d]].name)
            for s, d in enumerate(order)]


@dataclass
class ScheduleRun:
    schedule: str
    micro_batches: int
    evaluation: Evaluation
    stage_devices: list[int]

    @property
    def step_time(self) -> float:
        return self.evaluation.result.makespan

    @property
    def bubble_fraction(self) -> float:
        r = self.evaluation.result
        return float(np.mean(r.idle_fraction()[self.stage_devices])) if self.stage_devices else 0.0

    def stage_peak_memory(self) -> list[float]:
        return [float(self.evaluation.result.peak_memory[d]) for d in self.stage_devices]


def run_schedule(graph: Graph, devices: DeviceGraph, placement: np.ndarray, schedule: str, micro_batches: int,
                 *, trace: bool = False, **problem_kw) -> ScheduleRun:
    m = 1 if schedule == "thesis" else micro_batches
    problem = pipeline_problem(graph, devices, schedule, m, **problem_kw)
    ev = problem.simulate(placement, trace=trace)
    order = [devices.index[s.device] for s in stages_of(placement, graph, devices)]
    return ScheduleRun(schedule, m, ev, order)


def sweep(graph: Graph, devices: DeviceGraph, placement: np.ndarray, schedules=("gpipe", "1f1b"),
          micro_batches: list[int] | None = None, **problem_kw) -> list[dict]:
    """Step time, bubble and first-stage peak memory for every schedule and micro-batch count."""
    if micro_batches is None:
        micro_batches = [m for m in (1, 2, 4, 8, 16, 32, 64) if graph.batch_size % m == 0]
    rows = []
    for schedule in schedules:
        for m in micro_batches:
            run = run_schedule(graph, devices, placement, schedule, m, **problem_kw)
            peaks = run.stage_peak_memory()
            rows.append({"schedule": schedule, "micro_batches": m, "step_time_s": run.step_time,
                         "bubble_fraction": run.bubble_fraction,
                         "first_stage_peak_bytes": peaks[0] if peaks else 0.0,
                         "max_stage_peak_bytes": max(peaks) if peaks else 0.0,
                         "feasible": run.evaluation.feasible})
    return rows
