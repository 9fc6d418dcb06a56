"""A layered drawing of a computation graph (Sugiyama-style, without dummy nodes).

Layer of an op = length of the longest path from a source, so every edge
points to a later layer. Within a layer ops are ordered by the barycenter
heuristic (mean position of their neighbours in the previous sweep), which
untangles parallel branches such as Inception's. Positions are computed once
and drawn with physics off: hundreds of ops stay readable and fast.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.graph import Graph


@dataclass(frozen=True)
class LayeredLayout:
    x: np.ndarray  # layer per op (float, op index order)
    y: np.ndarray  # position within the layer, centred on 0
    layers: tuple[tuple[int, ...], ...]  # op indices per layer, top to bottom

    @property
    def depth(self) -> int:
        return len(self.layers)

    @property
    def width(self) -> int:
        return max((len(layer) for layer in self.layers), default=0)


def layer_of(graph: Graph) -> np.ndarray:
    """Longest-path layer of every op (ops are in topological order, so one pass suffices)."""
    layer = np.zeros(len(graph), dtype=int)
    for i, parents in enumerate(graph.parents):
        if parents:
            layer[i] = 1 + max(layer[p] for p in parents)
    return layer


def _pack(desired: list[float], gap: float = 1.0) -> list[float]:
    """Positions in the given order, at least ``gap`` apart, as close as possible to ``desired``.

    Least squares under order and spacing constraints: isotonic regression (pool adjacent
    violators) of ``desired[k] - k*gap``, then ``+ k*gap`` back.
    """
    blocks: list[list[float]] = []  # [sum, count]
    for k, d in enumerate(desired):
        blocks.append([d - k * gap, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    out: list[float] = []
    for s, c in blocks:
        out += [s / c] * int(c)
    return [v + k * gap for k, v in enumerate(out)]


def spread(values, gap: float) -> list[float]:
    """Label positions for ``values`` (in their order), at least ``gap`` apart and as close as possible to the
    values (least squares): labels at nearby heights move apart instead of overlapping."""
    order = sorted(range(len(values)), key=lambda k: (values[k], k))
    packed = _pack([float(values[k]) for k in order], gap)
    out = [0.0] * len(values)
    for k, v in zip(order, packed):
        out[k] = v
    return out


def layered_layout(graph: Graph, sweeps: int = 4) -> LayeredLayout:
    """Layers by longest path; order in a layer by barycenters; each op then placed as close to
    the mean position of its parents as the spacing allows, so a chain stays on one line and
    branches fan out around it and come back (ResNet's blocks, Inception's towers)."""
    layer = layer_of(graph)
    depth = int(layer.max()) + 1 if len(layer) else 0
    layers: list[list[int]] = [[] for _ in range(depth)]
    for i, l in enumerate(layer):
        layers[int(l)].append(i)  # topological order within a layer to start with
    pos = np.zeros(len(graph))
    for members in layers:
        for k, i in enumerate(members):
            pos[i] = k - (len(members) - 1) / 2

    def reorder(members: list[int], neighbours) -> list[int]:
        def key(item):
            k, i = item
            ns = neighbours[i]
            return (float(np.mean([pos[j] for j in ns])) if ns else pos[i], k)
        ordered = [i for _, i in sorted(enumerate(members), key=key)]
        for k, i in enumerate(ordered):
            pos[i] = k - (len(ordered) - 1) / 2
        return ordered

    for _ in range(sweeps):
        for l in range(1, depth):
            layers[l] = reorder(layers[l], graph.parents)
        for l in range(depth - 2, -1, -1):
            layers[l] = reorder(layers[l], graph.children)
    # Final positions: follow the parents (sources stay centred), keep the order and spacing.
    y = np.zeros(len(graph))
    for members in layers:
        desired = [float(np.mean([y[p] for p in graph.parents[i]])) if graph.parents[i]
                   else pos[i] for i in members]
        for i, v in zip(members, _pack(desired)):
            y[i] = v
    return LayeredLayout(layer.astype(float), y, tuple(tuple(m) for m in layers))


def edge_path(x0: float, y0: float, x1: float, y1: float, points: int = 9) -> tuple[list[float], list[float]]:
    """A straight segment between adjacent layers; an arc above the line for longer edges, so skip
    connections (which would otherwise lie on top of the chain they skip) stay visible."""
    span = abs(x1 - x0)
    if span <= 1.0 + 1e-9:
        return [x0, x1], [y0, y1]
    bulge = 0.35 + 0.12 * np.sqrt(span - 1.0)
    t = np.linspace(0.0, 1.0, points)
    cx, cy = (x0 + x1) / 2, max(y0, y1) + 2 * bulge  # quadratic Bezier control point
    xs = (1 - t) ** 2 * x0 + 2 * (1 - t) * t * cx + t ** 2 * x1
    ys = (1 - t) ** 2 * y0 + 2 * (1 - t) * t * cy + t ** 2 * y1
    return xs.tolist(), ys.tolist()


def scale_sizes(values, low: float = 6.0, high: float = 30.0) -> np.ndarray:
    """Marker sizes with area proportional to the value: sqrt scaling into [low, high]."""
    v = np.sqrt(np.maximum(np.asarray(values, dtype=float), 0.0))
    top = v.max() if v.size else 0.0
    if top <= 0:
        return np.full(v.shape, low)
    return low + (high - low) * (v / top)  # the ratio first: the largest is exactly ``high``


def edge_buckets(edges: list[tuple[int, int, float]], buckets: int = 4) -> list[dict]:
    """Edges grouped by tensor size into ``buckets`` classes of equal log width, smallest first.

    Each group: ``{"low": bytes, "high": bytes, "edges": [(src, dst, bytes), ...]}``; drawing one
    line trace per group (wider for larger tensors) keeps a 1000-edge graph to a handful of traces.
    """
    if not edges:
        return []
    sizes = np.array([max(b, 1.0) for _, _, b in edges])
    lo, hi = float(np.log10(sizes.min())), float(np.log10(sizes.max()))
    if hi - lo < 1e-9:
        return [{"low": float(sizes.min()), "high": float(sizes.max()), "edges": list(edges)}]
    bounds = np.linspace(lo, hi, buckets + 1)
    idx = np.clip(np.searchsorted(bounds, np.log10(sizes), side="right") - 1, 0, buckets - 1)
    out = []
    for b in range(buckets):
        members = [e for e, k in zip(edges, idx) if k == b]
        if members:
            out.append({"low": float(10 ** bounds[b]), "high": float(10 ** bounds[b + 1]), "edges": members})
    return out
