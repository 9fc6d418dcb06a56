"""Fewer, quantile-based bins for the Archive page's map: a dimension of many uneven bins (MAP-Elites' 40 bins of
cross-device edges, most of them empty) is shown as a few groups of adjacent bins, each holding about the same
number of elites, as pyribs users read a CVT or sliding-boundaries archive. Each shown cell is the best elite of
the cells it merges, so a click still inspects one elite."""

from __future__ import annotations

import html

import numpy as np

from placement_core.analysis.archive_view import HeatmapData

MANY_BINS = 12  # a dimension with more bins than this is grouped by default
GROUPS = 8


def quantile_groups(weights: np.ndarray, groups: int) -> np.ndarray:
    """For bins with ``weights`` (elites per bin), the group of each bin: adjacent bins, at most ``groups``
    groups, cut where the running count of elites crosses each j/groups quantile (empty bins join the group
    before them; empty bins at the start join the first group)."""
    w = np.asarray(weights, dtype=float)
    n = len(w)
    if n == 0:
        return np.zeros(0, dtype=int)
    total = w.sum()
    if total <= 0 or groups >= n:
        return np.arange(n) if groups >= n else np.zeros(n, dtype=int)
    before = np.cumsum(w) - w  # elites in the bins before each bin
    group = np.minimum((before / total * groups).astype(int), groups - 1)
    group[w == 0] = -1
    last = 0  # empty bins belong to the group of the filled bin before them
    for i in range(n):
        if group[i] < 0:
            group[i] = last
        last = group[i]
    _, dense = np.unique(group, return_inverse=True)  # numbered 0, 1, ... without gaps
    return dense.astype(int)


def _join(labels: list[str]) -> str:
    """The label of a group of bins: ``3–7`` and ``8–12`` make ``3–12``; bins no count rounds to are skipped."""
    real = [t for t in labels if t != "none"] or labels
    lo, hi = real[0].split("–")[0], real[-1].split("–")[-1]
    return lo if lo == hi else f"{lo}–{hi}"


def coarsen(h: HeatmapData, axis: int, group: np.ndarray) -> HeatmapData:
    """``h`` with the bins of ``axis`` (1: columns, 0: rows) merged by ``group`` (bin -> group)."""
    z, count = (h.z, h.count) if axis == 1 else (h.z.T, h.count.T)
    niche = h.niche if axis == 1 else [list(r) for r in zip(*h.niche)]
    hover = h.hover if axis == 1 else [list(r) for r in zip(*h.hover)]
    fits = None if h.fits is None else (h.fits if axis == 1 else h.fits.T)
    labels = h.x_labels if axis == 1 else h.y_labels
    k = int(group.max()) + 1 if len(group) else 0
    rows = z.shape[0]
    nz, ncount = np.full((rows, k), np.nan), np.zeros((rows, k), dtype=int)
    nniche = [[None] * k for _ in range(rows)]
    nhover = [[""] * k for _ in range(rows)]
    nfits = None if fits is None else np.zeros((rows, k), dtype=bool)
    glabels = [_join([labels[i] for i in np.flatnonzero(group == g)]) for g in range(k)]
    for g in range(k):
        cols = np.flatnonzero(group == g)
        for r in range(rows):
            vals = z[r, cols]
            ncount[r, g] = int(count[r, cols].sum())
            if np.isfinite(vals).any():
                best = int(cols[np.nanargmin(vals)])
                nz[r, g], nniche[r][g] = z[r, best], niche[r][best]
                if nfits is not None:
                    nfits[r, g] = fits[r, best]
                nhover[r][g] = (hover[r][best] + f"<br>{ncount[r, g]} elite(s) in the {len(cols)} bins merged here "
                                f"({html.escape(glabels[g])})")
            else:
                nhover[r][g] = hover[r][int(cols[0])].replace(
                    html.escape(labels[int(cols[0])]), html.escape(glabels[g]), 1)
    if axis == 1:
        return HeatmapData(nz, nniche, ncount, glabels, h.y_labels, h.x_title, h.y_title, nhover, nfits)
    return HeatmapData(nz.T, [list(r) for r in zip(*nniche)], ncount.T, h.x_labels, glabels, h.x_title,
                       h.y_title, [list(r) for r in zip(*nhover)], None if nfits is None else nfits.T)
