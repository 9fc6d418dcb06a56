"""The Pipeline page's bar and line charts: peak memory per stage (one schedule, or every schedule), where the
bubble comes from, the measured bubble beside the simulated one, and the sweep over the number of micro-batches.
``big=True`` is the presentation mode (larger type). Numbers come from ``placement_core.analysis``."""

from __future__ import annotations

import plotly.graph_objects as go

from placement_core.analysis import fmt_bytes

from .pipeline_gantt import SCHEDULE_COLORS, _axis, font_sizes
from .style import BASE_LAYOUT, fast_figure


def stage_memory_figure(devices: list[str], peaks: list[float], capacity: list[float], x_max: float | None = None,
                        title: str = "Peak memory per stage", big: bool = False) -> go.Figure:
    """Horizontal bars: each stage device's peak memory (GB), red past its capacity (a black tick). Built
    unvalidated (:func:`.style.fast_figure`): the page draws one per schedule at every change of m."""
    gb = [p / 1e9 for p in peaks]
    caps = [c / 1e9 for c in capacity]
    top = x_max / 1e9 if x_max else max(gb + [1e-9]) * 1.25
    fonts = font_sizes(big)
    data = [dict(type="bar", orientation="h", y=devices, x=gb,
                 marker=dict(color=["#E45756" if p > c else "#5B7FA6" for p, c in zip(gb, caps)]),
                 text=[f"{p:.3g} GB · {p / c:.0%}" if c else f"{p:.3g} GB" for p, c in zip(gb, caps)],
                 textposition="auto", name="peak", showlegend=False,
                 hovertemplate="%{y}: peak %{x:.4g} GB<extra></extra>")]
    shown = [(d, c) for d, c in zip(devices, caps) if c <= top]
    if shown:
        data.append(dict(type="scatter", x=[c for _, c in shown], y=[d for d, _ in shown], mode="markers",
                         name="capacity", marker=dict(symbol="line-ns", size=22, line=dict(width=3, color="#222")),
                         showlegend=False, hovertemplate="%{y}: capacity %{x:.4g} GB<extra></extra>"))
    return fast_figure(data, {**BASE_LAYOUT, "font": dict(size=fonts["base"]),
                              "height": 95 + (42 if big else 30) * len(devices),
                              "title": dict(text=title, x=0, font=dict(size=fonts["base"])),
                              "xaxis": _axis(big, title=dict(text="memory (GB; tick: capacity)"), range=[0, top]),
                              "yaxis": _axis(big, title=dict(text=""), autorange="reversed", type="category"),
                              "margin": dict(l=10, r=10, t=35, b=10)})


def memory_by_schedule_figure(rows: list[dict], names: dict, capacity: dict, big: bool = False) -> go.Figure:
    """Peak memory of every stage (y) under every schedule (a bar each), capacities as ticks. ``rows``:
    {"schedule", "device", "peak"} dicts in stage order."""
    fonts = font_sizes(big)
    data = []
    devices = list(dict.fromkeys(r["device"] for r in rows))
    for schedule in dict.fromkeys(r["schedule"] for r in rows):
        rs = [r for r in rows if r["schedule"] == schedule]
        data.append(dict(type="bar", orientation="h", y=[r["device"] for r in rs], x=[r["peak"] / 1e9 for r in rs],
                         name=names.get(schedule, schedule), marker=dict(color=SCHEDULE_COLORS.get(schedule, "#555")),
                         text=[fmt_bytes(r["peak"]) for r in rs], textposition="auto",
                         hovertemplate=f"{names.get(schedule, schedule)} · %{{y}}: %{{x:.4g}} GB<extra></extra>"))
    peak = max((r["peak"] for r in rows), default=0.0) / 1e9
    caps = [(d, capacity[d] / 1e9) for d in devices if capacity.get(d) and capacity[d] / 1e9 <= 1.5 * max(peak, 1e-9)]
    if caps:
        data.append(dict(type="scatter", x=[c for _, c in caps], y=[d for d, _ in caps], mode="markers",
                         name="capacity", marker=dict(symbol="line-ns", size=28, line=dict(width=3, color="#222")),
                         hovertemplate="%{y}: capacity %{x:.4g} GB<extra></extra>"))
    return fast_figure(data, {**BASE_LAYOUT, "font": dict(size=fonts["base"]), "barmode": "group",
                              "height": 140 + (26 if big else 18) * len(devices) * max(1, len(data)),
                              "title": dict(text="Peak memory per stage, every schedule", x=0),
                              "xaxis": dict(title=dict(text="peak memory (GB)"), rangemode="tozero"),
                              "yaxis": dict(title=dict(text="stage device"), autorange="reversed", type="category"),
                              "legend": dict(orientation="h", y=-0.2, x=0)})


PART_NAMES = {"schedule_s": "the schedule (equal stages)", "imbalance_s": "imbalance between stages",
              "updates_s": "weight updates", "transfers_s": "transfers"}
PART_COLORS = {"schedule_s": "#7F8C8D", "imbalance_s": "#E67E22", "updates_s": "#A0A0A0", "transfers_s": "#2980B9"}


