"""The network and the device graph as Plotly charts: the layered network (Network page), the links chart and
the route matrix (Devices page). The explorable graphs are :mod:`dashboard.nodelink`'s."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from placement_core.analysis import LayeredLayout, edge_buckets, fmt_bytes, scale_sizes
from placement_core.analysis.layout import edge_path

from .style import BASE_LAYOUT, KIND_COLORS, color

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
