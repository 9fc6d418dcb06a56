"""What devices share, as the reference simulator charges it (docs/formats.md "collectives", "shared"); the
kernel (``_kernel.c``: ``stretched``, ``dispatch_channel``) computes the same, in the same order."""

from __future__ import annotations

from .model import ALLREDUCE


def shared_table(c) -> list[tuple[list[int], list[float], float]]:
    """A compiled problem's shared resources: per resource its devices, their demands, its capacity."""
    if c.shared_ptr is None:
        return []
    return [(c.shared_dev[c.shared_ptr[r]:c.shared_ptr[r + 1]].tolist(),
             c.shared_demand[c.shared_ptr[r]:c.shared_ptr[r + 1]].tolist(), float(c.shared_cap[r]))
            for r in range(len(c.shared_ptr) - 1)]


def stretch(shared, d: int, length: float, until, now: float) -> float:
    """A task of ``length`` starting on device d at ``now`` runs slower by demand / capacity of the most
    contended resource d shares, counting d and the devices whose task ends after now (``until``); with
    nothing shared, ``length`` itself."""
    factor = 1.0
    for devs, demand, capacity in shared:
        if d not in devs:
            continue
        total = 0.0
        for m, w in zip(devs, demand):
            if m == d or until[m] > now:
                total += w
        if total > capacity and total / capacity > factor:
            factor = total / capacity
    return length * factor if factor > 1.0 else length


def transfer_length(c, ring, xfer, ch: int, place, until, now: float) -> float:
    """Seconds of message ``xfer`` (unit, direction, op, src, dst, bytes) on channel ``ch`` starting at ``now``:
    a measured all-reduce's curve time (shards.RingState.measured: the busy time when a member's device runs
    a task past now), else the channel's; at least the sender's minimum transfer."""
    _, direction, op, src, _, nbytes = xfer
    measured = ring.measured(op) if direction == ALLREDUCE else None
    if measured is None:
        return c.transfer_time(ch, nbytes, src)
    members, (alone, busy) = measured
    t = busy if any(until[place[m]] > now for m in members) else alone
    return max(t, float(c.min_transfer[src]))
