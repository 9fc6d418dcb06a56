"""A traced model cut into pipeline stages: one ``GraphModule`` per chunk of a :class:`..analysis.pipeline_stages.PipelinePlan`.

Stage k takes the tensors that cross from chunks before it into chunks after it (in the fx graph's
order) and returns those that cross on past it, so a value that skips stages (a residual stream, the
token ids) is passed along. Python values between ops (sizes, devices) are the same for every
micro-batch: they are computed once, at the micro-batch's shape, and written into the stage as
constants. torch.distributed.pipelining sends and detaches a stage's outputs in place and receives
input gradients into contiguous buffers, so every stage output is a fresh contiguous tensor and every
floating input passes its gradient back contiguous.
"""

from __future__ import annotations

import torch
import torch.fx
from torch.fx.node import map_arg


class _ContiguousGrad(torch.autograd.Function):
    """Identity forward (a copy: the pipeline detaches views in place); the gradient goes back contiguous."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad.contiguous()


def stage_input(x):
    """A received activation: its gradient leaves the stage contiguous, as the pipeline's buffers are."""
    return _ContiguousGrad.apply(x) if isinstance(x, torch.Tensor) and x.is_floating_point() else x


def stage_output(x):
    """A fresh contiguous copy, which the pipeline may send and detach without touching saved tensors."""
    return x.clone(memory_format=torch.contiguous_format) if isinstance(x, torch.Tensor) else x


def constants(gm: torch.fx.GraphModule, example: torch.Tensor, tensor_nodes: set[str]) -> dict[str, object]:
    """The Python value of every node that is not a tensor op (sizes, devices), at ``example``'s shape."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    out: dict[str, object] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, node):
            value = super().run_node(node)
            if node.op not in ("placeholder", "get_attr", "output") and node.name not in tensor_nodes:
                out[node.name] = value
            return value

    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        Recorder(gm).run(mode.from_tensor(example))
    return out


def split_stages(gm: torch.fx.GraphModule, node_chunk: dict[str, int], consts: dict[str, object]) -> list:
    """One GraphModule per chunk. ``node_chunk``: every tensor-valued node but the input -> its chunk;
    ``consts``: the Python values of the other nodes (:func:`constants`)."""
    nodes = list(gm.graph.nodes)
    n_chunks = max(node_chunk.values()) + 1
    producer = {n.name: -1 for n in nodes if n.op == "placeholder"}
    producer.update({n.name: node_chunk[n.name] for n in nodes if n.name in node_chunk})
    last_use: dict[str, int] = {}
    for n in nodes:
        reader = n_chunks if n.op == "output" else node_chunk.get(n.name)
        if reader is None:
            continue
        for a in n.all_input_nodes:
            if a.name in producer:
                last_use[a.name] = max(last_use.get(a.name, -1), reader)
    order = [n.name for n in nodes if n.name in producer]
    output = next(n for n in nodes if n.op == "output")
    stages = []
    for k in range(n_chunks):
        g = torch.fx.Graph()
        env: dict[str, torch.fx.Node] = {}
        attrs: dict[str, torch.fx.Node] = {}
        for v in (x for x in order if producer[x] < k <= last_use.get(x, -1)):
            env[v] = g.placeholder(v) if k == 0 else g.call_function(stage_input, (g.placeholder(v),))

        def arg(a, k=k, g=g, env=env, attrs=attrs):
            if a.op == "get_attr":
                if a.target not in attrs:
                    attrs[a.target] = g.get_attr(a.target)
                return attrs[a.target]
            if a.name in env:
                return env[a.name]
            if a.name in consts:
                return consts[a.name]
            raise ValueError(f"stage {k} reads {a.name}, which no earlier stage passes on")

        for n in nodes:
            if node_chunk.get(n.name) == k:
                env[n.name] = g.node_copy(n, arg)
        if k == n_chunks - 1:
            g.output(map_arg(output.args[0], arg))
        else:
            g.output(tuple(g.call_function(stage_output, (env[v],)) for v in order
                           if producer[v] <= k < last_use.get(v, -1)))
        stages.append(torch.fx.GraphModule(gm, g))
    return stages


def plan_stages(traced, plan, micro_shape) -> list:
    """The stages of ``plan`` (:class:`..analysis.pipeline_stages.PipelinePlan`) for a traced model, at ``micro_shape``."""
    from .executor import make_input

    chunk_of = {op: c for c, (_, ops) in enumerate(plan.chunks) for op in ops}
    inputs = {n.name for n in traced.gm.graph.nodes if n.op == "placeholder"}
    node_chunk = {node: chunk_of[op] for node, op in traced.node_op.items() if node not in inputs}
    example = make_input(micro_shape, micro_shape[0], 0, traced.gm)
    return split_stages(traced.gm, node_chunk, constants(traced.gm, example, set(node_chunk) | inputs))
