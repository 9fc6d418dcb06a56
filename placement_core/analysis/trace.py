"""Views of a simulated trace: Gantt rows and segments, the critical path, memory over time.

A trace is the list of :class:`~placement_core.simulate.TraceEvent` that
``Problem.simulate(placement, trace=True)`` returns in ``result.trace``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape

import numpy as np

from ..model.graph import Graph
from ..simulate import SimResult, TraceEvent
from ..simulate.model import OVERHEAD_KINDS  # a device's time on a message it sends or receives
from ..base.units import fmt_bytes, fmt_seconds

PHASE_ORDER = {"fwd": 0, "bwd": 1, "allreduce": 2, "update": 3}
KIND_ORDER = {"op": 0, "send": 1, "recv": 2, "transfer": 3}



def gantt_rows(device_names, channel_names) -> list[str]:
    """One row per device, then one per channel, in the device graph's order."""
    return list(device_names) + list(channel_names)


@dataclass
class GanttSegments:
    """Events of one (kind, batch, phase) group: drawn in one colour shade as one WebGL trace."""

    kind: str  # "op" | "transfer" | "send" | "recv"
    batch: int
    phase: str
    row: np.ndarray  # index into the rows of :func:`gantt_rows`
    start: np.ndarray  # seconds
    end: np.ndarray
    index: np.ndarray  # position of each event in the trace
    hover: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.index)


def event_label(e: TraceEvent) -> str:
    """The hover label of one trace event (Plotly HTML: names escaped, batches numbered from 1 as in the
    legend and the tables)."""
    op, res = escape(str(e.op), quote=False), escape(str(e.resource), quote=False)
    span = f"{fmt_seconds(e.start)} → {fmt_seconds(e.end)} ({fmt_seconds(e.end - e.start)})"
    batch = f"batch {e.batch + 1}"
    part = f" shard {e.shard + 1}/{e.shards}" if e.shard >= 0 else ""  # an op split over devices
    if e.kind == "op":
        return f"<b>{op}</b>{part} · {e.phase} · {batch}<br>{res}: {span}"
    what = {"fwd": "output", "allreduce": "weight gradients, ring all-reduce"}.get(e.phase, "gradients")
    src, dst = escape(str(e.src), quote=False), escape(str(e.dst), quote=False)
    if e.kind in OVERHEAD_KINDS:
        head = f"send to {dst}" if e.kind == "send" else f"receive from {src}"
        return (f"<b>{head}</b> (op {op}, {fmt_bytes(e.bytes)}) · {what} · {batch}"
                f"<br>{res}: message overhead, {span}")
    return (f"<b>{op}</b>{part} {what} · {batch}<br>{src} → {dst} on {res}"
            f"<br>{fmt_bytes(e.bytes)} in {fmt_seconds(e.end - e.start)}, {span}")


def gantt_segments(trace: list[TraceEvent], rows: list[str], hover: bool = True) -> list[GanttSegments]:
    """The trace grouped by (kind, batch, phase): ops, then send and receive tasks, then transfers; batches and
    phases in order."""
    row_of = {name: i for i, name in enumerate(rows)}
    groups: dict[tuple[str, int, str], list[int]] = {}
    for i, e in enumerate(trace):
        groups.setdefault((e.kind, e.batch, e.phase), []).append(i)
    out = []
    for (kind, batch, phase) in sorted(groups, key=lambda k: (KIND_ORDER.get(k[0], 9), k[1],
                                                                 PHASE_ORDER.get(k[2], 9))):
        idx = groups[(kind, batch, phase)]
        out.append(GanttSegments(
            kind, batch, phase,
            row=np.array([row_of[trace[i].resource] for i in idx], dtype=int),
            start=np.array([trace[i].start for i in idx], dtype=float),
            end=np.array([trace[i].end for i in idx], dtype=float),
            index=np.array(idx, dtype=int),
            hover=[event_label(trace[i]) for i in idx] if hover else [],
        ))
    return out


def gather_pair(name: str) -> tuple[str, str] | None:
    """(producer, consumer) of a gather's trace name ``gather P → C``, else None."""
    if not name.startswith("gather ") or " → " not in name:
        return None
    producer, _, consumer = name[7:].partition(" → ")
    return producer, consumer


