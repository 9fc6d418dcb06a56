"""The computation graph: ops, the tensors on their edges, a stable topological order.

A :class:`Graph` is immutable once built; everything downstream (cost model,
simulator, optimizers) indexes ops by their position in ``graph.ops``, which
is the deterministic topological order. That index is what a placement array
is over (thesis §3.2.1).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

from ..base.errors import InputError

BYTES_PER_FLOAT = 4
# The datatype a network trains in: the size of its tensors and weights, and which of a device's peaks its
# matmuls reach (a device's ``peaks``; fp32 is its ``peak_flops``).
PRECISION_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


@dataclass(frozen=True)
class Op:
    """One node of the training step's forward graph.

    ``bwd_flops`` counts gradients with respect to inputs and weights;
    ``bwd_weight_flops`` is its weight-gradient part (W; the rest, B, is the
    input gradient), ``None`` when the file does not say: then an op with
    parameters splits evenly (a dense layer's 1:1) and one without has no W.
    ``mem_bytes`` is the forward memory traffic (reads + writes), which the
    roofline profile uses for memory-bound ops. ``input_bytes`` overrides the
    tensor size on the edge from a given input (ops with several outputs).
    """

    name: str
    kind: str = "other"
    inputs: tuple[str, ...] = ()
    fwd_flops: float = 0.0
    bwd_flops: float = 0.0
    output_bytes: float = 0.0
    param_bytes: float = 0.0
    mem_bytes: float = 0.0
    shape: tuple[int, ...] = ()
    times: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    input_bytes: Mapping[str, float] = field(default_factory=dict)
    module: str | None = None
    # Cost terms of the thesis' implementation (Paleo's model), kept so the
    # ``exprimo-2020`` profile can reproduce its numbers exactly:
    # {"fwd": [flops, [bytes, ...]], "bwd": [flops, [bytes, ...]]}.
    exprimo: Mapping[str, tuple] | None = None
    bwd_weight_flops: float | None = None
    # A convolution's groups: a channel split divides the weights by output channel, which a grouped
    # (depthwise) convolution's input groups tie together, so only groups = 1 splits by channel.
    groups: int = 1

    @property
    def weight_grad_share(self) -> float:
        """The share of the backward that computes weight gradients (zb-h1's W task)."""
        if self.bwd_weight_flops is None:
            return 0.5 if self.param_bytes > 0 else 0.0
        return self.bwd_weight_flops / self.bwd_flops if self.bwd_flops > 0 else 0.0

    def edge_bytes(self, parent: str, parent_output_bytes: float) -> float:
        return float(self.input_bytes.get(parent, parent_output_bytes))


class Graph:
    """Ops in deterministic topological order plus index-based adjacency."""

    def __init__(self, name: str, ops: Iterable[Op], batch_size: int = 1, *,
                 source: str | None = None, precision: str = "fp32"):
        ops = list(ops)
        self.name = name
        self.batch_size = int(batch_size)
        self.source = source
        if precision not in PRECISION_BYTES:
            raise InputError(f"precision must be one of {', '.join(PRECISION_BYTES)}, got {str(precision)[:20]!r}",
                             source=source, field="precision", fix="Use fp32, bf16 or fp16")
        self.precision = precision
        _validate(ops, source)
        self.ops: tuple[Op, ...] = tuple(topological_order(ops, source))
        self.index: dict[str, int] = {op.name: i for i, op in enumerate(self.ops)}
        self.parents: tuple[tuple[int, ...], ...] = tuple(
            tuple(dict.fromkeys(self.index[p] for p in op.inputs)) for op in self.ops)
        children: list[list[int]] = [[] for _ in self.ops]
        for i, ps in enumerate(self.parents):
            for p in ps:
                children[p].append(i)
        self.children: tuple[tuple[int, ...], ...] = tuple(tuple(c) for c in children)

    def __len__(self) -> int:
        return len(self.ops)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.ops)} ops, batch_size={self.batch_size})"

    def op(self, name: str) -> Op:
        return self.ops[self.index[name]]

    def edge_bytes(self, parent: int, child: int) -> float:
        """Bytes of the tensor that flows from ``parent`` into ``child``."""
        p = self.ops[parent]
        return self.ops[child].edge_bytes(p.name, p.output_bytes)

    def edges(self) -> list[tuple[int, int, float]]:
        return [(p, c, self.edge_bytes(p, c)) for c, ps in enumerate(self.parents) for p in ps]

    @property
    def sources(self) -> list[int]:
        return [i for i, ps in enumerate(self.parents) if not ps]

    @property
    def sinks(self) -> list[int]:
        return [i for i, cs in enumerate(self.children) if not cs]

    def totals(self) -> dict[str, float]:
        ops = self.ops
        return {
            "ops": len(ops),
            "edges": sum(len(ps) for ps in self.parents),
            "fwd_flops": sum(o.fwd_flops for o in ops),
            "bwd_flops": sum(o.bwd_flops for o in ops),
            "param_bytes": sum(o.param_bytes for o in ops),
            "activation_bytes": sum(o.output_bytes for o in ops),
        }

    def with_batch_size(self, batch_size: int) -> "Graph":
        """The same network at another batch size.

        FLOPs, activation bytes and activation traffic scale linearly with the
        batch; parameters (and their share of the traffic) do not. Measured
        forward and backward times scale linearly too, which is only an
        approximation (re-measure for accurate numbers); weight updates do not.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InputError(f"batch size must be a positive integer, got {batch_size!r}",
                             source=self.source, field="batch_size", fix="Use 1 or more")
        if batch_size == self.batch_size:
            return self
        k = batch_size / self.batch_size
        ops = []
        for op in self.ops:
            activation_traffic = max(op.mem_bytes - op.param_bytes, 0.0)
            shape = op.shape
            if shape and shape[0] == self.batch_size:
                shape = (batch_size,) + tuple(shape[1:])
            ex = op.exprimo
            if ex is not None:
                ex = {ph: (fl * k, [b * k for b in mem]) for ph, (fl, mem) in ex.items()}
            ops.append(replace(
                op,
                fwd_flops=op.fwd_flops * k,
                bwd_flops=op.bwd_flops * k,
                bwd_weight_flops=None if op.bwd_weight_flops is None else op.bwd_weight_flops * k,
                output_bytes=op.output_bytes * k,
                mem_bytes=activation_traffic * k + min(op.param_bytes, op.mem_bytes),
                shape=tuple(shape),
                times={d: {ph: t if ph == "update" else t * k for ph, t in v.items()} for d, v in op.times.items()},
                input_bytes={n: b * k for n, b in op.input_bytes.items()},
                exprimo=ex,
            ))
        return Graph(self.name, ops, batch_size, source=self.source, precision=self.precision)

    def with_precision(self, precision: str) -> "Graph":
        """The same network trained in another datatype: every tensor's and weight's bytes scale with the
        element size (fp32 -> bf16 halves them); FLOPs stay; measured times are kept as they are."""
        if precision not in PRECISION_BYTES:
            raise InputError(f"precision must be one of {', '.join(PRECISION_BYTES)}, got {str(precision)[:20]!r}",
                             source=self.source, field="precision", fix="Use fp32, bf16 or fp16")
        if precision == self.precision:
            return self
        k = PRECISION_BYTES[precision] / PRECISION_BYTES[self.precision]
        ops = [replace(op, output_bytes=op.output_bytes * k, param_bytes=op.param_bytes * k,
                       mem_bytes=op.mem_bytes * k, input_bytes={n: b * k for n, b in op.input_bytes.items()})
               for op in self.ops]
        return Graph(self.name, ops, self.batch_size, source=self.source, precision=precision)

    def renamed(self, mapping: Mapping[str, str]) -> "Graph":
        """The same graph with ops renamed (used by tests of name-independence)."""
        def rn(n: str) -> str:
            return mapping.get(n, n)
        ops = [replace(op, name=rn(op.name), inputs=tuple(rn(i) for i in op.inputs),
                       input_bytes={rn(n): b for n, b in op.input_bytes.items()})
               for op in self.ops]
        return Graph(self.name, ops, self.batch_size, source=self.source, precision=self.precision)


def _validate(ops: list[Op], source: str | None) -> None:
    if not ops:
        raise InputError("the network has no ops", source=source, field="ops",
                         fix="Add at least one op")
    seen: dict[str, int] = {}
    for i, op in enumerate(ops):
        if op.name in seen:
            raise InputError(f"duplicate op name {op.name!r} (ops[{seen[op.name]}] and ops[{i}])",
                             source=source, field=f"ops[{i}].name", fix="Give every op a unique name")
        seen[op.name] = i
    for i, op in enumerate(ops):
        for j, parent in enumerate(op.inputs):
            if parent not in seen:
                raise InputError(f"op {op.name!r} names input {parent!r}, which is not an op in this network",
                                 source=source, field=f"ops[{i}].inputs[{j}]",
                                 fix="Fix the name or add the missing op")
            if parent == op.name:
                raise InputError(f"op {op.name!r} lists itself as an input (a cycle)",
                                 source=source, field=f"ops[{i}].inputs[{j}]",
                                 fix="Remove the self-reference")
        for parent in op.input_bytes:
            if parent not in op.inputs:
                raise InputError(f"op {op.name!r} gives bytes for {parent!r}, which is not one of its inputs",
                                 source=source, field=f"ops[{i}].inputs", fix="Remove the override")


def topological_order(ops: list[Op], source: str | None = None) -> list[Op]:
    """Kahn's algorithm, ties broken by position in ``ops``: same input, same order."""
    pos = {op.name: i for i, op in enumerate(ops)}
    indeg = [0] * len(ops)
    succ: list[list[int]] = [[] for _ in ops]
    for i, op in enumerate(ops):
        for p in dict.fromkeys(op.inputs):
            succ[pos[p]].append(i)
            indeg[i] += 1
    ready = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for c in succ[i]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(ready, c)
    if len(order) < len(ops):
        cycle = _find_cycle(ops, pos, {i for i, d in enumerate(indeg) if d > 0})
        raise InputError(_describe_cycle(cycle), source=source, field="ops",
                         fix="A training step's graph must be acyclic; remove one of these inputs")
    return [ops[i] for i in order]


