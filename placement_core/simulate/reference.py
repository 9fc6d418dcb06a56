"""The event simulator in plain Python: the readable reference, and the one that traces.

Its semantics (tasks, messages, send and receive tasks for a device's message overhead, FIFO-or-priority
queues, units (batches or micro-batches) in flight, memory, measured all-reduces and shared resources) are
written out in docs/design.md §5 (after thesis §3.1 Algorithms 4-7 and Placeto A.5) and docs/formats.md. The
compiled kernel (``_kernel.c``) implements exactly this; tests compare them event for event.
"""

from __future__ import annotations

import heapq

import numpy as np

from .messages import messages
from .model import (ADMIT_THESIS, ALLREDUCE, BWD, DIRECTIONS, FWD, PHASES, SCHED_INTERLEAVED, SCHED_ZB, UPD, WGT,
                    Compiled, SimResult, SimSettings, TraceEvent)
from .pipeline_rules import Gates, chunks, interleaved_caps, interleaved_priority, stage_index
from .contention import Pacer, transfer_length
from .schedules import stage_caps
from .shards import RingState

_TASK, _XFER = 0, 1


def simulate(c: Compiled, placement: np.ndarray, s: SimSettings, trace: bool = False,
             rings: list | None = None) -> SimResult:
    """``rings``: the all-reduces of an expanded sharded placement (:class:`.shards.RingState`)."""
    n, nd, U = c.n_ops, c.n_dev, s.units
    place = [int(x) for x in placement]
    # Per op: [(parent, activation bytes, gradient bytes)], [(child, bytes, gradient bytes)].
    par = [list(zip(c.par_idx[c.par_ptr[i]:c.par_ptr[i + 1]].tolist(),
                    c.par_bytes[c.par_ptr[i]:c.par_ptr[i + 1]].tolist(),
                    c.par_grad[c.par_ptr[i]:c.par_ptr[i + 1]].tolist())) for i in range(n)]
    chi = [list(zip(c.ch_idx[c.ch_ptr[i]:c.ch_ptr[i + 1]].tolist(),
                    c.ch_bytes[c.ch_ptr[i]:c.ch_ptr[i + 1]].tolist(),
                    c.ch_grad[c.ch_ptr[i]:c.ch_ptr[i + 1]].tolist())) for i in range(n)]
    has_upd = [bool(x) for x in c.has_update]
    training = not s.forward_only
    n_ph = s.phases
    zb = s.kind == SCHED_ZB
    has_w = [zb and bool(x) for x in c.has_w]  # zb-h1: ops whose backward has a weight-gradient (W) task
    prio = None if s.priority is None else np.asarray(s.priority, dtype=float).ravel()
    cap = None if s.device_cap is None else [int(x) for x in s.device_cap]
    if s.stage_caps:
        cap = stage_caps(place, nd)

    def dur(phase: int, op: int) -> float:
        k = op * nd + place[op]
        if phase == BWD:  # under zb-h1 the input-gradient part only
            return float(c.bwd[k] - c.bwd_w[k]) if has_w[op] else float(c.bwd[k])
        return float((c.fwd if phase == FWD else c.upd if phase == UPD else c.bwd_w)[k])

    interleaved = None
    if s.kind == SCHED_INTERLEAVED:
        work = [float(c.fwd[i * nd + place[i]] + c.bwd[i * nd + place[i]]) for i in range(n)]
        interleaved = chunks(place, work, s.virtual_stages, nd)
        cap = interleaved_caps(stage_index(place, nd), interleaved[3], U)
        prio = interleaved_priority(place, interleaved[1], interleaved[3], U, n_ph).ravel()
    gates = Gates(place, cap, U, training=training, interleaved=interleaved, zb=zb)
    ops_of: list[list[int]] = [[] for _ in range(nd)]
    for i in range(n):
        ops_of[place[i]].append(i)

    fwd_dest, local_children, bwd_dest, grad_out, grad_in = messages(place, par, chi)
    ovh = [float(x) for x in c.msg_overhead]
    has_ovh = any(o > 0.0 for o in ovh)
    ovh_base = U * n_ph * n  # task ids from here on are message overheads: ovh_base + 2 * message + (0 send | 1 recv)

    def tid(u: int, phase: int, op: int) -> int:
        return (u * n_ph + phase) * n + op

    ring = RingState((rings or []) if training else [], U, s.update_per_step)
    ring_of = ring.of
    dep = [0] * (U * n_ph * n)
    unit_left = [0] * U
    for u in range(U):
        for i in range(n):
            dep[tid(u, FWD, i)] = len(par[i])
            dep[tid(u, BWD, i)] = 1 + len(chi[i])
            dep[tid(u, UPD, i)] = 1 if i in ring_of else U if s.update_per_step else 1
            if n_ph > WGT:
                dep[tid(u, WGT, i)] = 2  # its own B, and its gate (pipeline_rules.Gates.done)
        unit_left[u] = n + (n + sum(has_w) + (0 if s.update_per_step else sum(has_upd)) if training else 0)
    step_updates_left = sum(has_upd) if (training and s.update_per_step) else 0

    running, until = [-1] * nd, [0.0] * nd  # until: when each device's task ends
    dev_q: list[list] = [[] for _ in range(nd)]
    chan_busy_now, chan_q = [False] * c.n_ch, [[] for _ in range(c.n_ch)]
    seq = 0
    events: list = []
    xfers: list[tuple] = []  # (unit, direction, op, src, dst, bytes)
    xprio: list[float] = []  # each message's priority (its producing task's)

    busy, ch_bytes, ch_busy = np.zeros(nd), np.zeros(c.n_ch), np.zeros(c.n_ch)
    mem = np.zeros(nd)
    for i in range(n):
        mem[place[i]] += c.static_mem[i]
    peak = mem.copy()
    act_refs = [0] * (U * n)
    recv: dict[tuple[int, int, int], list] = {}  # (u, op, dev) -> [refs, bytes]
    trace_events: list[TraceEvent] | None = [] if trace else None
    timeline: list | None = [] if trace else None
    pacer = Pacer(c, ring, place, until, events, busy, ch_busy, trace_events)  # shared resources (contention.py)

    def note_memory(t: float, devs) -> None:
        for d in devs:
            if mem[d] > peak[d]:
                peak[d] = mem[d]
            if timeline is not None:
                timeline.append((t, d, float(mem[d])))

    def task_prio(task: int) -> float:
        return 0.0 if prio is None else float(prio[task])

    def make_ready(task: int) -> None:
        nonlocal seq
        op = task % n
        heapq.heappush(dev_q[place[op]], (task_prio(task), seq, task))
        seq += 1

    def satisfy(task: int) -> None:
        dep[task] -= 1
        if dep[task] == 0:
            make_ready(task)

    def send(u: int, direction: int, op: int, src: int, dst: int, nbytes: float, p: float) -> None:
        nonlocal seq
        xfers.append((u, direction, op, src, dst, nbytes))
        xprio.append(p)
        if has_ovh and ovh[src] > 0.0:
            overhead_ready(len(xfers) - 1, 0, src)
            return
        ch = int(c.route[src * nd + dst])
        heapq.heappush(chan_q[ch], (p, seq, len(xfers) - 1))
        seq += 1

    def to_channel(x: int) -> None:
        nonlocal seq
        _, _, _, src, dst, _ = xfers[x]
        ch = int(c.route[src * nd + dst])
        heapq.heappush(chan_q[ch], (xprio[x], seq, x))
        seq += 1

    def overhead_ready(x: int, r: int, d: int) -> None:
        """The send (r = 0, on the sender) or receive (r = 1, on the receiver) task of message x."""
        nonlocal seq
        heapq.heappush(dev_q[d], (xprio[x], seq, ovh_base + 2 * x + r))
        seq += 1

    def ring_complete(ru: int, members) -> None:
        for v in members:
            if has_upd[v]:
                satisfy(tid(ru, UPD, v))

    def deliver(x: int) -> None:
        """Message x is on its destination: its consumers there may run."""
        u, direction, op, src, dst, nbytes = xfers[x]
        if direction == ALLREDUCE:
            ring_complete(u, ring.delivered(u, op))
        elif direction == FWD:
            for ch, _, _ in chi[op]:
                if place[ch] == dst:
                    satisfy(tid(u, FWD, ch))
        else:
            for pp, _, _ in par[op]:
                if place[pp] == dst:
                    satisfy(tid(u, BWD, pp))

    def overhead_done(task: int) -> None:
        x, r = divmod(task - ovh_base, 2)
        _, _, _, src, dst, _ = xfers[x]
        running[dst if r else src] = -1
        pacer.task_ended(dst if r else src)
        if r:
            deliver(x)
        else:
            to_channel(x)

    def task_done(task: int, t: float) -> None:
        if task >= ovh_base:
            overhead_done(task)
            return
        u, rest = divmod(task, n_ph * n)
        phase, op = divmod(rest, n)
        d = place[op]
        running[d] = -1
        pacer.task_ended(d)
        p = task_prio(task)
        if phase == FWD:
            refs = len(local_children[op]) + len(fwd_dest[op])
            act_refs[u * n + op] = refs
            if refs:
                mem[d] += c.out_bytes[op]
            if not training:
                _release_inputs(u, op, d)
            for ch in local_children[op]:
                satisfy(tid(u, FWD, ch))
            for dst, b in fwd_dest[op].items():
                send(u, FWD, op, d, dst, b, p)
            if training:
                satisfy(tid(u, BWD, op))
            gates.done(u, FWD, op)
        elif phase == BWD:
            if has_w[op]:  # zb-h1: the output gradient and the inputs stay for the W task
                mem[d] += grad_out[op]
            else:
                mem[d] += grad_out[op] - grad_in[op]
                _release_inputs(u, op, d)
            for pp, _, _ in par[op]:
                if place[pp] == d or bwd_dest[op][place[pp]] == 0.0:
                    satisfy(tid(u, BWD, pp))
            for dst, b in bwd_dest[op].items():
                if b > 0.0:
                    send(u, BWD, op, d, dst, b, p)
            if has_w[op]:
                satisfy(tid(u, WGT, op))
            elif op in ring_of:
                ru, members, msgs = ring.member_done(u, op)
                ring_complete(ru, members if not msgs else ())
                for src, dst, nbytes in msgs:
                    send(ru, ALLREDUCE, members[0], src, dst, nbytes, p)
            elif has_upd[op]:
                satisfy(tid(0, UPD, op) if s.update_per_step else tid(u, UPD, op))
            for v in gates.done(u, BWD, op):
                for i in ops_of[d]:
                    if has_w[i]:
                        satisfy(tid(v, WGT, i))
        elif phase == WGT:
            mem[d] -= grad_in[op]
            _release_inputs(u, op, d)
            if has_upd[op]:
                satisfy(tid(0, UPD, op) if s.update_per_step else tid(u, UPD, op))
        else:
            if s.update_per_step:
                nonlocal_step[0] -= 1
                note_memory(t, (d,))
                return
        unit_left[u] -= 1
        if unit_left[u] == 0:
            state[0] -= 1  # in flight
        note_memory(t, (d,))

    def _release_inputs(u: int, op: int, d: int) -> None:
        for pp, _, _ in par[op]:
            if place[pp] == d:
                k = u * n + pp
                act_refs[k] -= 1
                if act_refs[k] == 0:
                    mem[d] -= c.out_bytes[pp]
            else:
                entry = recv[(u, pp, d)]
                entry[0] -= 1
                if entry[0] == 0:
                    mem[d] -= entry[1]

    def xfer_done(x: int, t: float) -> None:
        u, direction, op, src, dst, nbytes = xfers[x]
        chan_busy_now[int(c.route[src * nd + dst])] = False
        pacer.transfer_ended(int(c.route[src * nd + dst]), xfers[x])
        if direction == FWD:
            k = u * n + op
            act_refs[k] -= 1
            if act_refs[k] == 0:
                mem[src] -= c.out_bytes[op]
            recv[(u, op, dst)] = [sum(place[ch] == dst for ch, _, _ in chi[op]), nbytes]
            mem[dst] += nbytes
        elif direction == BWD:
            mem[src] -= nbytes
            mem[dst] += nbytes
        # memory moves on arrival (a ring's gradients stay resident on both ends); with a receive task the
        # consumers wait for it
        if has_ovh and ovh[dst] > 0.0:
            overhead_ready(x, 1, dst)
        else:
            deliver(x)
        note_memory(t, (src, dst))

    def idle(d: int) -> bool:
        return running[d] < 0 and not dev_q[d]

    input_devs = sorted({place[i] for i in c.input_ops.tolist()})
    state = [0]  # units in flight
    nonlocal_step = [step_updates_left]
    admitted = 0

    def admit(t: float) -> None:
        nonlocal admitted
        while admitted < U and state[0] < s.units_in_flight:
            if s.admission == ADMIT_THESIS and admitted > 0 and not all(idle(d) for d in input_devs):
                break
            for i in c.input_ops.tolist():
                make_ready(tid(admitted, FWD, i))
            admitted += 1
            state[0] += 1

    def blocked(task: int) -> bool:
        """Held back by the schedule's gates (:class:`.pipeline_rules.Gates`)."""
        if task >= ovh_base:
            return False
        u, rest = divmod(task, n_ph * n)
        return gates.blocked(u, *divmod(rest, n), next((v for v in range(U) if unit_left[v] > 0), U))

    def task_length(d: int, task: int) -> float:
        if task >= ovh_base:
            return ovh[d]  # a send task runs on the sender, a receive task on the receiver: d either way
        return dur(*divmod(task % (n_ph * n), n))

    def dispatch(t: float, instant_only: bool = False) -> int:
        """Start the best ready item on every idle device and channel; returns how many started.

        ``instant_only`` starts only zero-duration items (see ``settle``)."""
        nonlocal seq
        started = 0

        def start_task(d: int, task: int, base: float) -> float:
            nonlocal seq, started
            pace, length = pacer.task_length(d, base, t)
            pacer.task_started(d, base, pace, t, (_TASK, task))  # before its trace event
            running[d] = task
            until[d] = t + length
            busy[d] += length
            heapq.heappush(events, (t + length, seq, _TASK, task))
            seq += 1
            started += 1
            return length

        for d in range(nd):
            if running[d] >= 0 or not dev_q[d]:
                continue
            stash = []
            chosen = None
            while dev_q[d]:
                item = heapq.heappop(dev_q[d])
                if blocked(item[2]) or (instant_only and task_length(d, item[2]) > 0):
                    stash.append(item)
                    continue
                chosen = item
                break
            for item in stash:
                heapq.heappush(dev_q[d], item)
            if chosen is None:
                continue
            task = chosen[2]
            if task >= ovh_base:
                x, r = divmod(task - ovh_base, 2)
                length = start_task(d, task, ovh[d])
                if trace_events is not None:
                    u, direction, op, src, dst, nbytes = xfers[x]
                    trace_events.append(TraceEvent("recv" if r else "send", c.op_names[op], u, DIRECTIONS[direction],
                                                   c.dev_names[d], t, t + length, c.dev_names[src],
                                                   c.dev_names[dst], nbytes))
                continue
            u, rest = divmod(task, n_ph * n)
            phase, op = divmod(rest, n)
            gates.start(u, phase, op)
            length = start_task(d, task, dur(phase, op))
            if trace_events is not None:
                trace_events.append(TraceEvent("op", c.op_names[op], u, PHASES[phase], c.dev_names[d],
                                               t, t + length))
        for ch in range(c.n_ch):
            if chan_busy_now[ch] or not chan_q[ch]:
                continue
            if instant_only and transfer_length(c, ring, xfers[chan_q[ch][0][2]], ch, place, until, t) > 0:
                continue
            _, _, x = heapq.heappop(chan_q[ch])
            u, direction, op, src, dst, nbytes = xfers[x]
            length = transfer_length(c, ring, xfers[x], ch, place, until, t)
            pacer.collective_started(ch, x, xfers[x], t, length, (_XFER, x))  # before its trace event
            chan_busy_now[ch] = True
            ch_busy[ch] += length
            ch_bytes[ch] += nbytes
            heapq.heappush(events, (t + length, seq, _XFER, x))
            seq += 1
            started += 1
            if trace_events is not None:
                trace_events.append(TraceEvent("transfer", c.op_names[op], u, DIRECTIONS[direction],
                                               c.ch_names[ch], t, t + length, c.dev_names[src],
                                               c.dev_names[dst], nbytes))
        return started

    def handle_events(t: float) -> None:
        while events and events[0][0] == t:
            _, _, kind, ident = heapq.heappop(events)
            if kind == _TASK:
                task_done(ident, t)
            else:
                xfer_done(ident, t)
        admit(t)

    def settle(t: float) -> None:
        """With priorities, let zero-duration work (views, empty messages) finish first so that
        everything that becomes ready at instant t competes by priority, not by event order."""
        if prio is None:
            return
        while dispatch(t, instant_only=True):
            handle_events(t)

    now = 0.0
    if timeline is not None:
        for d in range(nd):
            timeline.append((0.0, d, float(mem[d])))
    admit(now)
    settle(now)
    dispatch(now)
    pacer.reprice(now, xfers)
    while events:
        now = events[0][0]
        handle_events(now)
        settle(now)
        dispatch(now)
        pacer.reprice(now, xfers)
    if admitted < U or any(unit_left) or nonlocal_step[0]:
        raise RuntimeError("simulation stalled: a task never became ready (this is a bug)")
    return SimResult(makespan=now, batches=s.batches, busy=busy, peak_memory=peak, channel_bytes=ch_bytes,
                     channel_busy=ch_busy, transfers=len(xfers), trace=trace_events,
                     memory_timeline=timeline)
