"""The Archive page's charts: the heatmap of a MAP-Elites archive, an elite's device load, and placements side by
side as strips of ops coloured by device."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from placement_core.analysis.archive_view import HeatmapData

from .style import BASE_LAYOUT, color

OVER_MEMORY = "✕ over memory (penalised)"


def _fmt_ms(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _nice_ticks(low: float, high: float, n: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 × 10^k steps) inside [low, high]."""
    span = high - low
    if not span > 0:
        return [low]
    raw = span / n
    mag = 10 ** np.floor(np.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = np.ceil(low / step) * step
    return [float(v) for v in np.arange(first, high + step * 1e-9, step)]


def heatmap_figure(h: HeatmapData, selected: tuple[int, int] | None = None, scale: str = "clipped") -> go.Figure:
    """The archive map. Trace 0: the objective colours (``scale``: ``clipped`` at a high percentile of the
    elites that fit, see :func:`color_range`, cells above it marked ▲; ``log``; ``linear``); trace 1:
    one transparent, clickable marker per cell (customdata = [row, column]; the hover shows the
    true objective, or "empty niche"); trace 2: empty niches in grey with a dot; then the outline of the
    selected cell."""
    from placement_core.analysis.archive_view import color_range

    ny, nx = h.z.shape
    ms = h.z * 1e3
    filled = np.isfinite(ms)
    marks = np.full(ms.shape, "", dtype=object)
    if scale == "log":
        with np.errstate(divide="ignore", invalid="ignore"):
            colour = np.log10(np.where(filled & (ms > 0), ms, np.nan))
        values = colour[np.isfinite(colour)]
        low, high = (float(values.min()), float(values.max())) if len(values) else (0.0, 1.0)
        if not high > low:
            high = low + 1e-6
        decades = range(int(np.floor(low)), int(np.ceil(high)) + 1)
        ticks = [m * 10.0 ** k for k in decades for m in (1, 2, 5) if low <= np.log10(m * 10.0 ** k) <= high]
        if len(ticks) < 2:
            ticks = [10 ** low, 10 ** high]
        bar = dict(title="best objective<br>(ms, log scale)", tickvals=[float(np.log10(t)) for t in ticks],
                   ticktext=[_fmt_ms(t) for t in ticks])
    elif scale == "linear":
        colour = ms
        values = ms[filled]
        low, high = (float(values.min()), float(values.max())) if len(values) else (0.0, 1.0)
        if not high > low:
            high = low + max(abs(low), 1.0) * 1e-6
        bar = dict(title="best objective (ms)")
    else:
        r = color_range(h)
        low, high = r.low * 1e3, r.high * 1e3
        colour = np.minimum(ms, high)
        above = filled & (ms > high) & (h.fits if h.fits is not None else True)
        marks[above] = "▲"  # slow but fits: above the colour scale
        ticks = [t for t in _nice_ticks(low, high) if t < high - (high - low) * 0.08] + [high]
        # the blank last line keeps the title clear of the top tick ("≥ ...") that sits at the bar's end
        bar = dict(title=f"best objective (ms)<br>clipped at the<br>{r.basis}<br> " if r.clipped
                   else "best objective (ms)",
                   tickvals=ticks, ticktext=[_fmt_ms(t) for t in ticks[:-1]] +
                   [("≥ " if r.clipped else "") + _fmt_ms(high)])
    fig = go.Figure(go.Heatmap(
        z=colour, x=list(range(nx)), y=list(range(ny)), zmin=low, zmax=high, colorscale="Viridis_r",
        hoverinfo="skip", colorbar=bar, xgap=1, ygap=1, text=marks, texttemplate="%{text}",
        textfont=dict(color="white", size=11)))
    # One transparent marker per cell, filled or empty, with hoverdistance -1: the hover (and a click) always
    # lands on the marker nearest the cursor, i.e. the cell under it. Only scatter points can be selected.
    cells = h.cells()
    fig.add_trace(go.Scatter(
        x=[c[1] for c in cells], y=[c[0] for c in cells], mode="markers",
        customdata=[[c[0], c[1]] for c in cells],  # plain lists: a numpy array arrives as a typed array
        hovertext=[h.hover[a][b].replace("<br>", " (above the colour scale)<br>", 1) if marks[a, b] else h.hover[a][b]
                   for a, b in cells],
        hoverinfo="text", showlegend=False, name="cells",
        marker=dict(symbol="square", size=16, color="rgba(0,0,0,0)"),
        selected=dict(marker=dict(opacity=1)), unselected=dict(marker=dict(opacity=1))))
    fig.add_trace(go.Heatmap(  # empty niches: grey with a dot
        z=np.where(filled, np.nan, 0.0), x=list(range(nx)), y=list(range(ny)),
        colorscale=[[0, "#ececec"], [1, "#ececec"]], showscale=False, xgap=1, ygap=1,
        text=np.where(filled, "", "·"), texttemplate="%{text}", textfont=dict(color="#9a9a9a", size=12),
        hoverinfo="skip", name="empty niches"))
    over = np.argwhere(filled & ~h.fits) if h.fits is not None else np.zeros((0, 2), int)
    if len(over):  # over memory: a cross on the cell, whatever its colour, never taken for merely slow
        fig.add_trace(go.Scatter(
            x=over[:, 1].tolist(), y=over[:, 0].tolist(), mode="markers", name=OVER_MEMORY, hoverinfo="skip",
            marker=dict(symbol="x-thin-open", size=15, color="#d62728", line=dict(width=2.5, color="#d62728")),
            showlegend=True))
    if selected is not None:
        fig.add_trace(go.Scatter(x=[selected[1]], y=[selected[0]], mode="markers", hoverinfo="skip",
                                 showlegend=False, marker=dict(symbol="square-open", size=18,
                                                               color="#E45756", line=dict(width=3))))
    x_text = [html.escape(t) for t in h.x_labels]
    fig.update_layout(**BASE_LAYOUT, height=max(300, 100 + 40 * ny), clickmode="event+select", hoverdistance=-1,
                      xaxis=dict(title=h.x_title, tickmode="array", tickvals=list(range(nx)), ticktext=x_text,
                                 tickangle=-45 if nx > 12 else 0, tickfont=dict(size=11), showgrid=False,
                                 zeroline=False, range=[-0.5, nx - 0.5]),
                      yaxis=dict(title=h.y_title, tickmode="array", tickvals=list(range(ny)),
                                 ticktext=[html.escape(t) for t in h.y_labels], showgrid=False, zeroline=False,
                                 range=[-0.5, ny - 0.5]),
                      plot_bgcolor="white", showlegend=bool(len(over)),
                      legend=dict(orientation="h", x=0, y=1.02, yanchor="bottom"))
    return fig


def device_load_figure(summary: dict, capacity: dict) -> go.Figure:
    from plotly.subplots import make_subplots
    names = list(summary["busy_s"])
    fig = make_subplots(rows=1, cols=3, subplot_titles=("Busy time per device", "Peak memory vs capacity",
                                                        "Bytes per channel"), horizontal_spacing=0.09)
    fig.add_trace(go.Bar(x=names, y=[summary["busy_s"][n] * 1e3 for n in names],
                         marker_color=[color(i) for i in range(len(names))], showlegend=False,
                         hovertemplate="%{x}: %{y:.3g} ms<extra></extra>"), row=1, col=1)
    peaks = [summary["peak_memory"][n] / 1e9 for n in names]
    caps = [capacity[n] / 1e9 for n in names]
    over = [p > c for p, c in zip(peaks, caps)]
    fig.add_trace(go.Bar(x=names, y=peaks, name="peak", showlegend=False,
                         marker_color=["#E45756" if o else color(i) for i, o in enumerate(over)],
                         hovertemplate="%{x}: peak %{y:.3g} GB<extra></extra>"), row=1, col=2)
    top = max(peaks + [1e-9]) * 1.6
    shown_caps = [c if c <= top else None for c in caps]
    fig.add_trace(go.Scatter(x=names, y=shown_caps, mode="markers", name="capacity", showlegend=False,
                             marker=dict(symbol="line-ew", size=34, line=dict(width=3, color="#333")),
                             hovertemplate="%{x}: capacity %{y:.3g} GB<extra></extra>"), row=1, col=2)
    chans = list(summary["channel_bytes"])
    fig.add_trace(go.Bar(x=chans, y=[summary["channel_bytes"][c] / 1e6 for c in chans], showlegend=False,
                         marker_color="#72B7B2", hovertemplate="%{x}: %{y:.3g} MB<extra></extra>"), row=1, col=3)
    fig.update_yaxes(title_text="busy (ms)", row=1, col=1)
    fig.update_yaxes(title_text="memory (GB)", row=1, col=2, range=[0, top])
    fig.update_yaxes(title_text="transferred (MB)", row=1, col=3)
    fig.update_layout(**BASE_LAYOUT, height=300)
    fig.update_layout(margin=dict(l=10, r=10, t=50, b=10))
    return fig


def placement_strip_figure(placements: list, labels: list[str], device_names: list[str], splits=()) -> go.Figure:
    """Each placement as a row of ops (topological order) coloured by device; an op split over several devices
    (``splits``) in its first device's colour, marked, its split in the hover."""
    from placement_core.model.sharding import gene_devices, gene_label
    nd = len(device_names)
    genes = np.array([np.asarray(p) for p in placements], dtype=int)
    z = np.array([[gene_devices(int(v), nd, splits)[0] for v in row] for row in genes], dtype=float)
    scale = []
    for d in range(nd):
        scale += [[d / nd, color(d)], [(d + 1) / nd, color(d)]]
    fig = go.Figure(go.Heatmap(
        z=z, y=labels, colorscale=scale, zmin=-0.5, zmax=nd - 0.5, xgap=0, ygap=4, showscale=False,
        customdata=np.array([[html.escape(gene_label(int(v), device_names, splits), quote=False) for v in row]
                             for row in genes]),
        hovertemplate="op #%{x}: %{customdata}<extra>%{y}</extra>"))
    rows, cols = np.nonzero(genes >= nd)
    if len(rows):  # split ops: a mark over the cell (the colour is the first device's)
        fig.add_trace(go.Scatter(x=cols, y=[labels[r] for r in rows], mode="markers", name="split op",
                                 marker=dict(symbol="line-ns-open", size=10, color="#111111", line=dict(width=2)),
                                 hovertext=[html.escape(gene_label(int(genes[r, c]), device_names, splits),
                                                        quote=False) for r, c in zip(rows, cols)],
                                 hovertemplate="op #%{x}: %{hovertext}<extra>%{y}</extra>"))
    for d, name in enumerate(device_names):  # a legend of device colours
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(symbol="square", size=12, color=color(d))))
    fig.update_layout(**BASE_LAYOUT, height=140 + 45 * len(placements),
                      xaxis=dict(title="op (topological order)"), yaxis=dict(autorange="reversed"),
                      legend=dict(orientation="h", y=-0.55), plot_bgcolor="white")
    return fig


