"""Where a pipeline's bubble comes from: the schedule itself, unequal stages, weight updates, transfers.

The idle time of the stage devices (summed over them) is split by simulating the same placement three
times: as it is, with free transfers (and message overheads), and with free transfers and updates too
(the ideal pipeline). What the schedule alone costs is its closed form with p equal stages of the
stages' mean times; what the ideal run idles beyond that is the imbalance between the stages.
"""

from __future__ import annotations

import numpy as np

from ..model.devices import DeviceGraph
from ..model.graph import Graph
from .closed_forms import bubble_time
from .pipeline import IdealPipelineProfile, ScheduleRun, run_schedule


def stage_idle(run: ScheduleRun) -> float:
    """Seconds the stage devices sit idle in the step, summed over them."""
    r = run.evaluation.result
    return float(sum(r.makespan - r.busy[d] for d in run.stage_devices))


def stage_times(graph: Graph, devices: DeviceGraph, placement, stage_devices: list[int], *, schedule: str = "gpipe",
                micro_batches: int = 1, profile="default", **cost_kw) -> dict:
    """Mean forward, backward and weight-gradient time per micro-batch of a stage (its ops on its device)."""
    from ..cost.profiles import get_profile
    from ..simulate.schedules import micro_batch_graph
    unit = graph if schedule == "thesis" else micro_batch_graph(graph, micro_batches)
    prof = get_profile(profile, **cost_kw) if isinstance(profile, str) else profile
    costs = prof.arrays(unit, devices)
    place = np.asarray(placement)
    share = np.array([o.weight_grad_share for o in unit.ops])
    rows = []
    for d in stage_devices:
        on = place == d
        rows.append((costs.fwd[on, d].sum(), costs.bwd[on, d].sum(), (costs.bwd[on, d] * share[on]).sum()))
    t_f, t_b, t_w = (float(np.mean(col)) for col in zip(*rows)) if rows else (0.0, 0.0, 0.0)
    return {"t_f": t_f, "t_b": t_b, "t_w": t_w}


def bubble_breakdown(graph: Graph, devices: DeviceGraph, placement, schedule: str, micro_batches: int, *,
                     virtual_stages: int = 1, profile="default", penalty: str = "thesis", **cost_kw) -> dict:
    """The stage devices' idle seconds in one step, split into schedule, imbalance, updates and transfers
    (each also as a share of the whole); ``closed_form_s`` is the schedule's bubble for one equal stage."""
    from ..cost.profiles import get_profile
    base = get_profile(profile, **cost_kw) if isinstance(profile, str) else profile
    kw = dict(virtual_stages=virtual_stages, penalty=penalty)
    real = run_schedule(graph, devices, placement, schedule, micro_batches, profile=base, **kw)
    no_comm = run_schedule(graph, devices, placement, schedule, micro_batches,
                           profile=IdealPipelineProfile(base, free_updates=False), **kw)
    ideal = run_schedule(graph, devices, placement, schedule, micro_batches, profile=IdealPipelineProfile(base), **kw)
    p = len(real.stage_devices)
    t = stage_times(graph, devices, placement, real.stage_devices, schedule=schedule, micro_batches=micro_batches,
                    profile=base)
    v = real.virtual_stages if schedule == "interleaved-1f1b" else 1
    one = bubble_time(schedule, p, t["t_f"], t["t_b"], v=v, t_w=t["t_w"])
    parts = {"schedule_s": p * one, "imbalance_s": stage_idle(ideal) - p * one,
             "updates_s": stage_idle(no_comm) - stage_idle(ideal), "transfers_s": stage_idle(real) - stage_idle(no_comm)}
    idle = stage_idle(real)
    out = {"idle_s": idle, "closed_form_s": one, "stages": p, **t, **parts}
    for key in list(parts):
        out[key.replace("_s", "_share")] = parts[key] / idle if idle > 0 else 0.0
    return out


# -- the bubble drawn, step by step (the Pipeline page's animation) -----------------------------------

def idle_intervals(blocks, n_devices: int, end: float) -> list[tuple[int, float, float]]:
    """(row, start, end) of every gap between the work blocks of a device row, from 0 to ``end``: the bubble.
    ``blocks`` are :func:`.pipeline.schedule_blocks` blocks; rows from ``n_devices`` on are links."""
    out = []
    for row in range(n_devices):
        t = 0.0
        for b in sorted((b for b in blocks if b.row == row and b.kind == "op"), key=lambda b: b.start):
            if b.start > t:
                out.append((row, t, b.start))
            t = max(t, b.end)
        if end > t:
            out.append((row, t, end))
    return out


def until(blocks, t: float) -> list:
    """The blocks as they stand at time ``t``: those begun, cut at ``t``."""
    from dataclasses import replace
    return [b if b.end <= t else replace(b, end=t) for b in blocks if b.start < t]


def frame_times(end: float, frames: int) -> list[float]:
    """``frames`` evenly spaced instants from the first step to ``end`` (the last frame is the whole step)."""
    frames = max(1, int(frames))
    return [end * (k + 1) / frames for k in range(frames)]
