"""Coarsening a network into groups of ops (Placeto's Merge-and-Colocate) and back.

Large models have thousands of ops; placing groups is faster to search and
closer to how people split models by hand. :func:`coarsen` repeatedly takes
the cheapest group and merges it into the neighbour it exchanges the most
bytes with, as long as the result stays acyclic, until at most N groups are
left; the network's input ops stay on their own. The calls of one module (ops
``m``, ``m#2``, ...: a module called twice shares its weights) start in one
group, with every op on a path between them so the group stays acyclic: a
group placement never splits a shared module's weights over two devices. :func:`contract` builds the grouped network: a group computes what its
members compute, keeps all their activations (for memory), and sends to
another group the distinct tensors its members send there.

The mapping group -> member ops is written next to the network file
(``NET.groups.json``, format ``placement-groups/1``) so that a placement of the
groups can be expanded to the real model's ops (:func:`expand_assignment`).
No torch here: the core and the dashboard use this too.
"""

from __future__ import annotations

import heapq
from pathlib import Path
from typing import Mapping

from ..base.errors import InputError, require_list, require_mapping, require_name
from .graph import Graph, Op
from ..base.jsonio import read_json, write_json

FORMAT = "placement-groups/1"

# Cost of an op for picking the cheapest: roofline time on a nominal device with 10 FLOP per byte of
# memory bandwidth (10 TFLOPS, 1 TB/s), the balance of current CPUs and GPUs. Only the order matters.
_NOMINAL_FLOPS = 10e12
_NOMINAL_BANDWIDTH = 1e12


def op_cost(op: Op) -> float:
    return max((op.fwd_flops + op.bwd_flops) / _NOMINAL_FLOPS, 3.0 * op.mem_bytes / _NOMINAL_BANDWIDTH)


def contract(graph: Graph, groups: list[list[str]], names: list[str] | None = None,
             kinds: list[str] | None = None) -> Graph:
    """The network with each group of ops (disjoint, covering every op, acyclic) as one op."""
    owner: dict[str, int] = {}
    for g, members in enumerate(groups):
        for m in members:
            if m in owner:
                raise ValueError(f"op {m!r} is in two groups")
            owner[m] = g
    missing = [op.name for op in graph.ops if op.name not in owner]
    if missing:
        raise ValueError(f"ops in no group: {missing[:5]}")
    pos = graph.index
    groups = [sorted(members, key=pos.__getitem__) for members in groups]
    if names is None:
        names = group_names(groups)
    ops = []
    for g, members in enumerate(groups):
        member_ops = [graph.op(m) for m in members]
        # bytes arriving from each producer group: every distinct producer op's tensor once
        incoming: dict[int, dict[str, float]] = {}
        for m in member_ops:
            for p in m.inputs:
                pg = owner[p]
                if pg != g:
                    b = m.edge_bytes(p, graph.op(p).output_bytes)
                    seen = incoming.setdefault(pg, {})
                    seen[p] = max(seen.get(p, 0.0), b)
        inputs = tuple(names[pg] for pg in sorted(incoming, key=lambda pg: pos[groups[pg][0]]))
        output = sum(m.output_bytes for m in member_ops)
        costliest = max(member_ops, key=op_cost)
        modules = list(dict.fromkeys(m.module or m.name for m in member_ops))
        ops.append(Op(
            name=names[g],
            kind=kinds[g] if kinds else costliest.kind,
            inputs=inputs,
            # every edge states its bytes: a group's output_bytes is all its members' activations
            input_bytes={names[pg]: sum(incoming[pg].values()) for pg in incoming},
            fwd_flops=sum(m.fwd_flops for m in member_ops),
            bwd_flops=sum(m.bwd_flops for m in member_ops),
            output_bytes=output,
            param_bytes=sum(m.param_bytes for m in member_ops),
            mem_bytes=sum(m.mem_bytes for m in member_ops),
            shape=member_ops[-1].shape,
            times=_summed_times(member_ops),
            module=",".join(modules),
        ))
    return Graph(graph.name, ops, graph.batch_size, source=graph.source, precision=graph.precision)


