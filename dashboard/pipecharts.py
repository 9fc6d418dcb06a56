"""The Pipeline page's figures: schedules on one time axis (F, B, W and updates in their shades), the step
revealed frame by frame with the bubble shaded, memory per stage, the bubble's parts, measured beside
simulated. Numbers come from ``placement_core.analysis``; this module only draws.

Micro-batch k is drawn in ``unit_color(k)``: Plotly's Dark24, 24 colours that stay apart (CIE ΔE ≥ 26 between
any two), so a lecture can show 16 or more micro-batches; beyond 24 they repeat, the labels still say which.
``big=True`` is the presentation mode: larger type and rows for a projector.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative

from placement_core.analysis import fmt_bytes
from placement_core.analysis.bubble import frame_times, idle_intervals, until

from .charts import BASE_LAYOUT, OVERHEAD_COLOR, OVERHEAD_NAME, _mix

UNIT_PALETTE = list(qualitative.Dark24)
SCHEDULE_COLORS = {"thesis": "#7F7F7F", "gpipe": "#3A5FA0", "1f1b": "#C0392B", "interleaved-1f1b": "#1E8449",
                   "zb-h1": "#8E44AD"}
UPDATE_COLOR = "#A0A0A0"
BUBBLE_COLOR = "rgba(120, 120, 120, 0.28)"
PHASE_LETTERS = {"fwd": "F", "bwd": "B", "wgrad": "W", "update": "U"}
PHASE_NAMES = {"fwd": "forward", "bwd": "backward (input gradient under ZB-H1)", "wgrad": "weight gradient (W)",
               "update": "weight update"}
PHASE_ORDER = {"fwd": 0, "bwd": 1, "wgrad": 2, "update": 3}


def unit_color(k: int) -> str:
    return UNIT_PALETTE[k % len(UNIT_PALETTE)]


def shade(unit: int, phase: str) -> str:
    """Forward in the micro-batch's colour, backward lighter, its weight gradient lighter still (and hatched)."""
    return _phase_shade(unit_color(unit), phase)


def _phase_shade(base: str, phase: str) -> str:
    return {"fwd": base, "bwd": _mix(base, "#ffffff", 0.45), "wgrad": _mix(base, "#ffffff", 0.7),
            "update": UPDATE_COLOR}.get(phase, base)


LEGEND_BASE = "#5B6770"  # the shades' legend swatches: a slate grey no micro-batch is drawn in (Dark24 has none)


def _fonts(big: bool) -> dict:
    return {"base": 20 if big else 13, "bar": 16 if big else 12, "row": 62 if big else 40, "legend": 16 if big else 11}


def block_label(b, chunks: bool) -> str:
    if b.phase == "update":
        return "U"
    tag = f"{PHASE_LETTERS.get(b.phase, '?')}{b.unit + 1}"
    return f"{tag}·{b.chunk + 1}" if chunks else tag


def _bar_traces(blocks, labels: list[str], chunks: bool, unit: str, fonts: dict, legend: bool = True) -> list:
    """One trace per phase (per-bar colours), work bars full height, transfers thinner: a fixed set of traces,
    so that animation frames can replace their data."""
    traces = []
    for phase in ("fwd", "bwd", "wgrad", "update"):
        for kind in ("op", "transfer"):
            bs = [b for b in blocks if b.phase == phase and b.kind == kind]
            op = kind == "op"
            traces.append(go.Bar(
                orientation="h", y=[labels[b.row] for b in bs], base=[b.start * 1e3 for b in bs],
                x=[(b.end - b.start) * 1e3 for b in bs], width=0.78 if op else 0.4,
                marker=dict(color=[shade(b.unit, phase) for b in bs], line=dict(width=0.6, color="white"),
                            pattern=dict(shape="/" if phase == "wgrad" else "", fgcolor="#333", size=6, solidity=0.25)),
                text=[block_label(b, chunks) if op else "" for b in bs], textposition="inside",
                insidetextanchor="middle", textangle=0,
                textfont=dict(color="white" if phase == "fwd" else "#222", size=fonts["bar"]),
                name=f"{phase}-{kind}", showlegend=False,
                customdata=[[b.start * 1e3, b.end * 1e3, b.busy * 1e3, b.events, b.unit + 1, b.chunk + 1] for b in bs],
                hovertemplate=(f"<b>{PHASE_NAMES[phase]}</b>"
                               + (f", {unit} %{{customdata[4]}}" if phase != "update" else "")
                               + (", chunk %{customdata[5]}" if chunks and phase != "update" else "")
                               + "<br>%{y}: %{customdata[0]:.4g} → %{customdata[1]:.4g} ms"
                               + ("<br>%{customdata[3]} ops, busy %{customdata[2]:.4g} ms" if op else
                                  "<br>%{customdata[3]} transfers") + "<extra></extra>")))
    return traces


