"""Curves of optimization runs: the live best-so-far curves (Optimize), a stored run's history and the overlay
of several runs (Runs), a policy's reward curve (Learned placers)."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from .style import BASE_LAYOUT, color, fast_figure, mix

def _live_tail(curve: list, budget: int | None) -> list:
    """A running curve with its flat tail (the latest report after the last improvement) moved in coarse
    steps: a twentieth of the budget, else half a power of ten. The figure then changes only at an
    improvement or a step, and the browser redraws it (a third of a core at two redraws a second, taken
    from the run) only then."""
    if len(curve) < 2 or curve[-1][1] < curve[-2][1]:
        return curve
    x = curve[-1][0]
    step = budget / 20 if budget else 10 ** np.floor(np.log10(max(x, 1.0))) / 2
    x = np.floor(x / step) * step
    return curve[:-1] + ([(float(x), curve[-1][1])] if x > curve[-2][0] else [])


def progress_figure(views: list[dict]) -> go.Figure:
    """The best-so-far curves (a step each: the points are the improvements), live or finished."""
    data = []
    for v in views:
        curve = v["curve"]
        if v.get("status") in ("starting", "running"):
            curve = _live_tail(curve, v.get("budget"))
        if not curve:
            continue
        xy = np.asarray(curve, dtype=float)
        data.append(dict(type="scatter", x=xy[:, 0], y=xy[:, 1] * 1e3, mode="lines", name=v["name"],
                         line=dict(color=color(v["id"] - 1), width=2.5, shape="hv")))
    return fast_figure(data, dict(
        **BASE_LAYOUT, height=330, title=dict(text="Best objective so far"),
        xaxis=dict(title=dict(text="evaluations")), yaxis=dict(title=dict(text="objective (ms per batch)")),
        legend=dict(orientation="h", y=-0.25)))


RATIO_TITLE = "objective ÷ best single device (reward = −this)"


def history_figure(history: np.ndarray, name: str, ratio: bool = False) -> go.Figure:
    """A stored run's history: best so far and the optimizer's current objective against evaluations (SVG:
    one path per line draws thousands of points faster than starting WebGL). ``ratio``: a policy training's
    reward curve, objectives divided by each graph's best single device (no unit)."""
    h = np.asarray(history, dtype=float).reshape(-1, 3)
    scale = 1.0 if ratio else 1e3
    data = []
    current = h[:, 2] * scale
    finite = np.isfinite(current)
    if finite.any():
        data.append(dict(type="scatter", x=h[finite, 0], y=current[finite], mode="lines", name="current",
                         line=dict(color=mix(color(0), "#ffffff", 0.55), width=1.5)))
    data.append(dict(type="scatter", x=h[:, 0], y=h[:, 1] * scale, mode="lines", name="best so far",
                     line=dict(color=color(0), width=2.5, shape="hv")))
    what = "reward curve" if ratio else "objective over the run"
    return fast_figure(data, dict(
        **BASE_LAYOUT, height=300, title=dict(text=f"{html.escape(name, quote=False)}: {what}"),
        xaxis=dict(title=dict(text="evaluations")),
        yaxis=dict(title=dict(text=RATIO_TITLE if ratio else "objective (ms per batch)")),
        legend=dict(orientation="h", y=-0.3)))


def reward_curve_figure(points: list[tuple[float, float]], title: str) -> go.Figure:
    """A policy's training, live: the mean objective of the last round of graphs (÷ each graph's best single
    device) against simulator evaluations."""
    xy = np.asarray(points, dtype=float).reshape(-1, 2)
    data = [dict(type="scatter", x=xy[:, 0], y=xy[:, 1], mode="lines", name="last round's mean",
                 line=dict(color=color(0), width=2))]
    return fast_figure(data, dict(
        **BASE_LAYOUT, height=300, title=dict(text=html.escape(title, quote=False)),
        xaxis=dict(title=dict(text="evaluations")), yaxis=dict(title=dict(text=RATIO_TITLE)),
        showlegend=False))


OBJECTIVE_TITLE = "objective (ms per batch + memory penalty)"


def runs_overlay_figure(curves: list[tuple[str, np.ndarray]], log_x: bool = False, log_y: bool = False) -> go.Figure:
    """Several stored runs' best-so-far curves on one chart, one colour per run.

    The y axis is the optimizer's objective: the time per batch, plus the memory penalty for a placement
    that exceeds a device's memory, so it is titled as such. A log x axis drops evaluation 0. Names are
    HTML-escaped: Plotly renders tags in legend and hover text, and a network's name comes from its file."""
    fig = go.Figure()
    for k, (name, history) in enumerate(curves):
        h = np.asarray(history, dtype=float).reshape(-1, 3)
        keep = np.isfinite(h[:, 1]) & ((h[:, 0] > 0) if log_x else True)
        fig.add_trace(go.Scatter(x=h[keep, 0], y=h[keep, 1] * 1e3, mode="lines", name=html.escape(name),
                                 line=dict(color=color(k), width=2.5, shape="hv"),
                                 hovertemplate="%{x:,} evaluations<br>%{y:.4g} ms"))
    fig.update_layout(**BASE_LAYOUT, height=360, title="Best objective so far",
                      xaxis=dict(title="evaluations" + (" (log scale)" if log_x else ""),
                                 type="log" if log_x else "linear"),
                      yaxis=dict(title=OBJECTIVE_TITLE, type="log" if log_y else "linear"),
                      legend=dict(orientation="h", y=-0.25))
    return fig