def critical_path(trace: list[TraceEvent], graph: Graph, eps: float = 1e-12, batch: int | None = None) -> list[int]:
    """Indices of the trace events on the critical path, in time order.

    With ``batch`` (counted from 0) the chain ends at that batch's last event instead of the step's: the work
    that fixes when that batch is done (it may pass through other batches' events where it waited for them).

    Starting from the event that ends last, repeatedly step to the predecessor that
    finished last no later than the current event started: a data dependency (the
    parent op on the same device, the transfer that brought its input or gradient, or
    the receive task that delivered it, the op's own forward for its backward; a
    transfer's send task, a send task's op, a receive task's transfer) or the previous
    event on the same device or channel (waiting for the resource). The result is the chain of work that fixes
    the makespan: shortening anything off it cannot make the step faster.
    """
    if not trace:
        return []
    # keys map to lists: an op split over devices has an event per shard (docs/sharding.md)
    ops: dict[tuple[str, int, str], list[int]] = {}
    sent: dict[tuple[str, int, str, str], list[int]] = {}  # (op, batch, phase, dst) -> transfer events
    sends: dict[tuple[str, int, str, str], list[int]] = {}  # ... -> the senders' send tasks
    recvs: dict[tuple[str, int, str, str], list[int]] = {}  # ... -> the receiver's receive tasks
    gathers: dict[tuple[str, str, int, str, str], list[int]] = {}  # (producer, consumer, batch, phase, device)
    by_resource: dict[str, list[int]] = {}
    bwd_of: dict[str, list[int]] = {}
    for i, e in enumerate(trace):
        if e.kind == "op":
            ops.setdefault((e.op, e.batch, e.phase), []).append(i)
            if e.phase == "bwd":
                bwd_of.setdefault(e.op, []).append(i)
            pair = gather_pair(e.op)
            if pair is not None:
                gathers.setdefault((*pair, e.batch, e.phase, e.resource), []).append(i)
        elif e.kind == "send":
            sends.setdefault((e.op, e.batch, e.phase, e.dst), []).append(i)
        elif e.kind == "recv":
            recvs.setdefault((e.op, e.batch, e.phase, e.dst), []).append(i)
        else:
            sent.setdefault((e.op, e.batch, e.phase, e.dst), []).append(i)
        by_resource.setdefault(e.resource, []).append(i)
    previous: dict[int, int] = {}
    for members in by_resource.values():
        members.sort(key=lambda i: (trace[i].start, trace[i].end))
        for a, b in zip(members, members[1:]):
            previous[b] = a

    def via(op_name: str, batch: int, phase: str, device: str, reader: str | None = None) -> list[int]:
        """The events that delivered op_name's (phase) result of this batch to ``device`` (for ``reader``:
        through the gather that collects a split op's slices there, if there is one)."""
        if reader is not None:
            g = gathers.get((op_name, reader, batch, phase, device)) if phase == "fwd" else \
                gathers.get((reader, op_name, batch, phase, device))
            if g:
                return g
        out = []
        for j in ops.get((op_name, batch, phase), []):
            if trace[j].resource == device:
                out.append(j)
        key = (op_name, batch, phase, device)
        out += recvs.get(key) or sent.get(key) or []
        return out or ops.get((op_name, batch, phase), [])

    def predecessors(i: int) -> list[int]:
        e = trace[i]
        cands: list[int] = []
        key = (e.op, e.batch, e.phase, e.dst)
        if e.kind == "transfer" and e.phase == "allreduce":  # a ring starts after the last shard's backward
            cands += sends.get(key) or ops.get((e.op, e.batch, "bwd"), [])
        elif e.kind == "transfer":
            cands += sends.get(key) or [j for j in ops.get((e.op, e.batch, e.phase), []) if trace[j].resource == e.src] \
                or ops.get((e.op, e.batch, e.phase), [])
        elif e.kind == "send":
            cands += [j for j in ops.get((e.op, e.batch, e.phase), []) if trace[j].resource == e.resource]
        elif e.kind == "recv":
            cands += sent.get(key, [])
        elif gather_pair(e.op) is not None:
            producer, consumer = gather_pair(e.op)
            if e.phase == "fwd":
                cands += via(producer, e.batch, "fwd", e.resource)
            else:
                cands += [j for j in ops.get((e.op, e.batch, "fwd"), []) if trace[j].resource == e.resource]
                cands += via(consumer, e.batch, "bwd", e.resource)
        elif e.op in graph.index:
            k = graph.index[e.op]
            mine = [j for j in ops.get((e.op, e.batch, "fwd"), []) if trace[j].resource == e.resource]
            if e.phase == "fwd":
                for p in graph.parents[k]:
                    cands += via(graph.ops[p].name, e.batch, "fwd", e.resource, e.op)
            elif e.phase == "bwd":
                cands += mine
                for c in graph.children[k]:
                    cands += via(graph.ops[c].name, e.batch, "bwd", e.resource, e.op)
            else:
                j = [b for b in ops.get((e.op, e.batch, "bwd"), []) if trace[b].resource == e.resource]
                ring = [t for (o, b, ph, _), ts in sent.items() if o == e.op and ph == "allreduce" and b == e.batch
                        for t in ts]
                cands += (j or bwd_of.get(e.op, [])) + ring
        if i in previous:
            cands.append(previous[i])
        return cands

    last = range(len(trace)) if batch is None else [i for i, e in enumerate(trace) if e.batch == batch]
    if not last:
        return []
    cur = max(last, key=lambda i: (trace[i].end, trace[i].start, -i))
    path = [cur]
    seen = {cur}
    while True:
        start = trace[cur].start
        best = None
        for j in predecessors(cur):
            if j in seen or trace[j].end > start + eps:
                continue
            # latest finisher wins; among equals a data dependency beats the resource predecessor
            key = (trace[j].end, j != previous.get(cur))
            if best is None or key > best[0]:
                best = (key, j)
        if best is None:
            break
        cur = best[1]
        seen.add(cur)
        path.append(cur)
    path.reverse()
    return path


def memory_series(result: SimResult, n_devices: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per device, bytes in use over time as a step function (time, bytes), ending at the makespan.

    Several changes at one instant keep the last value (what the device holds after it).
    """
    points: list[dict[float, float]] = [dict() for _ in range(n_devices)]
    for t, d, b in result.memory_timeline or []:
        points[int(d)][float(t)] = float(b)
    out = []
    for d in range(n_devices):
        items = sorted(points[d].items())
        if not items:
            items = [(0.0, 0.0)]
        t = np.array([x for x, _ in items] + [max(result.makespan, items[-1][0])])
        b = np.array([y for _, y in items] + [items[-1][1]])
        out.append((t, b))
    return out
