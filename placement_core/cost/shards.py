"""What a shard of an op costs: the op with its work scaled to its share, costed by the problem's profile.

A shard that holds a fraction ``f`` of an op's output channels does ``f`` of its FLOPs, holds ``f`` of
its weights and writes ``f`` of its output, but reads the whole input (every shard needs every input
channel): Exprimo's "ordinary conv cost with c_i output channels". A shard that holds ``f`` of the
batch does ``f`` of everything except its weights, which it holds whole. Costing the scaled op with
the same profile keeps every rule of the profile (a cycle's floor per term under ``exprimo-2020``,
the roofline's max of compute and traffic, measured times scaled like ``Graph.with_batch_size``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from ..model.devices import DeviceGraph
from ..model.graph import Graph, Op
from .timings import scaled

# Exprimo's convolution and inner-product terms: forward (input, filter, output), backward (output
# gradient, filter, input gradient). The filter term is the weights; the input (gradient) is whole.
_EXPRIMO_WEIGHT_TERM = 1


def _fallback_terms(graph: Graph, i: int) -> tuple[dict, int]:
    """The profile's own fallback (cost._fallback_terms) and how many input terms it starts or ends with."""
    op = graph.ops[i]
    ins = [graph.edge_bytes(p, i) for p in graph.parents[i]]
    return ({"fwd": (op.fwd_flops, ins + [op.param_bytes, op.output_bytes]),
             "bwd": (op.bwd_flops, [op.output_bytes, op.param_bytes] + ins)}, len(ins))


def _scaled_terms(graph: Graph, i: int, dim: str, f: float) -> dict:
    op = graph.ops[i]
    if op.exprimo is not None:
        terms, n_in, weight = op.exprimo, 1, _EXPRIMO_WEIGHT_TERM
    else:
        terms, n_in = _fallback_terms(graph, i)
        weight = n_in  # forward: inputs, weights, output
    fl, fwd = terms["fwd"]
    bfl, bwd = terms["bwd"]
    fwd, bwd = list(fwd), list(bwd)
    if dim == "channel":
        # the input (forward) and the input gradient (backward, the last terms) keep their full size
        fwd = [b if j < n_in else b * f for j, b in enumerate(fwd)]
        bwd = [b if j >= len(bwd) - n_in else b * f for j, b in enumerate(bwd)]
    else:
        has_w = op.param_bytes > 0
        fwd = [b if (has_w and j == weight) else b * f for j, b in enumerate(fwd)]
        bwd_weight = _EXPRIMO_WEIGHT_TERM if op.exprimo is not None else 1
        bwd = [b if (has_w and j == bwd_weight) else b * f for j, b in enumerate(bwd)]
    return {"fwd": (fl * f, fwd), "bwd": (bfl * f, bwd)}


def shard_op(graph: Graph, i: int, dim: str, f: float, name: str) -> Op:
    """Op ``i`` reduced to a shard holding fraction ``f`` of its ``dim``, as a standalone op ``name``."""
    op = graph.ops[i]
    ins = sum(graph.edge_bytes(p, i) for p in graph.parents[i])
    if dim == "channel":
        rest = max(op.mem_bytes - ins, 0.0)
        mem = min(op.mem_bytes, ins) + rest * f
        params = op.param_bytes * f
        upd_scale = f
    else:
        weights = min(op.param_bytes, op.mem_bytes)
        mem = (op.mem_bytes - weights) * f + weights
        params = op.param_bytes
        upd_scale = 1.0
    times = {d: {ph: t * (upd_scale if ph == "update" else f) for ph, t in v.items()} for d, v in op.times.items()}
    shape = tuple(op.shape)
    if dim == "batch" and shape and shape[0] == graph.batch_size:  # its GEMMs' tiles at its rows, as with_batch_size
        shape = (max(1, round(shape[0] * f)),) + shape[1:]
    return replace(op, name=name, inputs=(), input_bytes={}, fwd_flops=op.fwd_flops * f, bwd_flops=op.bwd_flops * f,
                   output_bytes=op.output_bytes * f, param_bytes=params, mem_bytes=mem, times=times, shape=shape,
                   exprimo=_scaled_terms(graph, i, dim, f), **_extra_scaled(op, f))


def _extra_scaled(op: Op, f: float) -> dict:
    """Fields some versions of Op carry beyond the ones above (the weight-gradient FLOPs of zb-h1)."""
    w = getattr(op, "bwd_weight_flops", None)
    return {} if w is None else {"bwd_weight_flops": w * f}


def shard_costs(profile, graph: Graph, devices: DeviceGraph, requests: Sequence[tuple[int, str, float]]):
    """The profile's cost arrays for each requested shard ``(op, dim, fraction)``, one row each."""
    ops, table = [], {}
    timings = getattr(profile, "timings", None) or {}
    for r, (i, dim, f) in enumerate(requests):
        name = f"#{r}"
        ops.append(shard_op(graph, i, dim, f, name))
        measured = timings.get(graph.ops[i].name)
        if measured:
            # a shard keeps its op's fixed part (its launch, its whole input read): timings.scaled
            table[name] = {d: scaled(v, f, update=f if dim == "channel" else 1.0) for d, v in measured.items()}
    mini = Graph("shards", ops, graph.batch_size, precision=graph.precision)
    kwargs = {"timings": table} if hasattr(profile, "timings") else {}
    return replace(profile, **kwargs).arrays(mini, devices)


def gather_rate(profile, devices: DeviceGraph) -> np.ndarray:
    """Seconds per byte of a gather (the concatenation of shards) on each device: a copy read and written
    under the roofline; free under ``exprimo-2020``, whose concat ops cost nothing."""
    copies = getattr(profile, "gather_copies", 2.0)
    return np.array([copies / d.mem_bandwidth for d in devices.devices], dtype=float)
