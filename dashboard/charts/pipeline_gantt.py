"""The Pipeline page's timelines: schedules on one time axis (F, B, W and updates in their shades) and the step
revealed frame by frame with the bubble shaded (the lecture). The page's bar charts (memory per stage, the
bubble's parts, measured beside simulated, the sweep over m) are :mod:`.pipeline_bars`'s. Numbers come from
``placement_core.analysis``; this module only draws.

Micro-batch k is drawn in ``unit_color(k)``: Plotly's Dark24, 24 colours that stay apart (CIE ΔE ≥ 26 between
any two), so a lecture can show 16 or more micro-batches; beyond 24 they repeat, the labels still say which.
``big=True`` is the presentation mode: larger type and rows for a projector.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import qualitative

from placement_core.analysis.bubble import frame_times, idle_intervals, until

from .style import BASE_LAYOUT, OVERHEAD_COLOR, OVERHEAD_NAME, fast_figure, mix

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
    return {"fwd": base, "bwd": mix(base, "#ffffff", 0.45), "wgrad": mix(base, "#ffffff", 0.7),
            "update": UPDATE_COLOR}.get(phase, base)


LEGEND_BASE = "#5B6770"  # the shades' legend swatches: a slate grey no micro-batch is drawn in (Dark24 has none)


def font_sizes(big: bool) -> dict:
    return {"base": 20 if big else 13, "bar": 16 if big else 12, "row": 54 if big else 40, "legend": 16 if big else 11}


def _axis(big: bool, **kw) -> dict:
    """An axis; in presentation mode with its tick labels and title as large as the legend's (Streamlit's
    theme would draw them at its small default)."""
    if big:
        kw["tickfont"] = dict(size=16)
        kw["title"] = {**kw["title"], "font": dict(size=18)}
    return kw


def block_label(b, chunks: bool) -> str:
    if b.phase == "update":
        return "U"
    tag = f"{PHASE_LETTERS.get(b.phase, '?')}{b.unit + 1}"
    return f"{tag}·{b.chunk + 1}" if chunks else tag


def _bar_traces(blocks, labels: list[str], chunks: bool, unit: str, fonts: dict, legend: bool = True) -> list:
    """One trace per phase (per-bar colours), work bars full height, transfers thinner: a fixed set of traces,
    so that animation frames can replace their data. Plain dicts, spelled as Plotly's validation leaves them
    (tests/test_pipeline_figures.py compares them): the page builds these figures at every change of m."""
    traces = []
    for phase in ("fwd", "bwd", "wgrad", "update"):
        for kind in ("op", "transfer"):
            bs = [b for b in blocks if b.phase == phase and b.kind == kind]
            op = kind == "op"
            traces.append(dict(
                type="bar", orientation="h", y=[labels[b.row] for b in bs], base=[b.start * 1e3 for b in bs],
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
        entries += [dict(type="bar", orientation="h", y=[None], x=[None], name=f"{unit} {u + 1}",
                         marker=dict(color=unit_color(u)), hoverinfo="skip", showlegend=True) for u in units]
    shades = [("fwd", "F k: forward (full colour)"), ("bwd", "B k: backward (lighter)")]
    if has_w:
        shades.append(("wgrad", "W k: weight gradient (lightest, hatched)"))
    for phase, text in shades:
        entries.append(dict(type="bar", orientation="h", y=[None], x=[None], name=text, hoverinfo="skip",
                            showlegend=True, marker=dict(color=_phase_shade(LEGEND_BASE, phase),
                                                         pattern=dict(shape="/" if phase == "wgrad" else "",
                                                                      fgcolor="#333"))))
    entries.append(dict(type="bar", orientation="h", y=[None], x=[None], name="U: weight update",
                        marker=dict(color=UPDATE_COLOR), hoverinfo="skip", showlegend=True))
    return entries


PROJECTOR_HEIGHT = 640  # px: presentation mode keeps a timeline within a 1280 × 720 window below its header


def _layout(rows: list[str], labels: list[str], n_devices: int, x_max: float, title: str, fonts: dict,
            legend_entries: int, big: bool, extra: int = 0) -> dict:
    shapes = []
    if 0 < n_devices < len(rows):
        shapes.append(dict(type="line", xref="paper", x0=0, x1=1, y0=n_devices - 0.5, y1=n_devices - 0.5,
                           line=dict(color="#999", width=1, dash="dot")))
    legend_rows = -(-legend_entries // (4 if big else 6))
    fixed = 160 + (30 if big else 22) * legend_rows + extra
    row = fonts["row"] if not big else max(28, min(fonts["row"], (PROJECTOR_HEIGHT - fixed) // max(1, len(rows))))
    return {**BASE_LAYOUT, "font": dict(size=fonts["base"]), "barmode": "overlay", "bargap": 0, "shapes": shapes,
            "height": fixed - extra + row * len(rows),
            "title": dict(text=title, x=0, xanchor="left", font=dict(size=24 if big else 16)),
            "uniformtext": dict(minsize=9, mode="hide"),
            "xaxis": _axis(big, title=dict(text="time (ms)"), range=[0, x_max * 1e3 * 1.01], showgrid=True,
                           zeroline=False),
            "yaxis": _axis(big, title=dict(text="stage device"), type="category", categoryorder="array",
                           categoryarray=labels, range=[len(rows) - 0.5, -0.5], showgrid=False),
            "legend": dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0,
                           font=dict(size=fonts["legend"])),
            "margin": dict(l=10, r=10, t=50 if big else 45, b=10)}


def schedule_gantt(blocks, rows: list[str], n_devices: int, x_max: float, title: str, unit: str = "micro-batch",
                   *, chunks: bool = False, big: bool = False, legend: bool = True) -> go.Figure:
    """A schedule's timeline from :func:`placement_core.analysis.pipeline.schedule_blocks`: F k, B k and (ZB-H1)
    W k per micro-batch in its shades, ``F k·c`` through chunk c under interleaved 1F1B, updates grey,
    transfers thinner on the link rows, send/receive tasks as thin grey bars. ``x_max`` (seconds) is shared by
    the charts compared. ``legend=False`` leaves the legend out (the page's later timelines: the same colours,
    and a third of a timeline's drawing time in the browser)."""
    fonts = font_sizes(big)
    labels = [r if i < n_devices else f"{r} (link)" for i, r in enumerate(rows)]
    overhead = [b for b in blocks if b.kind == "overhead"]
    work = [b for b in blocks if b.kind != "overhead"]
    data = _bar_traces(work, labels, chunks, unit, fonts)
    if overhead:
        data.append(dict(
            type="bar", orientation="h", y=[labels[b.row] for b in overhead], base=[b.start * 1e3 for b in overhead],
            x=[(b.end - b.start) * 1e3 for b in overhead], width=0.25, marker=dict(color=OVERHEAD_COLOR),
            name=OVERHEAD_NAME, showlegend=legend,
            hovertemplate="<b>message overhead</b><br>%{y}: %{base:.4g} ms, %{x:.4g} ms<extra></extra>"))
    units = sorted({b.unit for b in work if b.phase != "update"})
    has_w = any(b.phase == "wgrad" for b in work)
    entries = _legend(units, unit, has_w, fonts) if legend else []
    layout = _layout(rows, labels, n_devices, x_max, title, fonts, len(entries) + bool(overhead and legend), big)
    if not legend:
        layout["showlegend"] = False
    return fast_figure(data + entries, layout)


def animated_gantt(blocks, rows: list[str], n_devices: int, end: float, title: str, unit: str = "micro-batch",
                   *, chunks: bool = False, big: bool = False, frames: int = 40) -> go.Figure:
    """The schedule revealed step by step: a slider over ``frames`` instants and a play button; at each instant
    the work begun so far, a cursor, and the bubble so far shaded grey (:func:`placement_core.analysis.bubble.
    idle_intervals`: every gap on a stage row). The figure opens on the whole step."""
    fonts = font_sizes(big)
    labels = [r if i < n_devices else f"{r} (link)" for i, r in enumerate(rows)]
    work = [b for b in blocks if b.kind != "overhead"]
    times = frame_times(end, frames)

    def data_at(t: float) -> list:
        shown = until(work, t)
        gaps = idle_intervals(shown, n_devices, t)
        bubble = dict(type="bar", orientation="h", y=[labels[r] for r, _, _ in gaps],
                      base=[a * 1e3 for _, a, _ in gaps], x=[(b - a) * 1e3 for _, a, b in gaps], width=0.9,
                      name="bubble (idle)",
                      marker=dict(color=BUBBLE_COLOR, pattern=dict(shape="x", fgcolor="#888", size=8)),
                      showlegend=True, hovertemplate="<b>idle</b> %{y}: %{base:.4g} ms, %{x:.4g} ms<extra></extra>")
        idle = sum(b - a for _, a, b in gaps)
        cursor = dict(type="scatter", x=[t * 1e3, t * 1e3], y=[labels[0], labels[-1]], mode="lines", name="now",
                      line=dict(color="#222", width=2, dash="dot"), showlegend=False,
                      hovertemplate=f"{t * 1e3:.4g} ms: idle so far {idle * 1e3:.4g} ms over the stages"
                                    "<extra></extra>")
        return [bubble] + _bar_traces(shown, labels, chunks, unit, fonts) + [cursor]

    units = sorted({b.unit for b in work if b.phase != "update"})
    legend = _legend(units, unit, any(b.phase == "wgrad" for b in work), fonts)
    layout = _layout(rows, labels, n_devices, end, title, fonts, len(legend) + 1, big, extra=90)
    play = dict(frame=dict(duration=140 if len(times) > 30 else 220, redraw=True), fromcurrent=False,
                transition=dict(duration=0), mode="immediate")
    layout.update(
        height=layout["height"] + 90,
        updatemenus=[dict(type="buttons", direction="left", x=0, y=1.0, xanchor="left", yanchor="bottom",
                          pad=dict(t=0, b=8), showactive=False,
                          buttons=[dict(label="▶ Play", method="animate", args=[None, play]),
                                   dict(label="❚❚ Pause", method="animate",
                                        args=[[None], dict(frame=dict(duration=0, redraw=False), mode="immediate")])])],
        sliders=[dict(active=len(times) - 1, x=0, len=1, y=0, yanchor="top", pad=dict(t=40),
                      currentvalue=dict(prefix="time: ", suffix=" ms", font=dict(size=fonts["legend"])),
                      steps=[dict(label=f"{t * 1e3:.3g}", method="animate",
                                  args=[[f"{t * 1e3:.4g}"], dict(frame=dict(duration=0, redraw=True),
                                                                  mode="immediate")]) for t in times])],
        margin=dict(l=10, r=10, t=90 if big else 80, b=10),
        title=dict(text=title, x=0, xanchor="left", y=0.98, yanchor="top", font=dict(size=24 if big else 16)))
    fig = fast_figure(data_at(times[-1]) + legend, layout)
    # the frames unvalidated too: 40 frames of every bar are most of this figure's cost
    return go.Figure({"data": fig._data, "layout": fig._layout,
                      "frames": [dict(data=data_at(t), name=f"{t * 1e3:.4g}") for t in times]}, _validate=False)