def _legend(units: list[int], unit: str, has_w: bool, fonts: dict, per_unit_max: int = 24) -> list:
    entries = []
    if len(units) <= per_unit_max:
        entries += [go.Bar(orientation="h", y=[None], x=[None], name=f"{unit} {u + 1}", marker_color=unit_color(u),
                           hoverinfo="skip", showlegend=True) for u in units]
    shades = [("fwd", "F k: forward (full colour)"), ("bwd", "B k: backward (lighter)")]
    if has_w:
        shades.append(("wgrad", "W k: weight gradient (lightest, hatched)"))
    for phase, text in shades:
        entries.append(go.Bar(orientation="h", y=[None], x=[None], name=text, hoverinfo="skip", showlegend=True,
                              marker=dict(color=_phase_shade(LEGEND_BASE, phase),
                                          pattern=dict(shape="/" if phase == "wgrad" else "", fgcolor="#333"))))
    entries.append(go.Bar(orientation="h", y=[None], x=[None], name="U: weight update", marker_color=UPDATE_COLOR,
                          hoverinfo="skip", showlegend=True))
    return entries


def _layout(fig, rows: list[str], labels: list[str], n_devices: int, x_max: float, title: str, fonts: dict,
            legend_entries: int, big: bool) -> None:
    shapes = []
    if 0 < n_devices < len(rows):
        shapes.append(dict(type="line", xref="paper", x0=0, x1=1, y0=n_devices - 0.5, y1=n_devices - 0.5,
                           line=dict(color="#999", width=1, dash="dot")))
    legend_rows = -(-legend_entries // (4 if big else 6))
    fig.update_layout(
        **{**BASE_LAYOUT, "font": dict(size=fonts["base"])}, barmode="overlay", bargap=0, shapes=shapes,
        height=160 + fonts["row"] * len(rows) + (30 if big else 22) * legend_rows,
        title=dict(text=title, x=0, xanchor="left", font=dict(size=24 if big else 16)),
        uniformtext=dict(minsize=9, mode="hide"),
        xaxis=dict(title="time (ms)", range=[0, x_max * 1e3 * 1.01], showgrid=True, zeroline=False),
        yaxis=dict(title="stage device", type="category", categoryorder="array", categoryarray=labels,
                   range=[len(rows) - 0.5, -0.5], showgrid=False),
        legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, font=dict(size=fonts["legend"])))
    fig.update_layout(margin=dict(l=10, r=10, t=50 if big else 45, b=10))


def schedule_gantt(blocks, rows: list[str], n_devices: int, x_max: float, title: str, unit: str = "micro-batch",
                   *, chunks: bool = False, big: bool = False) -> go.Figure:
    """A schedule's timeline from :func:`placement_core.analysis.pipeline.schedule_blocks`: F k, B k and (ZB-H1)
    W k per micro-batch in its shades, ``F k·c`` through chunk c under interleaved 1F1B, updates grey,
    transfers thinner on the link rows, send/receive tasks as thin grey bars. ``x_max`` (seconds) is shared by
    the charts compared."""
    fonts = _fonts(big)
    labels = [r if i < n_devices else f"{r} (link)" for i, r in enumerate(rows)]
    overhead = [b for b in blocks if b.kind == "overhead"]
    work = [b for b in blocks if b.kind != "overhead"]
    fig = go.Figure(_bar_traces(work, labels, chunks, unit, fonts))
    if overhead:
        fig.add_trace(go.Bar(
            orientation="h", y=[labels[b.row] for b in overhead], base=[b.start * 1e3 for b in overhead],
            x=[(b.end - b.start) * 1e3 for b in overhead], width=0.25, marker=dict(color=OVERHEAD_COLOR),
            name=OVERHEAD_NAME, showlegend=True,
            hovertemplate="<b>message overhead</b><br>%{y}: %{base:.4g} ms, %{x:.4g} ms<extra></extra>"))
    units = sorted({b.unit for b in work if b.phase != "update"})
    has_w = any(b.phase == "wgrad" for b in work)
    legend = _legend(units, unit, has_w, fonts)
    for t in legend:
        fig.add_trace(t)
    _layout(fig, rows, labels, n_devices, x_max, title, fonts, len(legend) + bool(overhead), big)
    return fig


