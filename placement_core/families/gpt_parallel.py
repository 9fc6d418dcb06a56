"""One tensor-parallel rank of a GPT (Megatron-LM's tensor parallelism), with its collectives and recomputation
as ops of the graph.

Megatron-LM (Shoeybi et al., *Megatron-LM*, 2019, §3; Narayanan et al., SC'21, §2.3) splits each layer over
the ``tp`` GPUs of a group: the QKV projection and the MLP's first linear layer by output column
(column-parallel: each GPU holds 3H/t and 4H/t of their columns), the attention output projection and the MLP's
second linear layer by input row (row-parallel: H/t and 4H/t rows, the bias whole), so attention's heads split
over the group (A/t heads a GPU) and each half-layer ends in one all-reduce of the B·s·h output (the operator
``g``); the operator ``f`` before each half-layer is the identity forward and an all-reduce of the input's
gradient backward. The token embedding and the logit layer split over the vocabulary (the embedding's output is
all-reduced; the loss is Megatron's vocabulary-parallel cross entropy, three all-reduces of one fp32 number a
token). Norms, residual adds and the position embedding are replicated.

With sequence parallelism (Korthikanti et al., *Reducing activation recomputation in large transformer
models*, 2022, §4.2.2) the replicated parts split over the sequence instead: ``g`` becomes a reduce-scatter
(all-gather backward) and ``f`` an all-gather (reduce-scatter backward); norms, adds and the layers' inputs
are 1/t a GPU. The all-gathered input of a linear layer is not kept for the backward (Megatron gathers it again
there, overlapped with the input-gradient GEMM; that second gather is not charged here).

Since the t GPUs of a group do the same work at the same time, the graph is one of them (a *folded* group):
every op's FLOPs, weights, bytes and GEMM shape are one GPU's (so cost/gemm.py sees the sharded GEMM), and each
collective is an op of kind ``collective`` named for what it does (``l3.attn.tp_allreduce``,
``l3.mlp.tp_grad_allreduce``, ``embed.tp_allreduce``, ...) whose forward and backward take the collective's time:
the op's own ``times`` ({"gpu": {"fwd": s, "bwd": s}}), the mechanism measured times use (``cost.profiles.
_apply_measured``), so the event simulator, traces and Gantt charts show them like any op. Times on an op are
given at the graph's batch and the simulator scales them linearly to a micro-batch and a batch shard (as it does
measured times), so the builder computes each collective for the simulated unit (``unit_batch`` sequences) and
writes it multiplied by batch / unit_batch: the unit then runs exactly the collective's time.

Between pipeline stages each GPU of a group sends 1/t of a layer's output over its own link (Megatron's
scatter/gather optimisation, Narayanan et al. §4.1), so the edges that enter a layer carry 1/t of the tensor.

Activation recomputation (``recompute``): ``full`` keeps only each layer's input and re-runs the layer's forward
(its collectives included) at the start of the layer's backward: an op ``l<i>.recompute`` after the layer whose
backward takes the layer's forward time (and whose backward FLOPs are the layer's forward FLOPs), the layer's
other outputs not kept. ``selective`` recomputes only attention's s² part (Korthikanti et al. §5): the scores and
softmax outputs are not kept and ``l<i>.attn.recompute``, between the context and the output projection, re-runs
them before the context's backward. The recomputed tensors live only during one layer's backward; that
transient is not counted in the peak.

ZeRO stage 3 (Rajbhandari et al., SC'20, §5.3; ``param_gather``): each layer's parameters are partitioned over
the data-parallel group and all-gathered before the layer's forward and again before its backward, an op
``l<i>.zero3_allgather`` (and ``embed.``, ``logits.zero3_allgather``) per micro-batch, timed like the
collectives above.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ..base.errors import InputError
from ..model.graph import Graph, Op
from .gpt import PRECISIONS, GPTConfig
from .layers import NetBuilder

RECOMPUTE = ("none", "selective", "full")
LOSS_BYTES = 4  # the vocabulary-parallel cross entropy reduces fp32 numbers (max, predicted logit, sum of exps)

# collective(kind, nbytes) -> seconds for one simulated unit: kind is all-reduce, all-gather or reduce-scatter
Comm = Callable[[str, float], float]


def check(config: GPTConfig, tp: int, sequence_parallel: bool = False, recompute: str = "none",
          gpus_per_node: int | None = 8) -> None:
    """A tensor-parallel degree Megatron-LM can run on this model, or an error that says why not."""
    if recompute not in RECOMPUTE:
        raise InputError(f"unknown recomputation {recompute!r}", field="--recompute", fix="Use " + ", ".join(RECOMPUTE))
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise InputError(f"the tensor-parallel degree must be a positive whole number, got {tp!r}", field="--tp")
    if gpus_per_node and (tp > gpus_per_node or gpus_per_node % tp):
        raise InputError(f"--tp {tp} does not divide the {gpus_per_node} GPUs of a node: tensor parallelism stays "
                         "inside a node (its all-reduces run on NVLink)", field="--tp",
                         fix="Use " + ", ".join(str(d) for d in range(1, gpus_per_node + 1) if gpus_per_node % d == 0))
    if config.heads % tp:
        raise InputError(f"--tp {tp} does not divide the {config.heads} attention heads", field="--tp",
                         fix="Use a degree that divides the heads: " + ", ".join(
                             str(d) for d in range(1, min(config.heads, gpus_per_node or config.heads) + 1)
                             if config.heads % d == 0 and (not gpus_per_node or gpus_per_node % d == 0)))
    if sequence_parallel and tp == 1:
        raise InputError("sequence parallelism splits the sequence over a tensor-parallel group; --tp is 1",
                         field="--sequence-parallel", fix="Give --tp 2 or more, or leave --sequence-parallel out")


def build(config: GPTConfig, tp: int, comm: Comm, *, unit_batch: int, sequence_parallel: bool = False,
          recompute: str = "none", layer_forward: Callable[[Graph], dict[str, float]] | None = None,
          param_gather: Callable[[float], float] | None = None) -> Graph:
    """One rank of a ``tp``-way tensor-parallel ``config`` (batch ``config.batch``), its collectives costed by
    ``comm`` for ``unit_batch`` sequences. ``layer_forward`` (needed for recomputation) gives the forward seconds
    of every op of a graph on the simulated GPU (its cost profile's); the builder calls it on a one-layer copy at
    ``unit_batch`` sequences to time the recomputation ops. ``param_gather`` (ZeRO stage 3) gives the seconds
    of an all-gather of a layer's parameters (its bytes on this rank, whole) over the data-parallel group: an op
    ``l<i>.zero3_allgather`` after the layer's first norm (``embed.`` and ``logits.zero3_allgather`` for those
    layers) gathers them forward and again backward."""
    check(config, tp, sequence_parallel, recompute, gpus_per_node=None)
    scale = config.batch / unit_batch
    recompute_times: dict[str, float] = {}
    if recompute != "none":
        if layer_forward is None:
            raise InputError("recomputation needs the ops' forward times", field="--recompute")
        one = _build(replace(config, layers=1, batch=unit_batch), tp, comm, 1.0, sequence_parallel, "none", {},
                     param_gather)
        fwd = layer_forward(one)
        if recompute == "full":
            # the layer's forward again, its tensor-parallel collectives included; under ZeRO-3 the weights the
            # backward gathers serve the recomputation too
            recompute_times["full"] = sum(t for name, t in fwd.items()
                                          if name.startswith("l0.") and name != "l0.zero3_allgather")
        else:
            recompute_times["selective"] = fwd["l0.scores"] + fwd["l0.softmax"]
        recompute_times = {k: v * scale for k, v in recompute_times.items()}
    return _build(config, tp, comm, scale, sequence_parallel, recompute, recompute_times, param_gather)


def _build(config: GPTConfig, t: int, comm: Comm, scale: float, sp: bool, recompute: str,
           recompute_times: dict[str, float], param_gather=None) -> Graph:
    B, S, H, A, V = config.batch, config.seq, config.hidden, config.heads, config.vocab
    e = PRECISIONS[config.precision]
    rows = B * S
    full = rows * H * e  # one B·s·h tensor, bytes
    unit = full / scale  # the same for the simulated unit (the collectives' size)
    name = config.name + (f" tp={t}" if t > 1 else "") + (" sp" if sp else "") + (
        f" recompute={recompute}" if recompute != "none" else "")
    b = NetBuilder(name, B, elem_bytes=e, precision=config.precision)
    kept_not: set[str] = set()  # ops whose output is not kept for the backward (edges keep their bytes)
    layer_edge: dict[str, float] = {}  # edges entering a layer: 1/t of the tensor (scatter/gather)
    fwd_flops_of: dict[str, float] = {}

    def coll(op_name: str, x: str, fwd: str | None, bwd: str | None, nbytes: float, out_bytes: float,
             kept: bool = True) -> str:
        """A collective op after ``x``: ``fwd`` and ``bwd`` the collective each pass runs (None: none) on
        ``nbytes`` of one unit; its output, ``out_bytes``, kept for the backward or not."""
        tf = comm(fwd, nbytes) if fwd else 0.0
        tb = comm(bwd, nbytes) if bwd else 0.0
        b.ops.append(Op(name=op_name, kind="collective", inputs=(x,), output_bytes=out_bytes,
                        mem_bytes=b.out_bytes(x) + out_bytes, shape=(B,),
                        times={"gpu": {"fwd": tf * scale, "bwd": tb * scale}}))
        b._bytes[op_name] = out_bytes
        if not kept:
            kept_not.add(op_name)
        return op_name

    def rec(op_name: str, x: str, seconds: float, flops: float) -> str:
        """A recomputation after ``x``: nothing forward, ``seconds`` backward; it passes ``x``'s tensor on."""
        b.ops.append(Op(name=op_name, kind="recompute", inputs=(x,), bwd_flops=flops, output_bytes=b.out_bytes(x),
                        shape=(B,), times={"gpu": {"fwd": 0.0, "bwd": seconds}}))
        b._bytes[op_name] = b.out_bytes(x)
        kept_not.add(op_name)
        return op_name

    def gathers(first: int, op_name: str) -> None:
        """Time the ZeRO-3 gather ``op_name`` for the parameters of the ops from ``first`` on (built since)."""
        if param_gather is None:
            return
        j = next(k for k in range(first, len(b.ops)) if b.ops[k].name == op_name)
        seconds = param_gather(sum(op.param_bytes for op in b.ops[first:]))
        b.ops[j] = replace(b.ops[j], times={"gpu": {"fwd": seconds * scale, "bwd": seconds * scale}})

    def gather_op(op_name: str, x: str) -> str:
        return coll(op_name, x, None, None, 0.0, b.out_bytes(x), kept=False) if param_gather else x

    seq_rows = rows // t if sp else rows  # a replicated part's rows on one GPU
    # the embedding: vocabulary-parallel token table (ceil(V / t) rows), the positions whole
    vshard = -(-V // t)
    elems = seq_rows * H
    emb_out = rows * H
    first = len(b.ops)
    tokens = gather_op("embed.zero3_allgather", b.input("tokens", (B, S)))
    x = b._add("embed", "embedding", (tokens,), fwd=emb_out, bwd=2 * emb_out, out_elems=emb_out,
               params=(vshard + S) * H, read_bytes=rows * e + emb_out * e, shape=(B, S, H))
    gathers(first, "embed.zero3_allgather")
    if t > 1:
        if sp:
            x = coll("embed.tp_reducescatter", x, "reduce-scatter", "all-gather", unit, full / t)
        else:
            x = coll("embed.tp_allreduce", x, "all-reduce", None, unit, full)
        kept_not.add("embed")  # reduced in place: the collective's output is the tensor kept
    for layer in range(config.layers):
        p = f"l{layer}."
        layer_edge[x] = full / t
        start = len(b.ops)
        x = _layer(b, p, x, config, t, sp, seq_rows, full, unit, coll, kept_not, recompute, recompute_times, rec,
                   gather_op)
        gathers(start, p + "zero3_allgather")
        fwd_flops_of[p] = sum(op.fwd_flops for op in b.ops[start:])
        if recompute == "full":
            kept_not.update(op.name for op in b.ops[start:])
            x = rec(p + "recompute", x, recompute_times["full"], fwd_flops_of[p])
            kept_not.discard(b.ops[-2].name)  # the layer's output is the next layer's input: kept
    layer_edge[x] = full / t
    first = len(b.ops)
    x = b._add("ln_f", "norm", (x,), fwd=elems, bwd=2 * elems, out_elems=elems, params=2 * H, shape=(B, S, H))
    x = gather_op("logits.zero3_allgather", x)
    if t > 1:
        x = (coll("logits.tp_allgather", x, "all-gather", "reduce-scatter", unit, full, kept=False) if sp
             else coll("logits.tp_grad_allreduce", x, None, "all-reduce", unit, full, kept=False))
    logits = b._add("logits", "linear", (x,), fwd=2.0 * H * vshard * rows, bwd=4.0 * H * vshard * rows,
                    out_elems=rows * vshard, params=H * vshard + (0 if config.tied else vshard), shape=(B, S, vshard))
    if t > 1:  # three all-reduces of one fp32 number a token (one unit's tokens)
        logits = coll("loss.tp_allreduce", logits, None, None, 0.0, b.out_bytes(logits), kept=False)
        ar = 3 * comm("all-reduce", rows / scale * LOSS_BYTES)
        b.ops[-1] = replace(b.ops[-1], times={"gpu": {"fwd": ar * scale, "bwd": 0.0}})
    b._add("loss", "loss", (logits,), fwd=rows * vshard, bwd=rows * vshard, out_elems=rows, shape=(B, S))
    gathers(first, "logits.zero3_allgather")
    return _finish(b, kept_not, layer_edge)


def _layer(b: NetBuilder, p: str, x: str, c: GPTConfig, t: int, sp: bool, seq_rows: int, full: float,
           unit: float, coll, kept_not: set, recompute: str, recompute_times: dict, rec, gather_op) -> str:
    B, S, H, A = c.batch, c.seq, c.hidden, c.heads
    rows = B * S
    elems = seq_rows * H
    h = b._add(p + "ln1", "norm", (x,), fwd=elems, bwd=2 * elems, out_elems=elems, params=2 * H, shape=(B, S, H))
    h = gather_op(p + "zero3_allgather", h)
    if t > 1:
        h = (coll(p + "attn.tp_allgather", h, "all-gather", "reduce-scatter", unit, full, kept=False) if sp
             else coll(p + "attn.tp_grad_allreduce", h, None, "all-reduce", unit, full, kept=False))
    qkv = b.linear(p + "qkv", (h,), H, 3 * H // t, rows, (B, S, 3 * H // t))
    heads = A // t
    score_elems = B * heads * S * S
    attn_flops = 2.0 * B * S * S * H / t
    scores = b._add(p + "scores", "matmul", (qkv,), fwd=attn_flops, bwd=2 * attn_flops, out_elems=score_elems,
                    shape=(B, heads, S, S))
    probs = b.elementwise(p + "softmax", (scores,), score_elems, (B, heads, S, S), kind="softmax")
    context = b._add(p + "context", "matmul", (probs, qkv), fwd=attn_flops, bwd=2 * attn_flops,
                     out_elems=rows * H // t, shape=(B, S, H // t))
    if recompute == "selective":
        kept_not.update((scores, probs))
        context = rec(p + "attn.recompute", context, recompute_times["selective"],
                      b.ops[-3].fwd_flops + b.ops[-2].fwd_flops)
    proj = b.linear(p + "proj", (context,), H // t, H, rows, (B, S, H))
    if t > 1:
        kept_not.add(proj)  # reduced in place: the collective's output is the tensor kept
        proj = (coll(p + "attn.tp_reducescatter", proj, "reduce-scatter", "all-gather", unit, full / t) if sp
                else coll(p + "attn.tp_allreduce", proj, "all-reduce", None, unit, full))
    x = b.elementwise(p + "add1", (proj, x), elems, (B, S, H), kind="add")
    h = b._add(p + "ln2", "norm", (x,), fwd=elems, bwd=2 * elems, out_elems=elems, params=2 * H, shape=(B, S, H))
    if t > 1:
        h = (coll(p + "mlp.tp_allgather", h, "all-gather", "reduce-scatter", unit, full, kept=False) if sp
             else coll(p + "mlp.tp_grad_allreduce", h, None, "all-reduce", unit, full, kept=False))
    up = b.linear(p + "fc1", (h,), H, 4 * H // t, rows, (B, S, 4 * H // t))
    act = b.elementwise(p + "gelu", (up,), rows * 4 * H // t, (B, S, 4 * H // t), kind="activation")
    down = b.linear(p + "fc2", (act,), 4 * H // t, H, rows, (B, S, H))
    if t > 1:
        kept_not.add(down)
        down = (coll(p + "mlp.tp_reducescatter", down, "reduce-scatter", "all-gather", unit, full / t) if sp
                else coll(p + "mlp.tp_allreduce", down, "all-reduce", None, unit, full))
    return b.elementwise(p + "add2", (down, x), elems, (B, S, H), kind="add")


def _finish(b: NetBuilder, kept_not: set[str], layer_edge: dict[str, float]) -> Graph:
    """Ops whose output is not kept hold 0 bytes after their forward; every edge keeps the tensor it carries
    (a layer's input 1/t of it, each GPU sending its share)."""
    own = {op.name: op.output_bytes for op in b.ops}
    ops = []
    for op in b.ops:
        edges = dict(op.input_bytes)
        for parent in op.inputs:
            if parent in layer_edge:
                edges[parent] = layer_edge[parent]
            elif parent in kept_not:
                edges[parent] = own[parent]
        ops.append(replace(op, input_bytes=edges, output_bytes=0.0 if op.name in kept_not else op.output_bytes))
    return Graph(b.name, ops, b.batch, precision=b.precision)
