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

For p equal contiguous stages with free communication and updates both give
the textbook step time (m + p - 1)(t_f + t_b) and bubble (p - 1)/(m + p - 1).
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ..graph import Graph
from .model import ADMIT_EAGER, ADMIT_THESIS, BWD, FWD, UPD, SimSettings

SCHEDULES = ("thesis", "gpipe", "1f1b")


def micro_batch_graph(graph: Graph, micro_batches: int) -> Graph:
    """The network at the micro-batch size (the batch must split evenly)."""
    if micro_batches < 1:
        raise InputError(f"micro-batches must be at least 1, got {micro_batches}", field="micro_batches")
    if graph.batch_size % micro_batches:
        raise InputError(f"batch size {graph.batch_size} does not split into {micro_batches} equal micro-batches",
                         field="micro_batches", fix="Pick a divisor of the batch size (or change --batch-size)")
    return graph.with_batch_size(graph.batch_size // micro_batches)


def schedule_settings(schedule: str, n_ops: int, *, micro_batches: int = 1, batches: int = 1, in_flight: int = 1,
                      forward_only: bool = False) -> SimSettings:
    """SimSettings for a schedule; for gpipe/1f1b the units are the micro-batches of one batch."""
    if schedule == "thesis":
        if micro_batches != 1:
            raise InputError("the thesis scheme runs whole batches; micro-batches need --schedule gpipe or 1f1b",
                             field="micro_batches")
        return SimSettings(batches=batches, in_flight=in_flight, forward_only=forward_only, admission=ADMIT_THESIS)
    if schedule not in SCHEDULES:
        raise InputError(f"unknown schedule {schedule!r}", field="schedule", fix="Use thesis, gpipe or 1f1b")
    if batches != 1:
        raise InputError(f"a {schedule} step ends with a flush, so batches do not overlap; simulate one batch",
                         field="batches", fix="Use --batches 1 (the time per batch is the same for every batch)")
    m = micro_batches
    prio = np.zeros((m, 3, n_ops))
    units = np.arange(m, dtype=float)[:, None]
    if schedule == "gpipe":
        prio[:, FWD, :] = units
        prio[:, BWD, :] = m + units
    else:
        prio[:, BWD, :] = units
        prio[:, FWD, :] = m + units
    prio[:, UPD, :] = 2 * m
    return SimSettings(batches=m, in_flight=m, forward_only=forward_only, admission=ADMIT_EAGER,
                       update_per_step=True, priority=prio, stage_caps=(schedule == "1f1b"), micro_batches=m,
                       schedule=schedule)


def stage_caps(place: list[int], n_devices: int) -> list[int]:
    """1F1B in-flight limits: used devices in order of their first op are stages 0..p-1; stage s holds p - s."""
    first: dict[int, int] = {}
    for i, d in enumerate(place):
        first.setdefault(d, i)
    order = sorted(first, key=first.get)
    caps = [0] * n_devices
    for s, d in enumerate(order):
        caps[d] = len(order) - s
    return caps