def animated_gantt(blocks, rows: list[str], n_devices: int, end: float, title: str, unit: str = "micro-batch",
                   *, chunks: bool = False, big: bool = False, frames: int = 40) -> go.Figure:
    """The schedule revealed step by step: a slider over ``frames`` instants and a play button; at each instant
    the work begun so far, a cursor, and the bubble so far shaded grey (:func:`placement_core.analysis.bubble.
    idle_intervals`: every gap on a stage row). The figure opens on the whole step."""
    fonts = _fonts(big)
    labels = [r if i < n_devices else f"{r} (link)" for i, r in enumerate(rows)]
    work = [b for b in blocks if b.kind != "overhead"]
    times = frame_times(end, frames)

    def data_at(t: float) -> list:
        shown = until(work, t)
        gaps = idle_intervals(shown, n_devices, t)
        bubble = go.Bar(orientation="h", y=[labels[r] for r, _, _ in gaps], base=[a * 1e3 for _, a, _ in gaps],
                        x=[(b - a) * 1e3 for _, a, b in gaps], width=0.9, name="bubble (idle)",
                        marker=dict(color=BUBBLE_COLOR, pattern=dict(shape="x", fgcolor="#888", size=8)),
                        showlegend=True, hovertemplate="<b>idle</b> %{y}: %{base:.4g} ms, %{x:.4g} ms<extra></extra>")
        idle = sum(b - a for _, a, b in gaps)
        cursor = go.Scatter(x=[t * 1e3, t * 1e3], y=[labels[0], labels[-1]], mode="lines", name="now",
                            line=dict(color="#222", width=2, dash="dot"), showlegend=False,
                            hovertemplate=f"{t * 1e3:.4g} ms: idle so far {idle * 1e3:.4g} ms over the stages"
                                          "<extra></extra>")
        return [bubble] + _bar_traces(shown, labels, chunks, unit, fonts) + [cursor]

    fig = go.Figure(data=data_at(times[-1]),
                    frames=[go.Frame(data=data_at(t), name=f"{t * 1e3:.4g}") for t in times])
    units = sorted({b.unit for b in work if b.phase != "update"})
    legend = _legend(units, unit, any(b.phase == "wgrad" for b in work), fonts)
    for t in legend:
        fig.add_trace(t)
    _layout(fig, rows, labels, n_devices, end, title, fonts, len(legend) + 1, big)
    play = dict(frame=dict(duration=140 if len(times) > 30 else 220, redraw=True), fromcurrent=False,
                transition=dict(duration=0), mode="immediate")
    fig.update_layout(
        height=fig.layout.height + 90,
        updatemenus=[dict(type="buttons", direction="left", x=0, y=1.0, xanchor="left", yanchor="bottom",
                          pad=dict(t=0, b=8), showactive=False,
                          buttons=[dict(label="▶ Play", method="animate", args=[None, play]),
                                   dict(label="❚❚ Pause", method="animate",
                                        args=[[None], dict(frame=dict(duration=0, redraw=False), mode="immediate")])])],
        sliders=[dict(active=len(times) - 1, x=0, len=1, y=0, yanchor="top", pad=dict(t=40),
                      currentvalue=dict(prefix="time: ", suffix=" ms", font=dict(size=fonts["legend"])),
                      steps=[dict(label=f"{t * 1e3:.3g}", method="animate",
                                  args=[[f"{t * 1e3:.4g}"], dict(frame=dict(duration=0, redraw=True),
                                                                  mode="immediate")]) for t in times])])
    fig.update_layout(margin=dict(l=10, r=10, t=90 if big else 80, b=10),
                      title=dict(text=title, x=0, xanchor="left", y=0.98, yanchor="top", font=dict(size=24 if big else 16)))
    return fig


def stage_memory_figure(devices: list[str], peaks: list[float], capacity: list[float], x_max: float | None = None,
                        title: str = "Peak memory per stage", big: bool = False) -> go.Figure:
    """Horizontal bars: each stage device's peak memory (GB), red past its capacity (a black tick)."""
    gb = [p / 1e9 for p in peaks]
    caps = [c / 1e9 for c in capacity]
    top = x_max / 1e9 if x_max else max(gb + [1e-9]) * 1.25
    fig = go.Figure(go.Bar(
        orientation="h", y=devices, x=gb, marker_color=["#E45756" if p > c else "#5B7FA6" for p, c in zip(gb, caps)],
        text=[f"{p:.3g} GB · {p / c:.0%}" if c else f"{p:.3g} GB" for p, c in zip(gb, caps)],
        textposition="auto", name="peak", showlegend=False, hovertemplate="%{y}: peak %{x:.4g} GB<extra></extra>"))
    shown = [(d, c) for d, c in zip(devices, caps) if c <= top]
    if shown:
        fig.add_trace(go.Scatter(x=[c for _, c in shown], y=[d for d, _ in shown], mode="markers", name="capacity",
                                 marker=dict(symbol="line-ns", size=22, line=dict(width=3, color="#222")),
                                 showlegend=False, hovertemplate="%{y}: capacity %{x:.4g} GB<extra></extra>"))
    fonts = _fonts(big)
    fig.update_layout(**{**BASE_LAYOUT, "font": dict(size=fonts["base"])}, height=95 + (42 if big else 30) * len(devices),
                      title=dict(text=title, x=0, font=dict(size=fonts["base"])),
                      xaxis=dict(title="memory (GB; tick: capacity)", range=[0, top]),
                      yaxis=dict(autorange="reversed", type="category"))
    fig.update_layout(margin=dict(l=10, r=10, t=35, b=10))
    return fig


