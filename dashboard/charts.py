"""Plotly figures for the pages. Numbers come from ``placement_core.analysis``; this module only draws.

Conventions: times on axes in milliseconds, memory in GB, tensor sizes in MB,
every quantitative axis titled with its unit, WebGL traces where there can be
thousands of points.
"""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from placement_core.analysis import GanttSegments, LayeredLayout, edge_buckets, fmt_bytes, scale_sizes
from placement_core.analysis.layout import edge_path, spread
from placement_core.analysis.trace import PHASE_ORDER as TRACE_PHASE_ORDER
from placement_core.analysis.archive_view import HeatmapData

PALETTE = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#EECA3B", "#9D755D",
           "#FF9DA6", "#BAB0AC", "#1F77B4", "#2CA02C"]
KIND_COLORS = {"input": "#9E9E9E", "conv": "#4C78A8", "deconv": "#2F5B88", "linear": "#F58518",
               "matmul": "#F58518", "attention": "#D35400", "pool": "#54A24B", "norm": "#B279A2",
               "activation": "#EECA3B", "elementwise": "#72B7B2", "concat": "#E45756", "reshape": "#BAB0AC",
               "dropout": "#9D755D", "softmax": "#FF9DA6", "embedding": "#8E6C8A", "upsample": "#3B8B5A",
               "other": "#7F7F7F"}
PHASE_NAMES = {"fwd": "forward", "bwd": "backward", "update": "weight update", "allreduce": "all-reduce"}
BASE_LAYOUT = dict(template="plotly_white", margin=dict(l=10, r=10, t=40, b=10),
                   font=dict(size=13), hoverlabel=dict(align="left"))


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def _mix(hex_color: str, other: str, t: float) -> str:
    a = [int(hex_color[k:k + 2], 16) for k in (1, 3, 5)]
    b = [int(other[k:k + 2], 16) for k in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(a, b))


OVERHEAD_COLOR = "#707070"  # send and receive tasks (a device's message overhead): thin grey bars
OVERHEAD_NAME = "send / receive (message overhead)"


def shade(batch: int, phase: str) -> str:
    """Forward in the batch's colour, backward lighter, weight update greyer."""
    base = color(batch)
    return {"fwd": base, "bwd": _mix(base, "#ffffff", 0.5), "update": _mix(base, "#808080", 0.6),
            "allreduce": _mix(base, "#000000", 0.45)}.get(phase, base)  # a split op's weight gradients, summed


# -- Network ----------------------------------------------------------------------------------------

def network_figure(graph, layout: LayeredLayout, color_by: str = "kind", placement=None,
                   device_names=None) -> go.Figure:
    # SVG up to a few thousand ops: headless and software-rendered browsers draw WebGL slowly (seconds for a
    # 300-op graph); WebGL only where SVG would hold too many elements.
    scatter = go.Scatter if len(graph.ops) <= 3000 else go.Scattergl
    x, y = layout.x, layout.y
    fig = go.Figure()
    widths = [0.6, 1.2, 2.2, 3.6]
    buckets = edge_buckets(graph.edges(), buckets=4)
    for k, b in enumerate(buckets):
        xs, ys = [], []
        for s, t, _ in b["edges"]:
            ex, ey = edge_path(x[s], y[s], x[t], y[t])
            xs += ex + [None]
            ys += ey + [None]
        fig.add_trace(scatter(
            x=xs, y=ys, mode="lines", hoverinfo="skip", line=dict(width=widths[k], color="rgba(90,90,110,0.45)"),
            name=f"tensor {fmt_bytes(b['low'])}–{fmt_bytes(b['high'])}", legendgroup="edges",
            legendgrouptitle_text="Edges (tensor size)" if k == 0 else None))
    ops = graph.ops
    compute = np.array([o.fwd_flops + o.bwd_flops for o in ops])
    sizes = scale_sizes(compute, 5, 26)
    if color_by == "device" and placement is not None:
        groups = {name: [i for i in range(len(ops)) if placement[i] == d] for d, name in enumerate(device_names)}
        colors = {name: color(d) for d, name in enumerate(device_names)}
        title = "Device"
    else:
        kinds = sorted({o.kind for o in ops}, key=lambda k: list(KIND_COLORS).index(k) if k in KIND_COLORS else 99)
        groups = {k: [i for i, o in enumerate(ops) if o.kind == k] for k in kinds}
        colors = {k: KIND_COLORS.get(k, "#7F7F7F") for k in kinds}
        title = "Op kind"
    first = True
    for name, idx in groups.items():
        if not idx:
            continue
        hover = [f"<b>{html.escape(ops[i].name)}</b><br>{html.escape(ops[i].kind)}"
                 f"<br>forward {ops[i].fwd_flops / 1e9:.3g} GFLOP · backward {ops[i].bwd_flops / 1e9:.3g} GFLOP"
                 f"<br>output {fmt_bytes(ops[i].output_bytes)} · parameters {fmt_bytes(ops[i].param_bytes)}"
                 + (f"<br>on {html.escape(device_names[placement[i]])}" if placement is not None and device_names
                    else "")
                 for i in idx]
        fig.add_trace(scatter(
            x=x[idx], y=y[idx], mode="markers", name=str(name), hovertext=hover, hoverinfo="text",
            marker=dict(size=sizes[idx], color=colors[name], line=dict(width=0.5, color="#333")),
            legendgroup="nodes", legendgrouptitle_text=title if first else None))
        first = False
    fig.update_layout(**BASE_LAYOUT, height=460, showlegend=True,
                      legend=dict(orientation="v", x=1.01, y=1, groupclick="toggleitem"),
                      xaxis=dict(title="depth (layers from the input; marker area ∝ compute)", showgrid=False,
                                 zeroline=False),
                      yaxis=dict(visible=False, range=[min(float(y.min()), -1.5) - 0.6,
                                                       max(float(y.max()), 1.5) + 1.2]), dragmode="pan")
    return fig


