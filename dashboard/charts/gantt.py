"""The Trace page's Gantt chart: one row per device and channel, one filled outline (or clickable bar trace) per
colour, send/receive tasks thin and grey, the critical path as a black bar and line. What the page draws over it
(followed op, flows, found ops, time window) is :mod:`.trace_overlay`'s."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from placement_core.analysis import GanttSegments
from placement_core.analysis.trace import PHASE_ORDER as TRACE_PHASE_ORDER

from .style import BASE_LAYOUT, OVERHEAD_COLOR, OVERHEAD_NAME, color, fast_figure, mix

PHASE_NAMES = {"fwd": "forward", "bwd": "backward", "update": "weight update", "allreduce": "all-reduce"}


def shade(batch: int, phase: str) -> str:
    """Forward in the batch's colour, backward lighter, weight update greyer."""
    base = color(batch)
    return {"fwd": base, "bwd": mix(base, "#ffffff", 0.5), "update": mix(base, "#808080", 0.6),
            "allreduce": mix(base, "#000000", 0.45)}.get(phase, base)  # a split op's weight gradients, summed


GANTT_HALF = 0.3  # half the height of an op's or a transfer's bar, in rows
OVERHEAD_HALF = 0.12  # send and receive tasks: thinner bars over the device's work
CRITICAL_HALF = 0.07  # the critical path: a thin black bar through the middle


def _bar_outline(start_ms: np.ndarray, end_ms: np.ndarray, row: np.ndarray, half: float):
    """Bars [start, end] × [-row - half, -row + half] as one closed outline, for a ``fill="toself"`` trace.

    Plotly draws a separate SVG path for every gap-separated piece of a line and starts WebGL for
    ``scattergl``; either makes a 10,000-event Gantt take seconds in the browser. One outline per colour is one
    path: each bar is walked top-left, top-middle, top-right, bottom-right, bottom-left, top-left; bars of a
    row are joined along their top edge, each row ends back at its first bar, and the joins between rows are
    walked back at the end, so no join encloses any area. Returns x, y, the order of the bars in the
    outline, and the position of each bar's top-middle vertex there (which carries its hover text).
    """
    order = np.lexsort((start_ms, row))
    s, e, r = start_ms[order], end_ms[order], np.asarray(row)[order]
    top, bottom = -r + half, -r - half
    xs = np.stack([s, (s + e) * 0.5, e, e, s, s], axis=1)
    ys = np.stack([top, top, top, bottom, bottom, top], axis=1)
    firsts = np.flatnonzero(np.r_[True, r[1:] != r[:-1]])
    ends = np.r_[firsts[1:], len(s)]
    px, py, hover, at = [], [], [], 0
    for a, b in zip(firsts, ends):  # one row at a time, then back to its first bar
        px += [xs[a:b].ravel(), s[a:a + 1]]
        py += [ys[a:b].ravel(), top[a:a + 1]]
        hover.append(at + 6 * np.arange(b - a) + 1)
        at += 6 * (b - a) + 1
    px.append(s[firsts[::-1]])  # the joins between rows, walked back
    py.append(top[firsts[::-1]])
    x, y = np.concatenate(px), np.concatenate(py)
    return x.astype(np.float32), y.astype(np.float32), order, np.concatenate(hover) if hover else np.zeros(0, int)


def _bars_trace(start_s, end_s, row, half: float, fill: str, hover: list[str] | None, **props) -> dict:
    x, y, order, at = _bar_outline(np.asarray(start_s) * 1e3, np.asarray(end_s) * 1e3, np.asarray(row), half)
    trace = dict(type="scatter", x=x, y=y, mode="none", fill="toself", fillcolor=fill, **props)
    if hover:
        text = [""] * len(x)
        for i, k in zip(at.tolist(), order.tolist()):
            text[i] = hover[k]
        trace.update(text=text, hoveron="points", hovertemplate="%{text}<extra></extra>")
    else:
        trace["hoverinfo"] = "skip"
    return trace


def _take(seg: GanttSegments, mask: np.ndarray) -> GanttSegments:
    """The events of ``seg`` where ``mask`` holds."""
    keep = np.flatnonzero(mask)
    return GanttSegments(seg.kind, seg.batch, seg.phase, seg.row[keep], seg.start[keep], seg.end[keep],
                         seg.index[keep], [seg.hover[k] for k in keep] if seg.hover else [])


def critical_line(trace, critical: list, row_of: dict) -> dict:
    """The critical path as one connected line: along each event's bar, then across rows to the next event,
    so the eye can follow it from device to link to device."""
    x, y = [], []
    for i in sorted(critical, key=lambda k: (trace[k].start, trace[k].end)):
        e = trace[i]
        x += [e.start * 1e3, e.end * 1e3]
        y += [-row_of[e.resource]] * 2
    return dict(type="scatter", x=x, y=y, mode="lines", line=dict(color="#111111", width=1.5), hoverinfo="skip",
                name="critical path", legendgroup="critical", showlegend=False)


