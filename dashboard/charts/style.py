"""What every chart of the dashboard shares: colours, the base layout, and figures built without validation.

Conventions (every module of ``dashboard.charts``): times on axes in milliseconds, memory in GB, tensor sizes in
MB, every quantitative axis titled with its unit; numbers come from ``placement_core.analysis``, charts only draw.
"""

from __future__ import annotations

import plotly.graph_objects as go

PALETTE = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#EECA3B", "#9D755D",
           "#FF9DA6", "#BAB0AC", "#1F77B4", "#2CA02C"]
KIND_COLORS = {"input": "#9E9E9E", "conv": "#4C78A8", "deconv": "#2F5B88", "linear": "#F58518",
               "matmul": "#F58518", "attention": "#D35400", "pool": "#54A24B", "norm": "#B279A2",
               "activation": "#EECA3B", "elementwise": "#72B7B2", "concat": "#E45756", "reshape": "#BAB0AC",
               "dropout": "#9D755D", "softmax": "#FF9DA6", "embedding": "#8E6C8A", "upsample": "#3B8B5A",
               "other": "#7F7F7F"}
BASE_LAYOUT = dict(template="plotly_white", margin=dict(l=10, r=10, t=40, b=10),
                   font=dict(size=13), hoverlabel=dict(align="left"))


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def mix(hex_color: str, other: str, t: float) -> str:
    a = [int(hex_color[k:k + 2], 16) for k in (1, 3, 5)]
    b = [int(other[k:k + 2], 16) for k in (1, 3, 5)]
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(a, b))


OVERHEAD_COLOR = "#707070"  # send and receive tasks (a device's message overhead): thin grey bars
OVERHEAD_NAME = "send / receive (message overhead)"


def fast_figure(data: list[dict], layout: dict) -> go.Figure:
    """A figure built without Plotly's property validation, for figures redrawn often (the live progress,
    twice a second) or holding thousands of points: validating a small figure costs tens of milliseconds,
    most of it copying the template, while a background run waits for the GIL. The template is resolved
    here (Plotly.js does not know templates by name). Spell every property as validation would leave it
    (``title=dict(text=...)``): tests/test_fast_figures.py compares each such figure with its validated build.
    """
    layout = {k: v for k, v in layout.items() if not (isinstance(v, list) and not v)}  # as validation leaves it
    if isinstance(layout.get("template"), str):
        layout["template"] = template_json(layout["template"])
    return go.Figure({"data": data, "layout": layout}, _validate=False)


_TEMPLATES: dict[str, dict] = {}


def template_json(name: str) -> dict:
    if name not in _TEMPLATES:
        import plotly.io as pio
        _TEMPLATES[name] = pio.templates[name].to_plotly_json()
    return _TEMPLATES[name]