# -- Devices ----------------------------------------------------------------------------------------

def links_figure(devices) -> go.Figure:
    """Devices on top, channels below, a line for every device a channel's routes touch."""
    names = devices.names
    nd, nc = len(names), len(devices.channels)
    dx = {n: (i - (nd - 1) / 2) for i, n in enumerate(names)}
    cx = [(c - (nc - 1) / 2) * max(nd - 1, 1) / max(nc - 1, 1) for c in range(nc)]
    fig = go.Figure()
    for c, ch in enumerate(devices.channels):
        touched: dict[str, int] = {}
        for a, b in ch.routes:
            touched[a] = touched.get(a, 0) + 1
            touched[b] = touched.get(b, 0) + 1
        for dev, k in touched.items():
            fig.add_trace(go.Scatter(x=[dx[dev], cx[c]], y=[1, 0], mode="lines", hoverinfo="skip",
                                     line=dict(width=1 + 0.6 * k, color=color(c)), opacity=0.55,
                                     showlegend=False))
    fig.add_trace(go.Scatter(
        x=[dx[n] for n in names], y=[1] * nd, mode="markers+text", text=names, textposition="top center",
        marker=dict(size=30, symbol="square", color=["#37474F" if d.kind == "gpu" else "#90A4AE"
                                                      for d in devices.devices]),
        hovertext=[f"<b>{d.name}</b> ({d.kind}) {d.model}<br>{d.peak_flops / 1e12:.3g} TFLOP/s · "
                   f"{fmt_bytes(d.memory_bytes)} memory · {d.mem_bandwidth / 1e9:.3g} GB/s" for d in devices.devices],
        hoverinfo="text", showlegend=False))
    fig.add_trace(go.Scatter(
        x=cx, y=[0] * nc, mode="markers+text", text=[f"{c.name}<br>{c.bandwidth / 1e9:.3g} GB/s" for c in devices.channels],
        textposition="bottom center", marker=dict(size=20, symbol="diamond", color=[color(c) for c in range(nc)]),
        hovertext=[f"<b>{ch.name}</b><br>{ch.bandwidth / 1e9:.3g} GB/s · latency {ch.latency * 1e6:.3g} µs"
                   + (f"<br>measured transfer curve ({len(ch.transfer_curve)} points) replaces both"
                      if ch.transfer_curve else "")
                   + f"<br>{len(ch.routes)} route(s) share it" for ch in devices.channels],
        hoverinfo="text", showlegend=False))
    fig.update_layout(**BASE_LAYOUT, height=330, title="Links: devices (top) and the channels they use (bottom)",
                      xaxis=dict(visible=False), yaxis=dict(visible=False, range=[-0.45, 1.35]))
    return fig


