"""The Benchmark page's chart: measured against simulated time per batch, on independent, log-log or equal axes."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from .style import BASE_LAYOUT

def agreement_figure(simulated, measured, labels, fit: tuple[float, float] | None,
                     axes: str = "independent", intervals=None) -> go.Figure:
    """Measured against simulated time per batch (ms), with y = x and the least-squares ``fit`` (seconds).

    ``axes``: "independent" (each axis spans its own values, padded), "log-log", or "equal" (both from 0 to
    the largest value: honest about scale, but points bunch against one axis when the simulator is off by a
    large factor). ``intervals``: per point (low, high) seconds of the simulated time from the calibration's
    spread (analysis.uncertainty), or None; drawn as horizontal error bars."""
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
    error_x = None
    if intervals is not None and any(iv is not None for iv in intervals):
        low = np.array([np.nan if iv is None else iv[0] for iv in intervals]) * 1e3
        high = np.array([np.nan if iv is None else iv[1] for iv in intervals]) * 1e3
        error_x = dict(type="data", symmetric=False, array=np.nan_to_num(high - sim).tolist(),
                       arrayminus=np.nan_to_num(sim - low).tolist(), color="#4C78A8", thickness=1.5)
    fig.add_trace(go.Scatter(x=sim, y=mea, mode="markers", name="benchmarked placements", text=labels,
                             hovertemplate="%{text}<br>simulated %{x:.4g} ms<br>measured %{y:.4g} ms<extra></extra>",
                             marker=dict(size=10, color="#4C78A8"), error_x=error_x))
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
