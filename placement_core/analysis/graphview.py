"""The network as node-link data for an explorable view: positions, sizes, widths, colours' keys and cards.

Everything a node-link drawing needs is computed here, once, so the browser only draws: positions come
from the layered layout (left to right, one column per layer; physics never runs), a node's area grows
with its compute, an edge's width with its tensor, an edge between ops on different devices is marked,
and each op carries its card (kind, FLOPs, bytes, device, its times on every device). A network over
``COLLAPSE_ABOVE`` ops is also given modules (the coarsening groups of :func:`placement_core.model.coarsen.coarsen`)
so the view can open collapsed and expand a module on click. Strings are returned as they are: whoever
writes them into HTML or JavaScript escapes them.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..model.coarsen import coarsen
from ..model.graph import Graph
from .layout import LayeredLayout, scale_sizes
from ..base.units import fmt_bytes, fmt_flops, fmt_seconds

COLLAPSE_ABOVE = 1000  # ops: larger networks open as modules
LAYER_DX, ROW_DY = 110.0, 80.0  # canvas units between layers and between ops of one layer
NODE_SIZE = (6.0, 30.0)  # radius of the op with no compute and of the costliest op
EDGE_WIDTH = (1.0, 8.0)  # width of the smallest and the largest tensor


def edge_width(nbytes, top: float) -> np.ndarray:
    """Width grows with the square root of the bytes (area-like, as node sizes): 1 for nothing, 8 for ``top``;
    more than ``top`` (a module's summed edges) is clamped at 8."""
    lo, hi = EDGE_WIDTH
    b = np.sqrt(np.clip(np.asarray(nbytes, dtype=float), 0.0, None))
    t = np.sqrt(top) if top > 0 else 1.0
    return np.minimum(lo + (hi - lo) * b / t, hi)


def module_count(n_ops: int) -> int:
    """How many modules a collapsed view opens with: about ten ops each, between 50 and 300."""
    return int(min(300, max(50, n_ops // 10)))


def _times(costs, i: int, device_names, unit: str) -> list[list[str]]:
    rows = []
    for d, name in enumerate(device_names):
        parts = [f"forward {fmt_seconds(costs.fwd[i, d])}", f"backward {fmt_seconds(costs.bwd[i, d])}"]
        if costs.update[i, d] > 0:
            parts.append(f"update {fmt_seconds(costs.update[i, d])}")
        rows.append([f"on {name} ({unit})", " · ".join(parts)])
    return rows


def gene_text(gene: int, device_names, splits=(), op=None, graph: Graph | None = None) -> str:
    """``gpu0``, or a split: ``batch over gpu0, gpu1 (64 + 64)`` (the sizes when the op is known)."""
    nd = len(device_names)
    if gene < nd:
        return str(device_names[gene])
    s = splits[gene - nd]
    text = f"{s.dim} over " + ", ".join(str(device_names[d]) for d in s.devices)
    if op is not None and graph is not None:
        from ..model.sharding import shard_sizes
        text += " (" + " + ".join(str(v) for v in shard_sizes(op, graph, s)) + ")"
    return text


def gene_device_names(gene: int, device_names, splits=()) -> list[str]:
    nd = len(device_names)
    return [str(device_names[gene])] if gene < nd else [str(device_names[d]) for d in splits[gene - nd].devices]


def op_card(graph: Graph, i: int, placement=None, device_names=None, costs=None, unit: str = "per batch",
            splits=()) -> list[list[str]]:
    """What a click on op ``i`` shows: [label, value] rows, plain text."""
    op = graph.ops[i]
    rows = [["op", op.name], ["kind", op.kind],
            ["forward", fmt_flops(op.fwd_flops)], ["backward", fmt_flops(op.bwd_flops)],
            ["output", fmt_bytes(op.output_bytes) + (f" ({' × '.join(map(str, op.shape))})" if op.shape else "")],
            ["parameters", fmt_bytes(op.param_bytes)]]
    if placement is not None and device_names is not None:
        g = int(placement[i])
        rows.append(["device" if g < len(device_names) else "split",
                     gene_text(g, device_names, splits, op, graph)])
    if costs is not None and device_names is not None:
        rows += _times(costs, i, device_names, unit)
    return rows


def _module_card(graph: Graph, name: str, members: list[int], placement, device_names, splits=()
                 ) -> list[list[str]]:
    ops = [graph.ops[i] for i in members]
    rows = [["module", name], ["ops", f"{len(members)}: {ops[0].name} … {ops[-1].name}"],
            ["forward", fmt_flops(sum(o.fwd_flops for o in ops))],
            ["backward", fmt_flops(sum(o.bwd_flops for o in ops))],
            ["outputs", fmt_bytes(sum(o.output_bytes for o in ops))],
            ["parameters", fmt_bytes(sum(o.param_bytes for o in ops))]]
    if placement is not None and device_names is not None:
        count = Counter(d for i in members for d in gene_device_names(int(placement[i]), device_names, splits))
        rows.append(["devices", ", ".join(f"{d} × {k}" for d, k in count.most_common())])
    return rows


def network_view(graph: Graph, layout: LayeredLayout, placement=None, device_names=None, costs=None,
                 unit: str = "per batch", collapse_above: int = COLLAPSE_ABOVE, splits=()) -> dict:
    """Nodes, edges and (for a large network) modules of the node-link view.

    ``nodes[i]`` is op ``i``: ``name``, ``kind``, ``device`` (with a placement: its device, a split op's
    first), ``devices`` (every device it runs on: several for an op split over ``splits``), ``x``, ``y`` (canvas units),
    ``size`` (radius, area ∝ forward + backward FLOPs), ``module`` (index into ``modules`` or None) and ``card``.
    ``edges``: ``from``, ``to`` (op indices), ``bytes``, ``width``, ``cross`` (producer and consumer on
    different devices), ``span`` (layers crossed). ``modules``: ``name``, ``members`` (op indices), ``x``, ``y``
    (the members' centroid), ``size``, ``kind`` (its costliest member's), ``device`` (shared by all members,
    else None) and ``card``; empty up to ``collapse_above`` ops. ``max_bytes`` is the largest tensor, the scale
    of :func:`edge_width`.
    """
    n = len(graph)
    compute = np.array([o.fwd_flops + o.bwd_flops for o in graph.ops], dtype=float)
    sizes = scale_sizes(compute, *NODE_SIZE)
    x, y = layout.x * LAYER_DX, layout.y * ROW_DY
    devices = on = None
    if placement is not None and device_names is not None:
        on = [gene_device_names(int(placement[i]), device_names, splits) for i in range(n)]
        devices = [d[0] for d in on]
    nodes = [{"name": op.name, "kind": op.kind, "device": devices[i] if devices else None,
              "devices": on[i] if on else [], "x": float(x[i]), "y": float(y[i]), "size": float(sizes[i]),
              "module": None, "card": op_card(graph, i, placement, device_names, costs, unit, splits)}
             for i, op in enumerate(graph.ops)]
    raw = graph.edges()
    top = max((b for _, _, b in raw), default=0.0)
    widths = edge_width([b for _, _, b in raw], top)
    edges = [{"from": a, "to": b, "bytes": float(nb), "width": float(w),
              "cross": bool(on is not None and _crosses(int(placement[a]), int(placement[b]), len(device_names),
                                                        splits)),
              "span": int(round(layout.x[b] - layout.x[a]))} for (a, b, nb), w in zip(raw, widths)]
    modules = []
    if n > collapse_above:
        modules = _modules(graph, compute, x, y, nodes, on, placement, device_names, splits)
    return {"nodes": nodes, "edges": edges, "modules": modules, "max_bytes": float(top)}


def _crosses(a: int, b: int, nd: int, splits) -> bool:
    """Does a tensor move between devices on an edge from gene a to gene b? Not between ops on one device, nor
    between shards of one batch split (each reads its own samples); a channel split's consumers gather."""
    if a != b:
        return True
    return a >= nd and splits[a - nd].dim == "channel"


def _modules(graph, compute, x, y, nodes, on, placement, device_names, splits=()) -> list[dict]:
    _, groups = coarsen(graph, module_count(len(graph)))
    groups = {name: sorted(graph.index[m] for m in members) for name, members in groups.items()
              if len(members) > 1}  # an op left on its own (the network's inputs) is shown as itself
    out = []
    totals = [float(compute[idx].sum()) for idx in groups.values()]
    sizes = scale_sizes(totals, NODE_SIZE[0] + 4, NODE_SIZE[1] + 14)
    for k, (name, idx) in enumerate(groups.items()):
        for i in idx:
            nodes[i]["module"] = k
        costliest = max(idx, key=lambda i: (compute[i], -i))
        used = {d for i in idx for d in on[i]} if on else set()
        out.append({"name": name, "members": idx, "x": float(np.mean(x[idx])), "y": float(np.mean(y[idx])),
                    "size": float(sizes[k]), "kind": graph.ops[costliest].kind,
                    "device": next(iter(used)) if len(used) == 1 else None,
                    "card": _module_card(graph, name, idx, placement, device_names, splits)})
    return out


# -- the device graph -------------------------------------------------------------------------------

DEVICE_RADIUS = 340.0  # canvas units: devices on a circle, channels (hubs) inside it
BANDWIDTH_WIDTH = (1.5, 9.0)  # edge width of no bandwidth and of the widest channel


def _hub_positions(anchors: np.ndarray, gap: float = 90.0, rounds: int = 60) -> np.ndarray:
    """Channel hubs near the devices they serve, pushed apart until ``gap`` apart (deterministic)."""
    n = len(anchors)
    angle = 2 * np.pi * np.arange(n) / max(n, 1)
    pos = anchors + 0.15 * gap * np.stack([np.cos(angle), np.sin(angle)], axis=1)
    for _ in range(rounds):
        moved = False
        for a in range(n):
            for b in range(a + 1, n):
                d = pos[b] - pos[a]
                dist = float(np.hypot(*d))
                if dist < gap:
                    push = (d / dist if dist > 1e-9 else np.array([1.0, 0.0])) * (gap - dist) / 2
                    pos[a] -= push
                    pos[b] += push
                    moved = True
        if not moved:
            break
    return pos


def device_graph_view(devices, result=None, placement=None, graph=None) -> dict:
    """Devices and channels as nodes (a channel is a hub its routes pass through), edges device → channel
    for a route's source and channel → device for its destination, width ∝ the channel's bandwidth.

    With a simulation ``result`` (of ``placement`` on ``graph``), a channel's label and card say how many
    bytes it carries, how long it is busy and its utilisation; a device's card how many ops and how much
    compute the placement gives it and how busy it is. ``nodes``: ``id`` ("d0", "c0"), ``role`` ("device" or
    ``"channel"``), ``name``, ``label``, ``x``, ``y``, ``card``; ``edges``: ``from``, ``to``, ``width``,
    ``bandwidth``.
    """
    nd, nc = len(devices), len(devices.channels)
    angle = np.pi / 2 - 2 * np.pi * np.arange(nd) / max(nd, 1)
    radius = DEVICE_RADIUS * max(1.0, nd / 5)
    dpos = np.stack([radius * np.cos(angle), -radius * np.sin(angle)], axis=1) if nd > 1 else np.zeros((nd, 2))
    makespan = float(result.makespan) if result is not None else 0.0
    nodes = []
    for d, dev in enumerate(devices.devices):
        card = [["device", dev.name], ["kind", f"{dev.kind} {dev.model}".strip()],
                ["peak compute", f"{dev.peak_flops / 1e12:.4g} TFLOP/s"], ["memory", fmt_bytes(dev.memory_bytes)],
                ["memory bandwidth", f"{dev.mem_bandwidth / 1e9:.4g} GB/s"]]
        if dev.message_overhead:
            card.append(["per message", fmt_seconds(dev.message_overhead)])
        label = f"{dev.name}\n{dev.kind} {dev.model}".strip()
        if placement is not None and graph is not None:
            mine = [i for i in range(len(graph)) if int(placement[i]) == d]
            flops = sum(graph.ops[i].fwd_flops + graph.ops[i].bwd_flops for i in mine)
            card.append(["placed here", f"{len(mine)} ops, {fmt_flops(flops)}"])
            label += f"\n{len(mine)} ops"
        if result is not None:
            card.append(["busy", f"{fmt_seconds(result.busy[d])} of {fmt_seconds(makespan)}"
                         + (f" ({result.busy[d] / makespan:.0%})" if makespan > 0 else "")])
        nodes.append({"id": f"d{d}", "role": "device", "name": dev.name, "label": label,
                      "x": float(dpos[d, 0]), "y": float(dpos[d, 1]), "card": card})
    anchors = np.zeros((nc, 2))
    for c, ch in enumerate(devices.channels):
        ends = Counter([devices.index[a] for a, b in ch.routes] + [devices.index[b] for a, b in ch.routes])
        if not ends or nd < 2:
            continue
        centroid = sum(dpos[d] * k for d, k in ends.items()) / sum(ends.values())
        (owner, most), *rest = ends.most_common()
        # a channel that one device uses most (its PCIe link) sits in front of that device; a shared one
        # (a switch every device uses alike) towards the middle
        anchors[c] = 0.45 * dpos[owner] if not rest or most > rest[0][1] else 0.55 * centroid
    cpos = _hub_positions(anchors, gap=130.0)
    top = max((ch.bandwidth for ch in devices.channels), default=0.0)
    lo, hi = BANDWIDTH_WIDTH
    edges = []
    for c, ch in enumerate(devices.channels):
        card = [["channel", ch.name], ["bandwidth", f"{ch.bandwidth / 1e9:.4g} GB/s"],
                ["latency", fmt_seconds(ch.latency)],
                ["routes", ", ".join(f"{a} → {b}" for a, b in ch.routes) or "none"]]
        label = f"{ch.name}\n{ch.bandwidth / 1e9:.4g} GB/s"
        if result is not None:
            moved, busy = float(result.channel_bytes[c]), float(result.channel_busy[c])
            card += [["carries", fmt_bytes(moved)],
                     ["busy", f"{fmt_seconds(busy)}" + (f" ({busy / makespan:.0%} of the step)" if makespan > 0
                                                        else "")]]
            label += f"\ncarries {fmt_bytes(moved)}"
        nodes.append({"id": f"c{c}", "role": "channel", "name": ch.name, "label": label,
                      "x": float(cpos[c, 0]), "y": float(cpos[c, 1]), "card": card})
        width = lo + (hi - lo) * ch.bandwidth / top if top > 0 else lo
        ends = list(dict.fromkeys([(f"d{devices.index[a]}", f"c{c}") for a, _ in ch.routes]
                                  + [(f"c{c}", f"d{devices.index[b]}") for _, b in ch.routes]))
        edges += [{"from": a, "to": b, "width": float(width), "bandwidth": float(ch.bandwidth)} for a, b in ends]
    return {"nodes": nodes, "edges": edges}
