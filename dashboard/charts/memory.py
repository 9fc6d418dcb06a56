"""The Trace page's resource charts: memory in use per device over the step, and the busy share of devices
and channels."""

from __future__ import annotations

import html

import numpy as np
import plotly.graph_objects as go

from placement_core.analysis import fmt_bytes
from placement_core.analysis.layout import spread

from .style import BASE_LAYOUT, color, fast_figure

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
    fig = fast_figure(data, dict(
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
