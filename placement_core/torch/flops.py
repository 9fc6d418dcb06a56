"""FLOPs and memory traffic of an imported op (docs/design.md §4), and its backward's weight-gradient part.

``rec`` is the importer's record of one op (kind, FLOPs, bytes, whether it reads only the input).
"""

from __future__ import annotations

import math

import torch
import torch.fx
from torch import nn


def tensors_of(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_of(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_of(v)]
    return []


def recurrent_flops(mod: nn.RNNBase, x: torch.Tensor) -> float:
    """An LSTM/GRU/RNN layer stack's forward FLOPs (2 per multiply-add): every gate's input and hidden
    matrix products and biases, per time step, sample, layer and direction (plus an LSTM's projection)."""
    gates = {"LSTM": 4, "GRU": 3}.get(mod.mode, 1)
    h = mod.hidden_size
    h_out = getattr(mod, "proj_size", 0) or h
    dirs = 2 if mod.bidirectional else 1
    if x.dim() == 2:  # unbatched: (T, features)
        n, t = 1, x.shape[0]
    else:
        n, t = (x.shape[0], x.shape[1]) if mod.batch_first else (x.shape[1], x.shape[0])
    total = 0.0
    for layer in range(mod.num_layers):
        width = mod.input_size if layer == 0 else dirs * h_out
        per_step = 2 * gates * h * (width + h_out) + (2 * gates * h if mod.bias else 0)
        if h_out != h:
            per_step += 2 * h * h_out
        total += per_step
    return float(total * n * t * dirs)


def attention_flops(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> float:
    """Scaled dot-product attention: Q Kᵀ and the weighted sum of V, counted in full as the flop counter
    does (a causal mask does not halve it); the counter misses the CPU kernel."""
    lead = math.prod(q.shape[:-2])
    tq, e, tk, ev = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    return float(2 * lead * tq * tk * e + 2 * lead * tq * tk * ev)


def multihead_flops(mod: nn.MultiheadAttention, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> float:
    """``nn.MultiheadAttention``: the input projections of query, key and value, attention itself over every
    head (:func:`attention_flops`) and the output projection (the flop counter misses the CPU attention
    kernel inside it)."""
    e = mod.embed_dim
    if q.dim() == 2:  # unbatched: (L, E)
        n, tq, tk = 1, q.shape[0], k.shape[0]
    else:
        n, tq, tk = (q.shape[0], q.shape[1], k.shape[1]) if mod.batch_first else (q.shape[1], q.shape[0], k.shape[0])
    projections = 2 * n * (tq * e * e + tk * mod.kdim * e + tk * mod.vdim * e) + 2 * n * tq * e * e
    return float(projections + 4 * n * tq * tk * e)


def forward_flops(kind: str, node: torch.fx.Node, fetch_attr, counted: float, ins, result,
                   in_elems: int, out_elems: int) -> float:
    if kind == "recurrent" and node.op == "call_module" and ins:
        return recurrent_flops(fetch_attr(node.target), ins[0])
    if kind == "attention" and node.op == "call_module" and len(ins) >= 3:
        mod = fetch_attr(node.target)
        if isinstance(mod, nn.MultiheadAttention):
            return multihead_flops(mod, *ins[:3])
    if kind in ("conv", "deconv", "linear", "matmul", "attention") and counted > 0:
        return counted
    if kind == "attention" and node.op == "call_function" and len(ins) >= 3:
        return attention_flops(*ins[:3])
    if kind == "pool":
        if node.op == "call_module":
            mod = fetch_attr(node.target)
            k = getattr(mod, "kernel_size", None)
            if k is not None:
                k = (k,) * (len(tensors_of(result)[0].shape) - 2) if isinstance(k, int) else tuple(k)
                return float(math.prod(k) * out_elems)
        return float(in_elems)  # adaptive pooling reads every input element once
    if kind in ("reshape", "input"):
        return 0.0
    if kind == "norm":
        return 4.0 * out_elems
    if kind == "softmax":
        return 5.0 * out_elems
    if counted > 0:
        return counted
    return float(out_elems)


def memory_traffic(rec) -> float:
    if rec.kind in ("reshape", "input"):
        return 0.0
    return rec.in_bytes + rec.output_bytes + rec.param_bytes


def backward_flops(rec) -> float:
    if rec.kind in ("conv", "deconv", "linear", "recurrent"):
        # input gradient + weight gradient; the first layer needs no input gradient
        return rec.fwd_flops * (1.0 if rec.first_layer else 2.0)
    if rec.kind in ("matmul", "attention"):
        return 2.0 * rec.fwd_flops
    return rec.fwd_flops


def weight_flops(rec, node: torch.fx.Node, param_of) -> float | None:
    """The weight-gradient part of the backward (zb-h1's W): as much as the forward for a layer's weights
    (conv, linear, recurrent; a matmul with a parameter operand), all of an embedding's backward, none for
    a matmul or attention of activations; None (the default rule) for the rest."""
    if rec.kind in ("conv", "deconv", "linear", "recurrent"):
        return rec.fwd_flops if rec.param_bytes > 0 or node.op == "call_module" else 0.0
    if rec.kind == "matmul":
        weighted = any(a.name in param_of for a in node.all_input_nodes)
        return rec.fwd_flops if weighted else 0.0
    if rec.kind == "attention" and node.op != "call_module":
        return 0.0
    if rec.kind == "embedding":
        return backward_flops(rec)
    return None