def gantt_figure(segments: list[GanttSegments], rows: list[str], n_devices: int, makespan: float,
                 critical: list | None = None, trace=None, unit: str = "batch", extra: dict | None = None
                 ) -> go.Figure:
    """One row per device and channel; one filled outline per colour (a batch's forward, backward or weight
    update: its ops and the transfers they send), send and receive tasks as thin grey bars, the critical path
    as a thin black bar. Hover: each event's label at the top middle of its bar. ``unit`` names what the
    trace's batches are ("micro-batch" for GPipe and 1F1B); they are numbered from 1. ``extra``
    (:mod:`.trace_overlay`) adds traces drawn on top (``data``: outlines, fixed labels), ``annotations`` (flow
    arrows), ``shapes`` (a time window) and ``layout``; with ``bars`` each colour is a bar trace instead of an
    outline (a click anywhere on a bar selects its event, whose trace position is its customdata), with
    ``names`` the op's name written inside each bar (Plotly shows those that fit as drawn, on zoom too)."""
    extra = extra or {}
    bars, names = extra.get("bars", False), extra.get("names", False)
    window = bars if isinstance(bars, tuple) else None  # only the events inside this window (seconds) are bars

    def draw(segs, half, fill, **props):
        if window is not None:  # a large step: its window's events clickable, the others outlines
            inside = [_take(sg, (sg.end >= window[0]) & (sg.start <= window[1])) for sg in segs]
            outside = [_take(sg, (sg.end < window[0]) | (sg.start > window[1])) for sg in segs]
            out = [one(outside, half, fill, False, **props) if sum(map(len, outside)) else None,
                   one(inside, half, fill, True, **props) if sum(map(len, inside)) else None]
            out = [t for t in out if t is not None]
            for t in out[1:]:
                t["showlegend"] = False
            return out
        return [one(segs, half, fill, bool(bars), **props)]

    def one(segs, half, fill, bars, **props):
        if not bars:
            return _bars_trace(np.concatenate([sg.start for sg in segs]), np.concatenate([sg.end for sg in segs]),
                               np.concatenate([sg.row for sg in segs]), half, fill,
                               [h for sg in segs for h in sg.hover], **props)
        index = np.concatenate([sg.index for sg in segs])
        start = np.concatenate([sg.start for sg in segs]) * 1e3
        bar = dict(type="bar", orientation="h", base=start, x=np.concatenate([sg.end for sg in segs]) * 1e3 - start,
                   y=-np.concatenate([sg.row for sg in segs]), width=2 * half, customdata=index,
                   marker=dict(color=fill, line=dict(width=0)), hovertext=[h for sg in segs for h in sg.hover],
                   hovertemplate="%{hovertext}<extra></extra>", selected=dict(marker=dict(opacity=1)),
                   unselected=dict(marker=dict(opacity=1)), **props)  # a clicked bar fades nothing
        if names and trace is not None:
            bar.update(text=[html.escape(trace[i].op, quote=False) for i in index], textposition="inside",
                       insidetextanchor="middle", constraintext="inside", textfont=dict(size=10, color=ink(fill)))
        return bar

    colours: dict[tuple[int, str], list[GanttSegments]] = {}
    overhead: list[GanttSegments] = []
    for seg in segments:
        if len(seg) == 0:
            continue
        (overhead if seg.kind in ("send", "recv") else colours.setdefault((seg.batch, seg.phase), [])).append(seg)
    batches = sorted({b for b, _ in colours})
    per_batch = len(batches) > 3  # many batches: one legend entry per batch (all its phases)
    data, shown = [], set()
    for (b, phase) in sorted(colours, key=lambda k: (k[0], TRACE_PHASE_ORDER.get(k[1], 9))):
        segs = colours[(b, phase)]
        group = f"b{b}" if per_batch else f"b{b}-{phase}"
        name = f"{unit} {b + 1}" + ("" if per_batch else f" · {PHASE_NAMES.get(phase, phase)}")
        data += draw(segs, GANTT_HALF, shade(b, phase), name=name, legendgroup=group, showlegend=group not in shown)
        shown.add(group)
    if overhead:
        data += draw(overhead, OVERHEAD_HALF, OVERHEAD_COLOR, name=OVERHEAD_NAME, legendgroup="overhead",
                     showlegend=True)
    if critical and trace is not None:
        row_of = {name: i for i, name in enumerate(rows)}
        data.append(_bars_trace([trace[i].start for i in critical], [trace[i].end for i in critical],
                                [row_of[trace[i].resource] for i in critical], CRITICAL_HALF, "#111111", None,
                                name="critical path", legendgroup="critical", showlegend=True))
        data.append(critical_line(trace, critical, row_of))
    data += extra.get("data", [])
    labels = [r if i < n_devices else f"{r} (link)" for i, r in enumerate(rows)]
    shapes = list(extra.get("shapes", []))
    if 0 < n_devices < len(rows):
        shapes.append(dict(type="line", xref="paper", x0=0, x1=1, y0=-(n_devices - 0.5), y1=-(n_devices - 0.5),
                           line=dict(color="#999", width=1, dash="dot")))
    return fast_figure(data, dict(
        BASE_LAYOUT, height=120 + 34 * len(rows), shapes=shapes, hovermode="closest",
        annotations=list(extra.get("annotations", [])),
        xaxis=dict(title=dict(text="time (ms)"), range=[0, makespan * 1e3 * 1.01], showgrid=True),
        yaxis=dict(tickmode="array", tickvals=[-i for i in range(len(rows))], ticktext=labels,
                   range=[-(len(rows) - 0.5), 0.5], showgrid=False, zeroline=False, fixedrange=True),
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0, font=dict(size=11)),
        margin=dict(l=10, r=10, t=60, b=10), **extra.get("layout", {}),
        **(dict(barmode="overlay", uniformtext=dict(mode="hide", minsize=9)) if bars else {})))


def ink(fill: str) -> str:
    """Dark text on a light bar, white on a dark one (relative luminance of the bar's colour)."""
    r, g, b = (int(fill[k:k + 2], 16) / 255 for k in (1, 3, 5))
    return "#14171f" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.5 else "#ffffff"
