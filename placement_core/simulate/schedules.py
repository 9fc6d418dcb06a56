"""Pipeline schedules as priority rules over the device ready queues (so they fit any placement).

* ``thesis``: whole batches, a new one admitted when the input devices are
  idle, at most ``in_flight`` at a time (thesis §3.1.1); FIFO queues.
* ``gpipe``: the batch is split into m micro-batches, all admitted at once;
  every device runs any ready forward before any backward (micro-batches in
  order), and the weights are updated once, after the last backward.
* ``1f1b`` (PipeDream-flush): m micro-batches; backwards take precedence over
  forwards, and the device that is stage s of p (devices ordered by their
  first op) may hold at most p - s micro-batches whose backward has not
  finished there, which gives the warm-up / one-forward-one-backward / drain
  timeline and bounds the first stage's activations to p micro-batches.
* ``interleaved-1f1b`` (Megatron-LM's virtual stages): every device holds
  chunks of the network (the runs of its ops, or its single run cut into
  ``virtual_stages`` parts; :mod:`.pipeline_rules`); forwards go first, each
  device starts them in Megatron's order (micro-batches in groups of p through
  every chunk), backwards in the reverse chunk order, and a device may hold
  Megatron's warm-up plus one (micro-batch, chunk) pairs. The oldest
  unfinished micro-batch is never held back (progress on any placement).
* ``zb-h1`` (Qi et al., 2023): the backward is split into B (input gradient,
  on the critical path) and W (weight gradient, which nothing downstream
  waits for). Stage s of p runs W before F before B, may hold p - s
  micro-batches before their B (1F1B's warm-up), and runs micro-batch u's W
  only once its B of micro-batch min(u + s, m - 1) is done, so the deferred Ws
  fill the tail bubble while at most p micro-batches wait for their W.

For p equal contiguous stages with free communication and updates gpipe and
1f1b give the textbook step time (m + p - 1)(t_f + t_b) and bubble
(p - 1)/(m + p - 1); interleaved-1f1b on p V chunks placed round-robin
m (t_f + t_b) + (p - 1)(t_f + t_b)/V when m is a multiple of p; zb-h1
m (t_f + t_B + t_W) + (p - 1)(t_f + t_B - t_W) when t_W <= t_f, t_B
(tests/test_pipeline_schedules.py).
"""

from __future__ import annotations

import numpy as np

from ..base.errors import InputError
from ..model.graph import Graph
from .model import (ADMIT_EAGER, ADMIT_THESIS, BWD, FWD, SCHED_INTERLEAVED, SCHED_STATIC, SCHED_ZB, UPD, WGT,
                    SimSettings, check_count)
from .pipeline_rules import stage_order

SCHEDULES = ("thesis", "gpipe", "1f1b", "interleaved-1f1b", "zb-h1")
PIPELINES = SCHEDULES[1:]  # the schedules that split a batch into micro-batches
MAX_VIRTUAL_STAGES = 64


def micro_batch_graph(graph: Graph, micro_batches: int) -> Graph:
    """The network at the micro-batch size (the batch must split evenly)."""
    if micro_batches < 1:
        raise InputError(f"micro-batches must be at least 1, got {micro_batches}", field="micro_batches")
    if graph.batch_size % micro_batches:
        raise InputError(f"batch size {graph.batch_size} does not split into {micro_batches} equal micro-batches",
                         field="micro_batches", fix="Pick a divisor of the batch size (or change --batch-size)")
    return graph.with_batch_size(graph.batch_size // micro_batches)


def check_virtual_stages(schedule: str, virtual_stages) -> int:
    """``virtual_stages`` as an int, refused where it is not 1..64 or given to a schedule without chunks."""
    v = virtual_stages
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 1 <= v <= MAX_VIRTUAL_STAGES:
        raise InputError(f"virtual stages must be a whole number from 1 to {MAX_VIRTUAL_STAGES}, got {v!r}",
                         field="virtual_stages", fix="Use e.g. 2 (two chunks per device)")
    if v > 1 and schedule != "interleaved-1f1b":
        raise InputError(f"virtual stages belong to interleaved-1f1b, not {schedule}", field="virtual_stages",
                         fix="Add --schedule interleaved-1f1b, or leave --virtual-stages out")
    return int(v)


def schedule_settings(schedule: str, n_ops: int, *, micro_batches: int = 1, batches: int = 1, in_flight: int = 1,
                      forward_only: bool = False, virtual_stages: int = 1) -> SimSettings:
    """SimSettings for a schedule. ``batches`` and ``in_flight`` count whole batches (ProblemSpec's); the
    simulator's units are those batches under the thesis scheme, the micro-batches of one batch under a
    pipeline schedule."""
    if schedule == "thesis":
        if micro_batches != 1:
            raise InputError("the thesis scheme runs whole batches; micro-batches need a pipeline schedule "
                             "(" + ", ".join(PIPELINES) + ")", field="micro_batches")
        check_virtual_stages(schedule, virtual_stages)
        return SimSettings(units=check_count(batches, "batches"), units_in_flight=check_count(in_flight, "in_flight"),
                           forward_only=forward_only, admission=ADMIT_THESIS)
    if schedule not in SCHEDULES:
        raise InputError(f"unknown schedule {schedule!r}", field="schedule", fix="Use " + ", ".join(SCHEDULES))
    virtual_stages = check_virtual_stages(schedule, virtual_stages)
    if batches != 1:
        raise InputError(f"a {schedule} step ends with a flush, so batches do not overlap; simulate one batch",
                         field="batches", fix="Use --batches 1 (the time per batch is the same for every batch)")
    m = micro_batches
    common = dict(units=m, units_in_flight=m, forward_only=forward_only, admission=ADMIT_EAGER, update_per_step=True,
                  micro_batches=m, schedule=schedule)
    if schedule == "interleaved-1f1b":  # priorities and caps come from each placement's chunks
        return SimSettings(**common, kind=SCHED_INTERLEAVED, virtual_stages=virtual_stages)
    units = np.arange(m, dtype=float)[:, None]
    if schedule == "zb-h1":
        prio = np.zeros((m, 4, n_ops))
        prio[:, WGT, :] = units
        prio[:, FWD, :] = m + units
        prio[:, BWD, :] = 2 * m + units
        prio[:, UPD, :] = 3 * m
        return SimSettings(**common, priority=prio, stage_caps=True, kind=SCHED_ZB)
    prio = np.zeros((m, 3, n_ops))
    if schedule == "gpipe":
        prio[:, FWD, :] = units
        prio[:, BWD, :] = m + units
    else:
        prio[:, BWD, :] = units
        prio[:, FWD, :] = m + units
    prio[:, UPD, :] = 2 * m
    return SimSettings(**common, priority=prio, stage_caps=(schedule == "1f1b"), kind=SCHED_STATIC)


def stage_caps(place: list[int], n_devices: int) -> list[int]:
    """1F1B in-flight limits: used devices in order of their first op are stages 0..p-1; stage s holds p - s."""
    order = stage_order(place)
    caps = [0] * n_devices
    for s, d in enumerate(order):
        caps[d] = len(order) - s
    return caps
