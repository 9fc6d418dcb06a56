"""A network's headline numbers and its op table."""

from __future__ import annotations

from ..model.graph import PRECISION_BYTES, Graph


def network_summary(graph: Graph) -> dict:
    """Ops, edges, total forward/backward FLOPs, parameter bytes and count (at the network's precision),
    activation bytes."""
    t = graph.totals()
    t["params"] = t["param_bytes"] / PRECISION_BYTES[graph.precision]
    t["precision"] = graph.precision
    return t


def op_table(graph: Graph, placement=None, device_names=None, splits=()) -> list[dict]:
    """One row per op in topological order (sizes in MB, compute in GFLOP; a device column with a placement)."""
    rows = []
    for i, op in enumerate(graph.ops):
        row = {"#": i, "op": op.name, "kind": op.kind, "inputs": len(graph.parents[i]),
               "forward GFLOP": op.fwd_flops / 1e9, "backward GFLOP": op.bwd_flops / 1e9,
               "output MB": op.output_bytes / 1e6, "parameters MB": op.param_bytes / 1e6,
               "shape": " × ".join(str(s) for s in op.shape)}
        if placement is not None and device_names is not None:
            from ..model.sharding import gene_label
            row["device"] = gene_label(int(placement[i]), device_names, splits)
        rows.append(row)
    return rows