def _summed_times(ops: list[Op]) -> dict:
    keys = set.intersection(*(set(o.times) for o in ops)) if all(o.times for o in ops) else set()
    out = {}
    for k in sorted(keys):
        phases = set.intersection(*(set(o.times[k]) for o in ops))
        out[k] = {ph: sum(o.times[k][ph] for o in ops) for ph in sorted(phases)}
    return out


def coarsen(graph: Graph, max_groups: int, *, strict: bool = True) -> tuple[Graph, dict[str, list[str]]]:
    """At most ``max_groups`` groups by merging cheapest groups into neighbours; (network, group -> ops).

    When every further merge would close a cycle before ``max_groups`` is reached, ``strict`` refuses with the
    number that can be reached; otherwise the groups reached are returned."""
    if isinstance(max_groups, bool) or not isinstance(max_groups, int) or max_groups < 1:
        raise InputError(f"the number of groups must be a positive integer, got {max_groups!r}", field="--groups",
                         fix="Use e.g. --groups 40")
    n = len(graph)
    parent = list(range(n))  # union-find over op indices

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    succ: list[dict[int, float]] = [dict() for _ in range(n)]  # group root -> {successor root: bytes}
    pred: list[dict[int, float]] = [dict() for _ in range(n)]
    for p, c, b in graph.edges():
        succ[p][c] = succ[p].get(c, 0.0) + b
        pred[c][p] = pred[c].get(p, 0.0) + b
    cost = [op_cost(op) for op in graph.ops]
    members: dict[int, list[int]] = {i: [i] for i in range(n)}
    # the network's inputs stay ops of their own: they mark where data enters (and its shape)
    fixed = {i for i, op in enumerate(graph.ops) if op.kind == "input"}
    alive = n
    for hull in shared_module_hulls(graph):
        for i in hull[1:]:
            a, b = find(i), find(hull[0])
            if a != b:
                _merge(a, b, parent, succ, pred, members, cost)
                alive -= 1
    heap = [(cost[i], i, i) for i in range(n) if i not in fixed and find(i) == i]
    heapq.heapify(heap)
    stuck: list[int] = []  # groups whose every merge would close a cycle, until something changes

    def reaches(a: int, b: int) -> bool:
        """Is there a path a -> ... -> b other than the direct edge?"""
        stack = [s for s in succ[a] if s != b]
        seen = set(stack)
        while stack:
            x = stack.pop()
            if x == b:
                return True
            for s in succ[x]:
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
        return False

    while alive > max_groups and heap:
        c, _, g = heapq.heappop(heap)
        if find(g) != g or c != cost[g]:
            continue
        # neighbours by bytes exchanged, heaviest first; merging must not close a cycle
        neigh: dict[int, float] = {}
        for h, b in list(succ[g].items()) + list(pred[g].items()):
            if h not in fixed:
                neigh[h] = neigh.get(h, 0.0) + b
        target = None
        for h, _ in sorted(neigh.items(), key=lambda kv: (-kv[1], cost[kv[0]], min(members[kv[0]]))):
            a, b = (g, h) if h in succ[g] else (h, g)
            if not reaches(a, b):
                target = h
                break
        if target is None:
            stuck.append(g)
            continue
        _merge(g, target, parent, succ, pred, members, cost)
        alive -= 1
        heapq.heappush(heap, (cost[target], target, target))
        for s in stuck:  # the merge may have removed the path that blocked them
            if find(s) == s:
                heapq.heappush(heap, (cost[s], s, s))
        stuck.clear()
    if alive > max_groups and strict:
        raise InputError(f"{graph.name} cannot be coarsened below {alive} groups without a cycle", field="--groups",
                         fix=f"Use --groups {alive} or more")
    roots = sorted(members, key=lambda r: min(members[r]))
    groups = [[graph.ops[i].name for i in sorted(members[r])] for r in roots]
    names = group_names(groups)
    return contract(graph, groups, names), dict(zip(names, groups))


def shared_module_hulls(graph: Graph) -> list[list[int]]:
    """For each module called more than once (ops ``m``, ``m#2``, ... of module ``m``): its calls and every op
    on a path from one call to another, by index, in topological order."""
    calls: dict[str, list[int]] = {}
    for i, op in enumerate(graph.ops):
        if op.module and (op.name == op.module or op.name.startswith(op.module + "#")):
            calls.setdefault(op.module, []).append(i)
    hulls = []
    for idx in calls.values():
        if len(idx) < 2:
            continue
        below = set(idx)  # ops reachable from a call
        for i in range(idx[0], len(graph)):
            if i in below or any(p in below for p in graph.parents[i]):
                below.add(i)
        above = set(idx)  # ops a call is reachable from
        for i in range(idx[-1], -1, -1):
            if i in above or any(c in above for c in graph.children[i]):
                above.add(i)
        hulls.append(sorted(below & above))
    return hulls