def route_matrix_figure(devices) -> go.Figure:
    names = devices.names
    n = len(names)
    z = np.full((n, n), np.nan)
    text = [["" for _ in range(n)] for _ in range(n)]
    hover = [["" for _ in range(n)] for _ in range(n)]
    for (a, b), c in devices.route.items():
        ch = devices.channels[c]
        z[a, b] = c
        text[a][b] = ch.name
        hover[a][b] = (f"{names[a]} → {names[b]} on <b>{ch.name}</b><br>{ch.bandwidth / 1e9:.3g} GB/s, "
                       f"latency {ch.latency * 1e6:.3g} µs<br>shared by {len(ch.routes)} route(s)")
    nc = max(len(devices.channels), 1)
    scale = []
    for c in range(nc):
        lo, hi = c / nc, (c + 1) / nc
        scale += [[lo, color(c)], [hi, color(c)]]
    fig = go.Figure(go.Heatmap(z=z, x=names, y=names, text=text, texttemplate="%{text}", hovertext=hover,
                               hoverinfo="text", colorscale=scale, zmin=-0.5, zmax=nc - 0.5, showscale=False,
                               xgap=2, ygap=2))
    fig.update_layout(**BASE_LAYOUT, height=330, title="Which channel carries a transfer",
                      xaxis=dict(title="to device", side="bottom"),
                      yaxis=dict(title="from device", autorange="reversed"))
    return fig


# -- Optimize ---------------------------------------------------------------------------------------

def _fast_figure(data: list[dict], layout: dict) -> go.Figure:
    """A figure built without Plotly's property validation, for figures redrawn often (the live progress,
    twice a second) or holding thousands of points: validating a small figure costs tens of milliseconds,
    most of it copying the template, while a background run waits for the GIL. The template is resolved
    here (Plotly.js does not know templates by name). Spell every property as validation would leave it
    (``title=dict(text=...)``): tests/test_fast_figures.py compares each such figure with its validated build.
    """
    layout = {k: v for k, v in layout.items() if not (isinstance(v, list) and not v)}  # as validation leaves it
    if isinstance(layout.get("template"), str):
        layout["template"] = _template_json(layout["template"])
    return go.Figure({"data": data, "layout": layout}, _validate=False)


_TEMPLATES: dict[str, dict] = {}


def _template_json(name: str) -> dict:
    if name not in _TEMPLATES:
        import plotly.io as pio
        _TEMPLATES[name] = pio.templates[name].to_plotly_json()
    return _TEMPLATES[name]


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
    return _fast_figure(data, dict(
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
                         line=dict(color=_mix(color(0), "#ffffff", 0.55), width=1.5)))
    data.append(dict(type="scatter", x=h[:, 0], y=h[:, 1] * scale, mode="lines", name="best so far",
                     line=dict(color=color(0), width=2.5, shape="hv")))
    what = "reward curve" if ratio else "objective over the run"
    return _fast_figure(data, dict(
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
    return _fast_figure(data, dict(
        **BASE_LAYOUT, height=300, title=dict(text=html.escape(title, quote=False)),
        xaxis=dict(title=dict(text="evaluations")), yaxis=dict(title=dict(text=RATIO_TITLE)),
        showlegend=False))


# -- Archive ----------------------------------------------------------------------------------------

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
    import html

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
        above = filled & (ms > high)
        marks[above] = "▲"
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
                      plot_bgcolor="white")
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


# -- Trace ------------------------------------------------------------------------------------------

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
    (dashboard/tracechart.py) adds traces drawn on top (``data``: outlines, fixed labels), ``annotations`` (flow
    arrows), ``shapes`` (a time window) and ``layout``; with ``bars`` each colour is a bar trace instead of an
    outline (a click anywhere on a bar selects its event, whose trace position is its customdata), with
    ``names`` the op's name written inside each bar (Plotly shows those that fit as drawn, on zoom too)."""
    extra = extra or {}
    bars, names = extra.get("bars", False), extra.get("names", False)

    def draw(segs, half, fill, **props):
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
        data.append(draw(segs, GANTT_HALF, shade(b, phase), name=name, legendgroup=group,
                         showlegend=group not in shown))
        shown.add(group)
    if overhead:
        data.append(draw(overhead, OVERHEAD_HALF, OVERHEAD_COLOR, name=OVERHEAD_NAME, legendgroup="overhead",
                         showlegend=True))
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
    return _fast_figure(data, dict(
        BASE_LAYOUT, height=120 + 34 * len(rows), shapes=shapes, hovermode="closest",
        annotations=list(extra.get("annotations", [])),
        xaxis=dict(title=dict(text="time (ms)"), range=[0, makespan * 1e3 * 1.01], showgrid=True),
        yaxis=dict(tickmode="array", tickvals=[-i for i in range(len(rows))], ticktext=labels,
                   range=[-(len(rows) - 0.5), 0.5], showgrid=False, zeroline=False),
        legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0, font=dict(size=11)),
        margin=dict(l=10, r=10, t=60, b=10), **extra.get("layout", {}),
        **(dict(barmode="overlay", uniformtext=dict(mode="hide", minsize=9)) if bars else {})))