def _find_cycle(ops: list[Op], pos: dict[str, int], stuck: set[int]) -> list[str]:
    """One cycle among the ops Kahn's algorithm could not order (networkx's depth-first search), in data-flow
    order, starting at the op that comes first in the file."""
    import networkx as nx

    # Edges point from an op to its inputs: every stuck op has a stuck input, so walking them from any
    # stuck op ends in a cycle (a stuck op downstream of a cycle need not be on one).
    g = nx.DiGraph()
    g.add_nodes_from(sorted(stuck))
    g.add_edges_from((i, pos[p]) for i in sorted(stuck) for p in dict.fromkeys(ops[i].inputs) if pos[p] in stuck)
    cycle = [u for u, _ in nx.find_cycle(g, source=min(stuck))]
    cycle.reverse()  # inputs point backwards; print in data-flow order
    first = cycle.index(min(cycle))
    cycle = cycle[first:] + cycle[:first]
    names = [ops[i].name for i in cycle]
    return names + [names[0]]


def _describe_cycle(names: list[str], shown: int = 6) -> str:
    """``a -> b -> a``; a long cycle shows its first ops and how many more (a 20,000-op cycle is one line)."""
    ops = len(names) - 1
    if ops <= shown + 2:
        return "the network has a cycle: " + " -> ".join(names)
    return (f"the network has a cycle of {ops:,} ops: " + " -> ".join(names[:shown])
            + f" -> ... ({ops - shown:,} more) -> {names[-1]}")