def memory_by_schedule_figure(rows: list[dict], names: dict, capacity: dict, big: bool = False) -> go.Figure:
    """Peak memory of every stage (y) under every schedule (a bar each), capacities as ticks. ``rows``:
    {"schedule", "device", "peak"} dicts in stage order."""
    fonts = _fonts(big)
    fig = go.Figure()
    devices = list(dict.fromkeys(r["device"] for r in rows))
    for schedule in dict.fromkeys(r["schedule"] for r in rows):
        rs = [r for r in rows if r["schedule"] == schedule]
        fig.add_trace(go.Bar(orientation="h", y=[r["device"] for r in rs], x=[r["peak"] / 1e9 for r in rs],
                             name=names.get(schedule, schedule), marker_color=SCHEDULE_COLORS.get(schedule, "#555"),
                             text=[fmt_bytes(r["peak"]) for r in rs], textposition="auto",
                             hovertemplate=f"{names.get(schedule, schedule)} · %{{y}}: %{{x:.4g}} GB<extra></extra>"))
    peak = max((r["peak"] for r in rows), default=0.0) / 1e9
    caps = [(d, capacity[d] / 1e9) for d in devices if capacity.get(d) and capacity[d] / 1e9 <= 1.5 * max(peak, 1e-9)]
    if caps:
        fig.add_trace(go.Scatter(x=[c for _, c in caps], y=[d for d, _ in caps], mode="markers", name="capacity",
                                 marker=dict(symbol="line-ns", size=28, line=dict(width=3, color="#222")),
                                 hovertemplate="%{y}: capacity %{x:.4g} GB<extra></extra>"))
    fig.update_layout(**{**BASE_LAYOUT, "font": dict(size=fonts["base"])}, barmode="group",
                      height=140 + (26 if big else 18) * len(devices) * max(1, len(fig.data)),
                      title=dict(text="Peak memory per stage, every schedule", x=0),
                      xaxis=dict(title="peak memory (GB)", rangemode="tozero"),
                      yaxis=dict(title="stage device", autorange="reversed", type="category"),
                      legend=dict(orientation="h", y=-0.2, x=0))
    return fig


PART_NAMES = {"schedule_s": "the schedule (equal stages)", "imbalance_s": "imbalance between stages",
              "updates_s": "weight updates", "transfers_s": "transfers"}
PART_COLORS = {"schedule_s": "#7F8C8D", "imbalance_s": "#E67E22", "updates_s": "#A0A0A0", "transfers_s": "#2980B9"}


def breakdown_figure(parts: list[tuple[str, dict]], big: bool = False) -> go.Figure:
    """Each schedule's bubble (seconds idle, summed over the stages) split into its parts, stacked
    (:func:`placement_core.analysis.bubble.bubble_breakdown`)."""
    fonts = _fonts(big)
    fig = go.Figure()
    for key, label in PART_NAMES.items():
        fig.add_trace(go.Bar(orientation="h", y=[n for n, _ in parts], x=[p[key] * 1e3 for _, p in parts],
                             name=label, marker_color=PART_COLORS[key],
                             text=[f"{p[key] * 1e3:.3g} ms" if abs(p[key]) > 0.04 * max(p["idle_s"], 1e-12) else ""
                                   for _, p in parts], textposition="inside",
                             hovertemplate=f"{label}: %{{x:.4g}} ms<extra>%{{y}}</extra>"))
    fig.update_layout(**{**BASE_LAYOUT, "font": dict(size=fonts["base"])}, barmode="relative",
                      height=140 + (60 if big else 44) * len(parts), title=dict(text="Where the bubble comes from", x=0),
                      xaxis=dict(title="idle time, summed over the stages (ms)"),
                      yaxis=dict(autorange="reversed", type="category"), legend=dict(orientation="h", y=-0.3, x=0))
    return fig


def measured_figure(rows: list[dict], names: dict, big: bool = False) -> go.Figure:
    """Measured (a pipelined benchmark) and simulated bubble per stored run, side by side."""
    fonts = _fonts(big)
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