def ink(fill: str) -> str:
    """Dark text on a light bar, white on a dark one (relative luminance of the bar's colour)."""
    r, g, b = (int(fill[k:k + 2], 16) / 255 for k in (1, 3, 5))
    return "#14171f" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.5 else "#ffffff"


def memory_figure(series, device_names, capacity) -> go.Figure:
    """Memory in use per device (SVG steps: one path per device) with the capacities that fit the scale."""
    data = []
    peak = max((float(b.max()) for _, b in series), default=0.0)
    top = max(peak * 1.15, 1.0)
    for d, (t, b) in enumerate(series):
        name = html.escape(device_names[d], quote=False)
        data.append(dict(type="scatter", x=(np.asarray(t) * 1e3).astype(np.float32),
                         y=(np.asarray(b) / 1e9).astype(np.float32), mode="lines",
                         line=dict(color=color(d), width=2, shape="hv"), name=name, legendgroup=name,
                         hovertemplate=f"{name}: %{{y:.3g}} GB at %{{x:.4g}} ms<extra></extra>"))
    off = []
    for d, cap in enumerate(capacity):
        if cap <= 3 * max(peak, 1.0):
            top = max(top, cap * 1.1)
    same: dict[float, list[int]] = {}
    for d, cap in enumerate(capacity):
        same.setdefault(float(cap), []).append(d)
    shapes, drawn = [], []
    for cap, devs in same.items():
        names = ", ".join(device_names[d] for d in devs)
        if cap <= top:
            shapes.append(dict(type="line", xref="x domain", x0=0, x1=1, yref="y", y0=cap / 1e9, y1=cap / 1e9,
                               line=dict(color=color(devs[0]) if len(devs) == 1 else "#555", dash="dash", width=1.5)))
            drawn.append((cap, names, devs))
        else:
            off += [device_names[d] for d in devs]
    # Each capacity is named in the right margin, level with its line and outside the plotting area, so no
    # memory line runs through a label; labels of nearby capacities are moved apart (about 15 px).
    height, plot_px = 320, 320 - 60 - 70  # figure, and its plotting area: less the title and the legend below
    at = spread([cap / 1e9 for cap, _, _ in drawn], gap=top / 1e9 * MEMORY_LABEL_PX / plot_px)
    notes = [dict(text=html.escape(f"{names}: {fmt_bytes(cap)}", quote=False), xref="paper", x=1.0, xshift=6,
                  xanchor="left", yref="y", y=y, yanchor="middle", showarrow=False, align="left",
                  font=dict(size=11, color=color(devs[0]) if len(devs) == 1 else "#555"))
             for (cap, names, devs), y in zip(drawn, at)]
    width = max((len(n["text"]) for n in notes), default=0)
    fig = _fast_figure(data, dict(
        BASE_LAYOUT, height=height, title=dict(text="Memory in use per device (dashed: capacity, named on the right)"),
        xaxis=dict(title=dict(text="time (ms)")), yaxis=dict(title=dict(text="memory (GB)"), range=[0, top / 1e9]),
        legend=dict(orientation="h", y=-0.25), shapes=shapes, annotations=notes,
        margin=dict(l=10, r=int(16 + 6.4 * width), t=40, b=10)))
    return fig, off


MEMORY_LABEL_PX = 15  # the least distance between two capacity labels


def utilisation_figure(rows: list[dict], key: str, title: str) -> go.Figure:
    names = [r[key] for r in rows]
    util = [r["utilisation"] * 100 for r in rows]
    fig = go.Figure(go.Bar(x=names, y=util, marker_color=[color(i) for i in range(len(rows))],
                           hovertemplate="%{x}: %{y:.1f} %<extra></extra>"))
    fig.update_layout(**BASE_LAYOUT, height=260, title=title, yaxis=dict(title="busy (% of the run)",
                                                                         range=[0, 100]))
    return fig