def quality_figure(points: list) -> go.Figure:
    """Coverage and QD-score against evaluations, as pyribs reports them. ``points``: (evaluations, coverage,
    elites, sum of their objectives, their largest objective). The objective is minimised, so an elite scores
    ``ref - objective`` with ``ref`` the largest objective any elite had during the run (fixed for the whole
    curve, like pyribs' qd_score_offset): QD-score = elites x ref - sum of objectives, in seconds."""
    from plotly.subplots import make_subplots

    ref = max((p[4] for p in points), default=0.0)
    x = [p[0] for p in points]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Coverage (niches filled)", "QD-score"),
                        horizontal_spacing=0.12)
    fig.add_trace(go.Scatter(x=x, y=[p[1] * 100 for p in points], mode="lines", name="coverage",
                             line=dict(shape="hv", color=color(0)), showlegend=False,
                             hovertemplate="%{x:,} evaluations: %{y:.3g}% of niches<extra></extra>"), row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=[p[2] * ref - p[3] for p in points], mode="lines", name="QD-score",
                             line=dict(shape="hv", color=color(1)), showlegend=False,
                             hovertemplate="%{x:,} evaluations: QD-score %{y:.4g} s<extra></extra>"), row=1, col=2)
    fig.update_xaxes(title_text="evaluations")
    fig.update_yaxes(title_text="coverage (%)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text=f"Σ ({ref:.3g} s − objective) (s)", rangemode="tozero", row=1, col=2)
    fig.update_layout(**BASE_LAYOUT, height=280)
    fig.update_layout(margin=dict(l=10, r=10, t=40, b=10))
    return fig
