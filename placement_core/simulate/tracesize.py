"""How large a trace would be, worked out before it is made.

The traced (Python) simulator keeps every event in memory, then the Chrome trace holds each as a dict and
the file as one string: about 1 kB of memory and 160 bytes of JSON per event. Ten thousand batches of
ResNet-50 are 18 million events, which ran out of memory after minutes; the fast kernel's result (its
transfer count) gives the number of events exactly enough to refuse at once.
"""

from __future__ import annotations

from ..base.errors import InputError
from .model import SimResult

# About 1 GB of memory while tracing and a 160 MB file: as much as Perfetto's web UI opens comfortably.
MAX_TRACE_EVENTS = 1_000_000


def estimate_trace_events(problem, result: SimResult) -> int:
    """Events in ``chrome_trace`` for the placement that gave ``result`` (an untraced run of it).

    Every op task is a slice and a memory counter; every transfer a slice and two memory counters (sent,
    received); with a message overhead, also a send and a receive slice. Plus each device's counter at time 0
    and the track names. Under gpipe/1f1b the weights update once per step, not once per micro-batch.
    """
    s = problem.settings
    n, nd, nc = problem.n_ops, problem.n_devices, len(problem.devices.channels)
    units = s.units
    tasks = units * n
    if not s.forward_only:
        updates = int(problem.compiled.has_update.sum())
        tasks += units * n + (updates if s.update_per_step else units * updates)
    per_transfer = 3
    if any(d.message_overhead > 0 for d in problem.devices.devices):
        per_transfer += 2  # a send and a receive task on the devices (they change no memory)
    metadata = 3 + 2 * nd + nc
    return metadata + nd + 2 * tasks + per_transfer * int(result.transfers)


def check_trace_size(problem, result: SimResult, option: str = "--trace") -> None:
    """Refuse a trace above :data:`MAX_TRACE_EVENTS`, saying how many batches would fit."""
    events = estimate_trace_events(problem, result)
    if events <= MAX_TRACE_EVENTS:
        return
    s = problem.settings
    batches = max(s.batches, 1)
    fixed = 3 + 3 * problem.n_devices + len(problem.devices.channels)
    fit = max((MAX_TRACE_EVENTS - fixed) * batches // max(events - fixed, 1), 0)
    fix = (f"Trace at most {fit:,} batch(es) (--batches), or leave out {option}" if fit >= 1 else
           f"Even one batch is too much to trace; leave out {option}")
    raise InputError(f"the trace would hold about {events:,} events ({batches:,} batch(es)), more than the limit "
                     f"of {MAX_TRACE_EVENTS:,}", field=option, fix=fix)
