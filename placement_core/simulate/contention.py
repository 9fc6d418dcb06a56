"""What devices share, as the reference simulator charges it (docs/formats.md "collectives", "shared"); the
kernel (``_kernel.c``: ``slowdown``, ``paced``, ``ar_pace``, ``reprice``) computes the same, in the same order.

Processor sharing: a task's pace is set by what runs beside it *now*, not by what it found when it started.
A task on a device that shares a resource runs slower by demand / capacity of its most contended resource;
a measured all-reduce runs at its busy curve's pace while a member's device computes and at its alone
curve's pace otherwise. At the end of every instant (after the events and the dispatch), every running
task and measured all-reduce whose pace changed gets its remaining work re-timed and its end event moved.
"""

from __future__ import annotations

import heapq
from dataclasses import replace

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


def slowdown(shared, d: int, until, now: float, coll_on) -> float:
    """How many times slower than alone device d computes at ``now``: demand / capacity of the most contended
    resource d shares, counting d, the devices whose task ends after now (``until``) and, at a resource's
    collective demand each, the devices a measured all-reduce runs over (``coll_on``); 1 with nothing shared."""
    factor = 1.0
    for devs, demand, capacity, coll in shared:
        if d not in devs:
            continue
        total = 0.0
        for m, w in zip(devs, demand):
            if m == d or until[m] > now:
                total += w
            if coll > 0.0 and coll_on[m] > 0:
                total += coll
        if total > capacity and total / capacity > factor:
            factor = total / capacity
    return factor


def collective_pace(c, ring, xfer, place, until, now: float):
    """A measured all-reduce's (work, pace, seconds) at ``now``: its alone time, how many times slower it runs
    while a member's device computes (busy / alone), and the seconds it would take at that pace (the busy
    or the alone curve's time); each at least the sender's minimum transfer. None: not a measured one."""
    _, direction, op, src, _, _ = xfer
    measured = ring.measured(op) if direction == ALLREDUCE else None
    if measured is None:
        return None
    members, (alone, busy) = measured
    floor = float(c.min_transfer[src])
    alone, busy = max(alone, floor), max(busy, floor)
    if any(until[place[m]] > now for m in members) and alone > 0.0:
        return alone, busy / alone, busy
    return alone, 1.0, alone


def transfer_length(c, ring, xfer, ch: int, place, until, now: float) -> float:
    """Seconds of message ``xfer`` (unit, direction, op, src, dst, bytes) on channel ``ch`` starting at ``now``:
    a measured all-reduce's curve time at its pace now (:func:`collective_pace`), else the channel's."""
    measured = collective_pace(c, ring, xfer, place, until, now)
    return c.transfer_time(ch, xfer[5], xfer[3]) if measured is None else measured[2]


class Pacer:
    """The reference's processor sharing (module docstring): what runs on each device and channel, its work
    left at full pace as of ``mark``, its pace, and how to move its end event. Devices are resources 0 ..
    nd - 1, channel j is nd + j (the kernel's numbering)."""

    def __init__(self, c, ring, place, until, events, busy, ch_busy, trace):
        self.c, self.ring, self.place, self.until, self.events = c, ring, place, until, events
        self.busy, self.ch_busy, self.trace = busy, ch_busy, trace
        self.shared = shared_table(c)
        nd = c.n_dev
        self.nd = nd
        self.in_shared = [any(d in devs for devs, _, _, _ in self.shared) for d in range(nd)]
        self.on = bool(self.shared) or any(t is not None for _, _, t in ring.rings)
        self.coll_on = [0] * nd
        slots = nd + c.n_ch
        self.event = [None] * slots  # the (kind, id) of the running item's end event; None: nothing paced
        self.work, self.mark, self.pace, self.end = [0.0] * slots, [0.0] * slots, [1.0] * slots, [0.0] * slots
        self.xfer = [None] * c.n_ch  # a channel's running measured all-reduce
        self.trace_at = [-1] * slots

    def task_length(self, d: int, length: float, now: float) -> tuple[float, float]:
        """(pace, seconds) of a task of ``length`` starting on device d."""
        f = slowdown(self.shared, d, self.until, now, self.coll_on) if self.shared else 1.0
        return f, (length * f if f > 1.0 else length)

    def task_started(self, d: int, length: float, pace: float, now: float, event) -> None:
        if self.shared and self.in_shared[d]:
            self.event[d], self.work[d], self.mark[d], self.pace[d] = event, length, now, pace
            self.trace_at[d] = len(self.trace) if self.trace is not None else -1

    def collective_started(self, ch: int, x: int, xfer, now: float, seconds: float, event) -> None:
        """A message starting on channel ch: a measured all-reduce is tracked for its pace, and holds a
        share of its members' devices while it runs (when it takes time)."""
        got = collective_pace(self.c, self.ring, xfer, self.place, self.until, now) if self.on else None
        if got is None:
            return
        r = self.nd + ch
        self.event[r], self.work[r], self.mark[r], self.pace[r], self.end[r] = event, got[0], now, got[1], now + seconds
        self.trace_at[r] = len(self.trace) if self.trace is not None else -1
        self.xfer[ch] = (x, seconds > 0.0)
        if self.shared and seconds > 0.0:
            for m in self.ring.measured(xfer[2])[0]:
                self.coll_on[self.place[m]] += 1

    def task_ended(self, d: int) -> None:
        self.event[d] = None

    def transfer_ended(self, ch: int, xfer) -> None:
        if self.xfer[ch] is None:
            return
        _, held = self.xfer[ch]
        self.xfer[ch], self.event[self.nd + ch] = None, None
        if self.shared and held:
            for m in self.ring.measured(xfer[2])[0]:
                self.coll_on[self.place[m]] -= 1

    def reprice(self, now: float, xfers) -> None:
        """Every running task and measured all-reduce whose pace changed: its work left re-timed, its end moved."""
        if not self.on:
            return
        if self.shared:
            for d in range(self.nd):
                if self.event[d] is None or not self.until[d] > now:
                    continue
                f = slowdown(self.shared, d, self.until, now, self.coll_on)
                if f != self.pace[d]:
                    end = self._move(d, f, now)
                    self.busy[d] += end - self.until[d]
                    self.until[d] = end
        for ch, running in enumerate(self.xfer):
            r = self.nd + ch
            if running is None or not self.end[r] > now:
                continue
            f = collective_pace(self.c, self.ring, xfers[running[0]], self.place, self.until, now)[1]
            if f != self.pace[r]:
                end = self._move(r, f, now)
                self.ch_busy[ch] += end - self.end[r]
                self.end[r] = end

    def _move(self, r: int, f: float, now: float) -> float:
        left = self.work[r] - (now - self.mark[r]) / self.pace[r]
        left = left if left > 0.0 else 0.0
        self.work[r], self.mark[r], self.pace[r] = left, now, f
        end = now + left * f
        kind, ident = self.event[r]
        for i, ev in enumerate(self.events):
            if ev[2] == kind and ev[3] == ident:
                self.events[i] = (end, ev[1], kind, ident)
                heapq.heapify(self.events)
                break
        if self.trace_at[r] >= 0:
            self.trace[self.trace_at[r]] = replace(self.trace[self.trace_at[r]], end=end)
        return end
