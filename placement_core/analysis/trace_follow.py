"""Following a simulated step: an op's events and the flows of its tensors, what the devices and channels did
in a time window, and which bars are wide enough to carry their op's name.

The flows are the Chrome export's (:func:`placement_core.simulate.chrome.tensor_flows`), so the Trace page
and Perfetto draw the same arrows.
"""

from __future__ import annotations

from ..model.graph import Graph
from ..simulate.chrome import tensor_flows
from ..simulate.model import OVERHEAD_KINDS

DEVICE_KINDS = ("op",) + OVERHEAD_KINDS  # what keeps a device busy


def matching_ops(names, query: str) -> list[str]:
    """The names containing ``query`` (case-insensitive), an exact match first, otherwise in the given order;
    an empty query matches nothing."""
    q = " ".join(str(query).split()).lower()
    if not q:
        return []
    names = list(dict.fromkeys(names))
    exact = [n for n in names if n.lower() == q]
    return exact + [n for n in names if q in n.lower() and n.lower() != q]


def op_events(trace, op: str) -> list[int]:
    """Positions of every event of ``op``: its forward, backward and update on its device, and the transfers,
    sends and receives of its output and of its input gradients."""
    return [i for i, e in enumerate(trace) if e.op == op]


def op_flows(trace, graph: Graph, op: str) -> list[dict]:
    """The flows ``op`` takes part in, as producer or consumer: per tensor that crosses devices and batch,
    ``producer``, ``consumer``, ``batch`` and the trace positions ``src`` (producer's forward), ``hop`` (the
    transfer, or None) and ``dst`` (consumer's forward)."""
    return [{"producer": p, "consumer": c, "batch": b, "src": s, "hop": h, "dst": d}
            for p, c, b, s, h, d in tensor_flows(trace, graph) if op in (p, c)]


def _overlap(start: float, end: float, t0: float, t1: float) -> float:
    return max(0.0, min(end, t1) - max(start, t0))


def window_stats(trace, t0: float, t1: float, device_names, channel_names) -> dict:
    """Busy time per device and bytes and busy time per channel inside [t0, t1] (seconds).

    A device runs one task at a time, so its busy time is the summed overlap of its ops' (and send and
    receive tasks') intervals with the window. A transfer straddling an edge of the window counts with the
    share of its bytes that its overlap is of its duration (the link moves bytes at a constant rate); an
    instantaneous transfer counts whole when it happens inside the window.
    """
    t0, t1 = (float(t0), float(t1)) if t0 <= t1 else (float(t1), float(t0))
    span = t1 - t0
    busy = {name: 0.0 for name in device_names}
    moved = {name: 0.0 for name in channel_names}
    link_busy = {name: 0.0 for name in channel_names}
    for e in trace:
        part = _overlap(e.start, e.end, t0, t1)
        if e.kind in DEVICE_KINDS:
            busy[e.resource] = busy.get(e.resource, 0.0) + part
        elif e.kind == "transfer":
            duration = e.end - e.start
            share = part / duration if duration > 0 else float(t0 <= e.start <= t1)
            moved[e.resource] = moved.get(e.resource, 0.0) + e.bytes * share
            link_busy[e.resource] = link_busy.get(e.resource, 0.0) + part
    return {"start_s": t0, "end_s": t1, "span_s": span,
            "devices": [{"device": n, "busy_s": busy[n], "share": busy[n] / span if span > 0 else 0.0}
                        for n in device_names],
            "channels": [{"channel": n, "bytes": moved[n], "busy_s": link_busy[n],
                          "share": link_busy[n] / span if span > 0 else 0.0} for n in channel_names]}


def bar_labels(trace, t0: float, t1: float, width_px: float, char_px: float = 6.2, pad_px: float = 8.0,
               limit: int = 400) -> list[tuple[int, str]]:
    """The bars of ops and transfers whose visible part, on an axis from ``t0`` to ``t1`` seconds drawn
    ``width_px`` wide, can hold their op's whole name (``char_px`` per character, ``pad_px`` to spare): (trace
    position, name), the widest first, at most ``limit``. A name that does not fit is not cut: the hover has it."""
    if t1 <= t0 or width_px <= 0:
        return []
    scale = width_px / (t1 - t0)
    fits = []
    for i, e in enumerate(trace):
        if e.kind not in ("op", "transfer"):
            continue
        px = _overlap(e.start, e.end, t0, t1) * scale
        if px >= len(e.op) * char_px + pad_px:
            fits.append((px, i, e.op))
    fits.sort(key=lambda f: (-f[0], f[1]))
    return [(i, name) for _, i, name in fits[:limit]]