def tied_calls(graph: Graph) -> list[list[int]]:
    """The calls of each module with weights that is called more than once (ops ``m``, ``m#2``, ...), by index:
    they read one copy of the weights, so a real run needs them on one device (``torch/apply.py`` refuses a
    placement that splits them; a module without weights, a shared ReLU, may run anywhere)."""
    calls: dict[str, list[int]] = {}
    for i, op in enumerate(graph.ops):
        if op.module and (op.name == op.module or op.name.startswith(op.module + "#")):
            calls.setdefault(op.module, []).append(i)
    return [idx for idx in calls.values() if len(idx) > 1 and any(graph.ops[i].param_bytes > 0 for i in idx)]


def group_names(groups: list[list[str]]) -> list[str]:
    """A group is named after its first op in topological order, plus how many more it holds."""
    return [m[0] if len(m) == 1 else f"{m[0]}+{len(m) - 1}" for m in groups]


def _merge(g: int, h: int, parent, succ, pred, members, cost) -> None:
    """Fold group g into group h (both roots)."""
    parent[g] = h
    members[h].extend(members.pop(g))
    cost[h] += cost[g]
    for s, b in succ[g].items():
        if s != h:
            succ[h][s] = succ[h].get(s, 0.0) + b
            pred[s][h] = pred[s].get(h, 0.0) + b
        pred[s].pop(g, None)
    for p, b in pred[g].items():
        if p != h:
            pred[h][p] = pred[h].get(p, 0.0) + b
            succ[p][h] = succ[p].get(h, 0.0) + b
        succ[p].pop(g, None)
    succ[h].pop(g, None)
    pred[h].pop(g, None)
    succ[g] = {}
    pred[g] = {}


# -- the group file -----------------------------------------------------------------------------

def groups_path(network_path: str | Path) -> Path:
    """``net.json`` -> ``net.groups.json``: where import-model writes the mapping."""
    p = Path(network_path)
    return p.with_name(p.name[:-5] + ".groups.json" if p.name.endswith(".json") else p.name + ".groups.json")


def groups_to_dict(network: str, groups: Mapping[str, list[str]]) -> dict:
    return {"format": FORMAT, "network": network, "groups": {g: list(m) for g, m in groups.items()}}


def write_groups(path: str | Path, network: str, groups: Mapping[str, list[str]]) -> None:
    write_json(path, groups_to_dict(network, groups))


def read_groups(path: str | Path) -> dict[str, list[str]]:
    source = str(path)
    data = require_mapping(read_json(path), source=source, field=None, what="a group mapping")
    if data.get("format") != FORMAT:
        raise InputError(f"unknown format {data.get('format')!r}", source=source, field="format",
                         fix=f'Set "format": "{FORMAT}" (import-model --groups writes these files)')
    raw = require_mapping(data.get("groups"), source=source, field="groups", what="group -> op names")
    out: dict[str, list[str]] = {}
    seen: dict[str, str] = {}
    for g, members in raw.items():
        members = require_list(members, source=source, field=f"groups.{g}", what="op names")
        for j, m in enumerate(members):
            require_name(m, source=source, field=f"groups.{g}[{j}]")
            if m in seen:
                raise InputError(f"op {m!r} is in groups {seen[m]!r} and {g!r}", source=source, field=f"groups.{g}",
                                 fix="Each op belongs to one group")
            seen[m] = g
        out[g] = list(members)
    return out


def expand_assignment(assignment: Mapping[str, str], groups: Mapping[str, list[str]]) -> dict[str, str]:
    """A placement of groups as a placement of their member ops."""
    out: dict[str, str] = {}
    for g, device in assignment.items():
        if g not in groups:
            raise InputError(f"{g!r} is not a group of this mapping", field="placement",
                             fix="Use the .groups.json written together with the coarsened network")
        for m in groups[g]:
            out[m] = device
    return out