def breakdown_figure(parts: list[tuple[str, dict]], big: bool = False) -> go.Figure:
    """Each schedule's bubble (seconds idle, summed over the stages) split into its parts, stacked
    (:func:`placement_core.analysis.bubble.bubble_breakdown`)."""
    fonts = font_sizes(big)
    data = []
    for key, label in PART_NAMES.items():
        data.append(dict(type="bar", orientation="h", y=[n for n, _ in parts], x=[p[key] * 1e3 for _, p in parts],
                         name=label, marker=dict(color=PART_COLORS[key]),
                         text=[f"{p[key] * 1e3:.3g} ms" if abs(p[key]) > 0.04 * max(p["idle_s"], 1e-12) else ""
                               for _, p in parts], textposition="inside",
                         hovertemplate=f"{label}: %{{x:.4g}} ms<extra>%{{y}}</extra>"))
    return fast_figure(data, {**BASE_LAYOUT, "font": dict(size=fonts["base"]), "barmode": "relative",
                              "height": 140 + (60 if big else 44) * len(parts),
                              "title": dict(text="Where the bubble comes from", x=0),
                              "xaxis": dict(title=dict(text="idle time, summed over the stages (ms)")),
                              "yaxis": dict(autorange="reversed", type="category"),
                              "legend": dict(orientation="h", y=-0.3, x=0)})


def measured_figure(rows: list[dict], names: dict, big: bool = False) -> go.Figure:
    """Measured (a pipelined benchmark) and simulated bubble per stored run, side by side."""
    fonts = font_sizes(big)
    labels = [f"{names.get(r['schedule'], r['schedule'])} · m = {r['micro_batches']} · #{r['id']}" for r in rows]
    fig = go.Figure([
        go.Bar(x=labels, y=[r["measured_bubble"] * 100 for r in rows], name="measured", marker_color="#34495E",
               hovertemplate="%{x}: measured %{y:.3g} %<extra></extra>"),
        go.Bar(x=labels, y=[None if r["simulated_bubble"] is None else r["simulated_bubble"] * 100 for r in rows],
               name="simulated", marker_color="#27AE60", hovertemplate="%{x}: simulated %{y:.3g} %<extra></extra>")])
    fig.update_layout(**{**BASE_LAYOUT, "font": dict(size=fonts["base"])}, barmode="group", height=380,
                      title=dict(text="Bubble: measured and simulated", x=0),
                      yaxis=dict(title="bubble (% of the step)", rangemode="tozero"), legend=dict(orientation="h"))
    return fig


def sweep_figure(rows: list[dict], chosen_m: int | None = None, capacity: float | None = None,
                 names: dict | None = None) -> go.Figure:
    """Step time and first-stage peak memory against the number of micro-batches, one line per schedule,
    from :func:`placement_core.analysis.pipeline.sweep`."""
    from plotly.subplots import make_subplots
    names = names or {}
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("Step time (one batch, flush included)", "Peak memory of the first stage"))
    ms = sorted({r["micro_batches"] for r in rows})
    for schedule in dict.fromkeys(r["schedule"] for r in rows):
        rs = sorted((r for r in rows if r["schedule"] == schedule), key=lambda r: r["micro_batches"])
        # GPipe wider underneath: where the schedules tie (an ideal pipeline) both lines stay visible
        style = dict(color=SCHEDULE_COLORS.get(schedule, "#555"), width=5 if schedule == "gpipe" else 2.5,
                     dash="dash" if schedule == "thesis" else "solid")
        label = names.get(schedule, schedule)
        x = [r["micro_batches"] for r in rs]
        fig.add_trace(go.Scatter(x=x, y=[r["step_time_s"] * 1e3 for r in rs], mode="lines+markers", name=label,
                                 legendgroup=schedule, line=style,
                                 hovertemplate=f"{label}, m = %{{x}}: %{{y:.4g}} ms per batch<extra></extra>"),
                      row=1, col=1)
        fig.add_trace(go.Scatter(x=x, y=[r["first_stage_peak_bytes"] / 1e9 for r in rs], mode="lines+markers",
                                 name=label, legendgroup=schedule, line=style, showlegend=False,
                                 hovertemplate=f"{label}, m = %{{x}}: %{{y:.4g}} GB<extra></extra>"),
                      row=1, col=2)
    peak = max((r["first_stage_peak_bytes"] for r in rows), default=0.0) / 1e9
    if capacity and capacity / 1e9 <= 2 * max(peak, 1e-9):
        fig.add_hline(y=capacity / 1e9, row=1, col=2, line=dict(color="#222", dash="dash", width=1.5),
                      annotation_text=f"capacity {fmt_bytes(capacity)}", annotation_position="top left",
                      annotation_font_size=11)
    if chosen_m:
        for col in (1, 2):
            fig.add_vline(x=chosen_m, row=1, col=col, line=dict(color="#999", dash="dot", width=1.5))
    axis = dict(title="micro-batches per batch (m)", type="log", tickmode="array", tickvals=ms,
                ticktext=[str(m) for m in ms])
    fig.update_xaxes(**axis)
    fig.update_yaxes(title_text="step time (ms)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="peak memory (GB)", rangemode="tozero", row=1, col=2)
    fig.update_layout(**BASE_LAYOUT, height=380, legend=dict(orientation="h", y=-0.25, x=0))
    fig.update_layout(margin=dict(l=10, r=10, t=50, b=10))
    return fig
