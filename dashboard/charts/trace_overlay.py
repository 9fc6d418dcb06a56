"""What the Trace page draws over its Gantt chart (``gantt.gantt_figure(..., extra=...)``): clickable events,
names inside bars wide enough for them, the followed op's events and its flow arrows (producer → transfer →
consumer), ops found by name, the critical-path event picked in the table, and the time window.

The numbers come from ``placement_core.analysis.trace_follow``; this module only draws them.
"""

from __future__ import annotations

import html

from placement_core.analysis.trace_follow import bar_labels

from .gantt import GANTT_HALF, ink, shade

CLICKABLE_EVENTS = 6000  # up to this many events the bars are clickable Plotly bars, beyond filled outlines
NAMED_EVENTS = 2500  # up to this many the bars carry their names (each a text Plotly fits on every zoom)
PLOT_WIDTH_PX = 1050  # the Gantt's plotting width on a common screen: which names fit, beyond that many events
MAX_ARROWS = 240
GRID_POINTS = 400  # per row, invisible: what Box Select selects on a step drawn as outlines
FOLLOW, FOUND, PICKED, FLOW = "#d62728", "#e69500", "#8e24aa", "#c62828"


def _outline(trace, indices, row_of: dict, colour: str, width: float, name: str) -> dict:
    """Rectangles around the given events' bars, one line trace."""
    x, y = [], []
    for i in indices:
        e = trace[i]
        r, h = -row_of[e.resource], GANTT_HALF + 0.06
        x += [e.start * 1e3, e.end * 1e3, e.end * 1e3, e.start * 1e3, e.start * 1e3, None]
        y += [r + h, r + h, r - h, r - h, r + h, None]
    return dict(type="scatter", x=x, y=y, mode="lines", line=dict(color=colour, width=width), hoverinfo="skip",
                name=name, showlegend=False)


def _arrow(x0: float, y0: float, x1: float, y1: float) -> dict:
    return dict(x=x1, y=y1, ax=x0, ay=y0, xref="x", yref="y", axref="x", ayref="y", showarrow=True, arrowhead=2,
                arrowsize=1.1, arrowwidth=1.6, arrowcolor=FLOW, standoff=1, startstandoff=1, text="")


def flow_arrows(trace, flows: list[dict], row_of: dict) -> list[dict]:
    """Producer's forward → its transfer → the consumer's forward: two arrows per flow (one when no transfer
    was recorded), from the end of one bar to the start of the next."""
    out = []
    for f in flows:
        chain = [trace[k] for k in (f["src"], f["hop"], f["dst"]) if k is not None]
        for a, b in zip(chain, chain[1:]):
            out.append(_arrow(a.end * 1e3, -row_of[a.resource], b.start * 1e3, -row_of[b.resource]))
        if len(out) >= MAX_ARROWS:
            break
    return out[:MAX_ARROWS]


