"""The MAP-Elites archive as a heatmap over two niche dimensions, and ranked lists of elites."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..optimize.archive import Archive, Descriptor, Elite
from ..base.units import fmt_seconds


@dataclass
class HeatmapData:
    """``z[yi, xi]`` = best objective over every niche projecting onto that cell (NaN: empty)."""

    z: np.ndarray
    niche: list[list[tuple[int, ...] | None]]  # the niche of the best elite in each cell
    count: np.ndarray  # elites per cell
    x_labels: list[str]
    y_labels: list[str]
    x_title: str
    y_title: str
    hover: list[list[str]]  # every cell: its elite, or "empty niche" with the cell's bins
    fits: np.ndarray | None = None  # per cell: does its elite fit in memory (None: not known)

    @property
    def filled(self) -> int:
        return int(np.isfinite(self.z).sum())

    def cells(self) -> list[tuple[int, int]]:
        """Every cell (yi, xi) in row-major order: the order the chart lists its clickable markers."""
        ny, nx = self.z.shape
        return [(a, b) for a in range(ny) for b in range(nx)]


def elite_label(archive: Archive, elite: Elite) -> str:
    """``gpu0-heavy · 2 devices used · 14 cross-device edges`` style one-liner."""
    parts = []
    for d, b, v in zip(archive.descriptors, elite.niche, elite.descriptors):
        if d.name == "most_used_device":
            parts.append(f"mostly {archive.problem.devices.names[b]}")
        elif d.name == "cross_device_edges":
            parts.append(f"{int(v)} cross-device edges")
        elif d.name == "devices_used":
            parts.append(f"{int(v)} device{'s' if int(v) != 1 else ''} used")
        else:
            ticks = bin_labels(archive, d)
            parts.append(f"{d.label} {ticks[b] if 0 <= b < len(ticks) else b}")
    return " · ".join(parts)


def bin_labels(archive: Archive, descriptor: Descriptor) -> list[str]:
    """What each bin of a dimension holds, readable on an axis: device names for the most-used device, the
    range of counts for cross-device edges ("3–7"; a bin no count rounds to is "none"), else the tick labels.

    Cross-device edges are binned as ``rint(edges / max_edges * (bins - 1))``, so a bin holds several counts;
    a bare bin index (or its lower end) would misstate them.
    """
    if descriptor.name == "cross_device_edges" and hasattr(descriptor, "max_edges"):
        top = int(descriptor.max_edges)
        values = np.arange(top + 1)
        bins = np.rint(values / top * (descriptor.size - 1)).astype(int)
        labels = []
        for b in range(descriptor.size):
            held = values[bins == b]
            if len(held) == 0:
                labels.append("none")
            elif held[0] == held[-1]:
                labels.append(str(held[0]))
            else:
                labels.append(f"{held[0]}–{held[-1]}")
        return labels
    return list(descriptor.tick_labels(archive.problem))


def archive_heatmap(archive: Archive, x_dim: int, y_dim: int,
                    fits: Callable[[tuple[int, ...]], bool] | None = None) -> HeatmapData:
    """Project the archive onto dimensions ``x_dim`` (columns) and ``y_dim`` (rows), best over the rest.

    ``fits(niche)`` (does that elite fit in memory, see :func:`elite_fits`; asked once per filled cell) adds
    memory to the hover and lets the placements that fit set the colour scale (:func:`color_range`).
    """
    if x_dim == y_dim:
        raise ValueError("choose two different dimensions")
    dx, dy = archive.descriptors[x_dim], archive.descriptors[y_dim]
    z = np.full((dy.size, dx.size), np.nan)
    count = np.zeros((dy.size, dx.size), dtype=int)
    niche: list[list[tuple[int, ...] | None]] = [[None] * dx.size for _ in range(dy.size)]
    for e in archive.elites.values():
        xi, yi = e.niche[x_dim], e.niche[y_dim]
        count[yi, xi] += 1
        if not np.isfinite(z[yi, xi]) or e.objective < z[yi, xi]:
            z[yi, xi] = e.objective
            niche[yi][xi] = e.niche
    x_labels, y_labels = bin_labels(archive, dx), bin_labels(archive, dy)
    cell_fits = None
    if fits is not None:
        cell_fits = np.array([[n is not None and bool(fits(n)) for n in row] for row in niche], dtype=bool)

    def text(yi, xi):  # Plotly renders tags in hover text: device names (user strings) are escaped
        where = html.escape(f"{dy.label} {y_labels[yi]} · {dx.label} {x_labels[xi]}")
        if niche[yi][xi] is None:
            return f"<b>empty niche</b><br>{where}<br>{getattr(archive, 'empty_note', 'no placement found here')}"
        memory = "" if cell_fits is None else "<br>fits in memory" if cell_fits[yi, xi] else \
            "<br><b>over memory</b> " + getattr(archive, "over_memory_note", "(objective includes the memory penalty)")
        label = html.escape(elite_label(archive, archive.elites[niche[yi][xi]]))
        return (f"objective {fmt_seconds(z[yi, xi])}<br>{label}"
                f"{memory}<br>{where}<br>{count[yi, xi]} elite(s) in this cell")

    hover = [[text(yi, xi) for xi in range(dx.size)] for yi in range(dy.size)]
    return HeatmapData(z, niche, count, x_labels, y_labels, dx.label, dy.label, hover, cell_fits)


def elite_fits(problem, elite: Elite) -> bool:
    """Does the elite's placement fit every device's memory (one simulation: the objective alone cannot
    tell a slow placement from a penalised one)."""
    return problem.simulate(elite.placement).feasible


@dataclass
class ColorRange:
    """The objectives (s) the colour scale spans; cells above ``high`` take its colour (``clipped``)."""

    low: float
    high: float
    clipped: bool  # some cell lies above high
    basis: str  # what set high, for the colour bar


def color_range(h: HeatmapData, percentile: float = 95.0) -> ColorRange:
    """Clip the colour scale at the ``percentile`` of the cells whose elite fits in memory (of every filled
    cell when none fits or fitting is unknown): a few placements made 100x slower by memory penalties
    would otherwise wash every good elite into one colour."""
    values = h.z[np.isfinite(h.z)]
    if len(values) == 0:
        return ColorRange(0.0, 1.0, False, "no elites")
    low, top = float(values.min()), float(values.max())
    fitting = h.z[np.isfinite(h.z) & h.fits] if h.fits is not None else np.array([])
    if len(fitting):
        high, basis = float(np.percentile(fitting, percentile)), f"{percentile:g}th percentile of elites that fit"
    else:
        high, basis = float(np.percentile(values, percentile)), f"{percentile:g}th percentile of all cells"
    if not high > low:  # one value, or everything fitting is the minimum
        high, basis = top, "slowest cell"
    if not high > low:
        return ColorRange(low, low + max(abs(low), 1e-12) * 1e-6 + 1e-12, False, "one value")
    return ColorRange(low, high, bool(top > high), basis)


def top_elites(archive: Archive, k: int = 10) -> list[dict]:
    """The ``k`` best elites with their niche and descriptor values, best first."""
    rows = []
    for rank, e in enumerate(archive.ranked()[:k], start=1):
        row = {"rank": rank, "objective_s": e.objective, "niche": e.niche, "label": elite_label(archive, e)}
        for d, v in zip(archive.descriptors, e.descriptors):
            row[d.label] = archive.problem.devices.names[int(v)] if d.name == "most_used_device" else v
        rows.append(row)
    return rows