# -- Benchmark --------------------------------------------------------------------------------------

def agreement_figure(simulated, measured, labels, fit: tuple[float, float] | None,
                     axes: str = "independent") -> go.Figure:
    """Measured against simulated time per batch (ms), with y = x and the least-squares ``fit`` (seconds).

    ``axes``: "independent" (each axis spans its own values, padded), "log-log", or "equal" (both from 0 to
    the largest value: honest about scale, but points bunch against one axis when the simulator is off by a
    large factor)."""
    sim = np.asarray(simulated, dtype=float) * 1e3
    mea = np.asarray(measured, dtype=float) * 1e3
    both = np.concatenate([sim, mea])
    fig = go.Figure()
    if axes == "equal":
        hi = float(both.max(initial=0)) * 1.1 or 1.0
        xr = yr = [0.0, hi]
        line_x = np.array([0.0, hi])
    elif axes == "log-log":
        pos = both[both > 0]
        lo, hi = (float(pos.min()), float(pos.max())) if len(pos) else (1e-3, 1.0)
        xr = _log_range(sim[sim > 0])
        yr = _log_range(mea[mea > 0])
        line_x = np.geomspace(lo / 2, hi * 2, 60)
    else:
        xr, yr = _pad_range(sim), _pad_range(mea)
        line_x = np.linspace(min(xr[0], yr[0]), max(xr[1], yr[1]), 2)
    fig.add_trace(go.Scatter(x=line_x, y=line_x, mode="lines", name="y = x", line=dict(color="#999", dash="dash")))
    if fit is not None and np.isfinite(fit[0]):
        fx = line_x if axes != "independent" else np.linspace(xr[0], xr[1], 2)
        fy = fit[1] * 1e3 + fit[0] * fx
        keep = fy > 0 if axes == "log-log" else np.ones(len(fx), dtype=bool)
        fig.add_trace(go.Scatter(x=fx[keep], y=fy[keep], mode="lines",
                                 name=f"fit: measured = {fit[0]:.3g} × simulated + {fit[1] * 1e3:.3g} ms",
                                 line=dict(color="#E45756")))
    fig.add_trace(go.Scatter(x=sim, y=mea, mode="markers", name="benchmarked placements", text=labels,
                             hovertemplate="%{text}<br>simulated %{x:.4g} ms<br>measured %{y:.4g} ms<extra></extra>",
                             marker=dict(size=10, color="#4C78A8")))
    kind = "log" if axes == "log-log" else "linear"
    fig.update_layout(**BASE_LAYOUT, height=420,
                      xaxis=dict(title="simulated time per batch (ms)", range=xr, type=kind),
                      yaxis=dict(title="measured time per batch (ms)", range=yr, type=kind),
                      legend=dict(orientation="h", y=-0.2))
    return fig


def _pad_range(values) -> list[float]:
    """A linear axis range around ``values`` with 8 % margin (a single value gets ±10 % of itself)."""
    v = np.asarray(values, dtype=float)
    if not len(v):
        return [0.0, 1.0]
    lo, hi = float(v.min()), float(v.max())
    pad = (hi - lo) * 0.08 if hi > lo else (abs(hi) * 0.1 or 1.0)
    return [lo - pad, hi + pad]


def _log_range(values) -> list[float]:
    """A log axis range (Plotly wants log10 of the ends) around positive ``values``, a quarter decade of margin."""
    v = np.asarray(values, dtype=float)
    if not len(v):
        return [-1.0, 1.0]
    return [float(np.log10(v.min())) - 0.25, float(np.log10(v.max())) + 0.25]


# -- Runs -------------------------------------------------------------------------------------------

OBJECTIVE_TITLE = "objective (ms per batch + memory penalty)"


def runs_overlay_figure(curves: list[tuple[str, np.ndarray]], log_x: bool = False, log_y: bool = False) -> go.Figure:
    """Several stored runs' best-so-far curves on one chart, one colour per run.

    The y axis is the optimizer's objective: the time per batch, plus the memory penalty for a placement
    that exceeds a device's memory, so it is titled as such. A log x axis drops evaluation 0. Names are
    HTML-escaped: Plotly renders tags in legend and hover text, and a network's name comes from its file."""
    import html
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