def gantt_extra(trace, rows: list[str], makespan: float, *, follow=(), flows=(), found=(), picked=None,
                window=None) -> dict:
    """``follow``: the followed op's events; ``flows``: its flows (``trace_follow.op_flows``); ``found``: events
    of ops found by name; ``picked``: one event (a critical-path row); ``window``: (start, end) seconds."""
    row_of = {name: i for i, name in enumerate(rows)}
    data, notes, shapes = [], [], []
    layout = dict(selectdirection="h")  # with the box-select tool a drag chooses a time range
    clickable = len(trace) <= CLICKABLE_EVENTS
    if not clickable and window is not None and window_events(trace, window) <= CLICKABLE_EVENTS:
        clickable = (float(window[0]), float(window[1]))  # a large step: the window's events are clickable bars
    if clickable is False:
        labels = bar_labels(trace, 0.0, makespan * 1.01, PLOT_WIDTH_PX)  # fixed: the names that fit unzoomed
        if labels:
            data.append(dict(type="scatter", mode="text", hoverinfo="skip", showlegend=False, name="names",
                             x=[(trace[i].start + trace[i].end) / 2 * 1e3 for i, _ in labels],
                             y=[-row_of[trace[i].resource] for i, _ in labels],
                             text=[html.escape(name, quote=False) for _, name in labels],
                             textfont=dict(size=10, color=[ink(shade(trace[i].batch, trace[i].phase))
                                                           for i, _ in labels])))
    if clickable is not True:  # outlines cannot be selected: invisible points on every row let Box Select
        xs = [makespan * 1e3 * 1.01 * k / (GRID_POINTS - 1) for k in range(GRID_POINTS)]  # choose a window
        data.append(dict(type="scatter", mode="markers", name="time grid", showlegend=False, hoverinfo="skip",
                         x=xs * len(rows), y=[-r for r in range(len(rows)) for _ in xs],
                         marker=dict(size=4, opacity=0), selected=dict(marker=dict(opacity=0)),
                         unselected=dict(marker=dict(opacity=0))))
    if found:
        data.append(_outline(trace, found, row_of, FOUND, 2.0, "found"))
    if follow:
        data.append(_outline(trace, follow, row_of, FOLLOW, 2.6, "followed op"))
    notes += flow_arrows(trace, list(flows), row_of)
    if picked is not None:
        e = trace[picked]
        data.append(_outline(trace, [picked], row_of, PICKED, 3.2, "picked"))
        notes.append(dict(x=(e.start + e.end) / 2 * 1e3, y=-row_of[e.resource] + GANTT_HALF + 0.06, xref="x",
                          yref="y", text=html.escape(f"{e.op} ({e.phase})", quote=False), showarrow=True,
                          arrowhead=0, ax=0, ay=-22, arrowcolor=PICKED, font=dict(color=PICKED, size=11),
                          bgcolor="rgba(255,255,255,0.85)"))
    if window is not None:
        shapes.append(dict(type="rect", xref="x", yref="paper", x0=window[0] * 1e3, x1=window[1] * 1e3, y0=0, y1=1,
                           fillcolor="rgba(255,193,7,0.13)", line=dict(color="rgba(230,149,0,0.8)", width=1,
                                                                        dash="dot"), layer="below"))
    # up to CLICKABLE_EVENTS the bars are Plotly bars: a click anywhere on one follows its op, and its name is
    # written inside when the bar, as drawn (zoom in), is wide enough; beyond, outlines draw faster, except
    # inside a chosen time window of at most CLICKABLE_EVENTS events: those are bars again (a tuple ``bars``)
    named = len(trace) <= NAMED_EVENTS or (clickable is not True and clickable is not False
                                           and window_events(trace, window) <= NAMED_EVENTS)
    return {"data": data, "annotations": notes, "shapes": shapes, "layout": layout, "bars": clickable,
            "names": named}


def window_events(trace, window) -> int:
    """How many events overlap the time window (start, end) in seconds."""
    a, b = window
    return sum(1 for e in trace if e.end >= a and e.start <= b)


def clicked_event(point, n_events: int) -> int | None:
    """The trace position a selected point of the clickable bars stands for, or None."""
    if not isinstance(point, dict):
        return None
    data = point.get("customdata")
    if isinstance(data, (list, tuple)) and data:
        data = data[0]
    if isinstance(data, dict):
        data = data.get(0, data.get("0"))
    try:
        k = int(data)
    except (TypeError, ValueError):
        return None
    return k if 0 <= k < n_events else None


def box_window(box, makespan: float) -> tuple[float, float] | None:
    """The time range (seconds) of a box selection on the Gantt chart (its x axis is in ms), clipped to the run."""
    if not isinstance(box, dict):
        return None
    xs = box.get("x") or []
    try:
        a, b = sorted(float(v) / 1e3 for v in xs[:2])
    except (TypeError, ValueError):
        return None
    a, b = max(a, 0.0), min(b, makespan)
    return (a, b) if b > a else None
