"""The network as a still picture (the Network page's first view): one SVG drawn here, shown as an image.

Why a picture first: a new session's page must be on screen in about two seconds, and the explorable graph
(vis.js in a frame: 470 KB of script compiled and a canvas built per session) was the largest part of the
first load (docs/dashboard.md "Speed"). An image costs the browser no script. A long network (ResNet-50:
about 170 layers, two ops wide) would be a thin strip at the page's width, so the layers are laid out in
rows that snake (left to right, then right to left): a tensor between consecutive layers at a row's end is a
short line, not a stroke across the picture.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape

import numpy as np

from placement_core.analysis import LayeredLayout, edge_buckets, scale_sizes

from .style import KIND_COLORS, color

WIDTH = 1000  # the picture's own width in pixels (the image is shown at most this wide)
MARGIN = 24
MIN_STEP = 12.0  # pixels between layers before a row wraps
MAX_STEP = 48.0
MAX_ROW_HEIGHT = 180.0
MAX_OPS = 20_000  # beyond this the picture would be a grey cloud; the explorable graph opens as modules
EDGE_WIDTHS = (0.6, 1.1, 1.8, 2.8)
FONT = 16  # the image is shown at about 0.8 of its width in the page: about 13 px on screen


@dataclass(frozen=True)
class Snake:
    """Where each op is drawn: ``px``, ``py`` (pixels), with ``per_row`` layers a row and ``rows`` rows."""

    px: np.ndarray
    py: np.ndarray
    per_row: int
    rows: int
    row_height: float
    height: float


def snake(layout: LayeredLayout, width: float = WIDTH) -> Snake:
    """Pixel positions of a layered layout folded into rows of at most ``width``: layer l goes to row
    l // per_row, at column l % per_row counted from the left on even rows and from the right on odd ones."""
    depth, wide = max(layout.depth, 1), max(layout.width, 1)
    usable = width - 2 * MARGIN
    step = min(MAX_STEP, usable / depth)
    if step >= MIN_STEP:
        per_row = depth
    else:
        per_row = max(1, int(usable // MIN_STEP))
        step = usable / per_row
    rows = math.ceil(depth / per_row)
    dy = min(16.0, MAX_ROW_HEIGHT / wide)
    row_height = wide * dy
    gap = 18.0
    layer = np.asarray(layout.x, dtype=float).round().astype(int)
    row, col = layer // per_row, layer % per_row
    col = np.where(row % 2 == 1, per_row - 1 - col, col)
    used = per_row if rows > 1 else depth
    left = MARGIN + (usable - used * step) / 2
    px = left + (col + 0.5) * step
    py = MARGIN + row * (row_height + gap) + row_height / 2 + np.asarray(layout.y, dtype=float) * dy
    height = 2 * MARGIN + rows * row_height + (rows - 1) * gap
    return Snake(px, py, per_row, rows, row_height, height)


def _legend(entries: list[tuple[str, str]], top: float, width: float) -> tuple[list[str], float]:
    """Swatch and label per entry, wrapped into lines; returns the elements and the height they take."""
    out, x, y = [], MARGIN, top + FONT
    for label, fill in entries:
        w = 22 + 0.6 * FONT * len(label) + 16
        if x + w > width - MARGIN and x > MARGIN:
            x, y = MARGIN, y + FONT + 8
        out.append(f'<circle cx="{x + 6:.1f}" cy="{y - FONT / 3:.1f}" r="6" fill="{fill}" stroke="#333" '
                   f'stroke-width="0.5"/><text x="{x + 16:.1f}" y="{y:.1f}">{escape(label)}</text>')
        x += w
    return out, y - top + 8


def network_svg(graph, layout: LayeredLayout, color_by: str = "kind", placement=None,
                device_names=None) -> str | None:
    """The whole network as one SVG document (None above :data:`MAX_OPS` ops): node area grows with compute,
    edge width with the tensor, red dashes where a tensor crosses devices under ``placement``; a legend of the
    colours below. Every name is escaped: op kinds and device names come from the user's files."""
    ops = graph.ops
    if not ops or len(ops) > MAX_OPS:
        return None
    s = snake(layout)
    px, py = s.px, s.py
    parts = []
    crossing = []
    for k, bucket in enumerate(edge_buckets(graph.edges(), buckets=4)):
        d = []
        for a, b, _ in bucket["edges"]:
            if placement is not None and placement[a] != placement[b]:
                crossing.append(f"M{px[a]:.1f} {py[a]:.1f}L{px[b]:.1f} {py[b]:.1f}")
            else:
                d.append(f"M{px[a]:.1f} {py[a]:.1f}L{px[b]:.1f} {py[b]:.1f}")
        if d:
            parts.append(f'<path d="{"".join(d)}" stroke="rgba(90,90,110,0.5)" stroke-width="{EDGE_WIDTHS[k]}" '
                         'fill="none"/>')
    if crossing:
        parts.append(f'<path d="{"".join(crossing)}" stroke="#D62728" stroke-width="1.6" stroke-dasharray="4 3" '
                     'fill="none"/>')
    radius = scale_sizes([o.fwd_flops + o.bwd_flops for o in ops], 3.0, 9.0) / 2
    if color_by == "device" and placement is not None and device_names:
        fills = [color(int(placement[i])) for i in range(len(ops))]
        entries = [(str(name), color(d)) for d, name in enumerate(device_names)
                   if any(int(p) == d for p in placement)]
    else:
        kinds = sorted({o.kind for o in ops}, key=lambda k: list(KIND_COLORS).index(k) if k in KIND_COLORS else 99)
        fills = [KIND_COLORS.get(o.kind, "#7F7F7F") for o in ops]
        entries = [(k, KIND_COLORS.get(k, "#7F7F7F")) for k in kinds]
    parts += [f'<circle cx="{px[i]:.1f}" cy="{py[i]:.1f}" r="{radius[i]:.1f}" fill="{fills[i]}" stroke="#333" '
              'stroke-width="0.4"/>' for i in range(len(ops))]
    if crossing:
        entries.append(("tensor between devices", "#D62728"))
    legend, legend_height = _legend(entries, s.height - MARGIN / 2, WIDTH)
    height = s.height + legend_height
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height:.0f}" '
            f'viewBox="0 0 {WIDTH} {height:.0f}" font-family="sans-serif" font-size="{FONT}" fill="#222">'
            f'<rect width="100%" height="100%" fill="white"/>{"".join(parts)}{"".join(legend)}</svg>')
