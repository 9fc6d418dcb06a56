"""The MAP-Elites archive as a heatmap over two niche dimensions, and ranked lists of elites."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..optimize.archive import Archive, Elite
from .units import fmt_seconds


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
    hover: list[list[str]]

    @property
    def filled(self) -> int:
        return int(np.isfinite(self.z).sum())


def elite_label(archive: Archive, elite: Elite) -> str:
    """``gpu0-heavy · 2 devices used · 14 cross-device edges`` style one-liner."""
    parts = []
    for d, b, v in zip(archive.descriptors, elite.niche, elite.descriptors):
        ticks = d.tick_labels(archive.problem)
        if d.name == "most_used_device":
            parts.append(f"mostly {ticks[b]}")
        elif d.name == "cross_device_edges":
            parts.append(f"{int(v)} cross-device edges")
        elif d.name == "devices_used":
            parts.append(f"{int(v)} device{'s' if int(v) != 1 else ''} used")
        else:
            parts.append(f"{d.label} {ticks[b] if 0 <= b < len(ticks) else b}")
    return " · ".join(parts)


def archive_heatmap(archive: Archive, x_dim: int, y_dim: int) -> HeatmapData:
    """Project the archive onto dimensions ``x_dim`` (columns) and ``y_dim`` (rows), best over the rest."""
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
    hover = [["" if niche[yi][xi] is None else
              f"objective {fmt_seconds(z[yi, xi])}<br>{elite_label(archive, archive.elites[niche[yi][xi]])}"
              f"<br>{count[yi, xi]} elite(s) in this cell"
              for xi in range(dx.size)] for yi in range(dy.size)]
    return HeatmapData(z, niche, count, dx.tick_labels(archive.problem), dy.tick_labels(archive.problem),
                       dx.label, dy.label, hover)


def top_elites(archive: Archive, k: int = 10) -> list[dict]:
    """The ``k`` best elites with their niche and descriptor values, best first."""
    rows = []
    for rank, e in enumerate(archive.ranked()[:k], start=1):
        row = {"rank": rank, "objective_s": e.objective, "niche": e.niche, "label": elite_label(archive, e)}
        for d, v in zip(archive.descriptors, e.descriptors):
            row[d.label] = archive.problem.devices.names[int(v)] if d.name == "most_used_device" else v
        rows.append(row)
    return rows
