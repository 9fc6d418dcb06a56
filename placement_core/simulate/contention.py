"""What devices share, as the reference simulator charges it (docs/formats.md "collectives", "shared"); the
kernel (``_kernel.c``: ``stretched``, ``dispatch_channel``) computes the same, in the same order."""

from __future__ import annotations

from .model import ALLREDUCE


def shared_table(c) -> list[tuple[list[int], list[float], float, float]]:
    """A compiled problem's shared resources: per resource its devices, their demands, its capacity, and what
    a measured all-reduce over a member device adds to the demand."""
    if c.shared_ptr is None:
        return []
    coll = c.shared_coll if c.shared_coll is not None else [0.0] * (len(c.shared_ptr) - 1)
    return [(c.shared_dev[c.shared_ptr[r]:c.shared_ptr[r + 1]].tolist(),
             c.shared_demand[c.shared_ptr[r]:c.shared_ptr[r + 1]].tolist(), float(c.shared_cap[r]), float(coll[r]))
            for r in range(len(c.shared_ptr) - 1)]


def stretch(shared, d: int, length: float, until, now: float, coll_until=None) -> float:
    """A task of ``length`` starting on device d at ``now`` runs slower by demand / capacity of the most
    contended resource d shares, counting d, the devices whose task ends after now (``until``) and, at a
    resource's collective demand each, the devices a measured all-reduce still runs over (``coll_until``);
    with nothing shared, ``length`` itself."""
    factor = 1.0
    for devs, demand, capacity, coll in shared:
        if d not in devs:
            continue
        total = 0.0
        for m, w in zip(devs, demand):
            if m == d or until[m] > now:
                total += w
            if coll > 0.0 and coll_until[m] > now:
                total += coll
        if total > capacity and total / capacity > factor:
            factor = total / capacity
    return length * factor if factor > 1.0 else length


def note_collective(ring, xfer, place, coll_until, end: float) -> None:
    """A message starting: when it is a measured all-reduce, the devices it runs over (its members') hold a
    share of their resources until ``end``."""
    _, direction, op, _, _, _ = xfer
    measured = ring.measured(op) if direction == ALLREDUCE else None
    for m in measured[0] if measured is not None else ():
        coll_until[place[m]] = max(coll_until[place[m]], end)


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
