"""Import an ``nn.Module`` as a computation graph: torch.fx trace + an interpreter that
records, node by node, the output tensors, the FLOPs and the parameters.

Granularity is the leaf module (every ``torch.nn`` module) plus the tensor
functions between them. FLOPs follow DESIGN §3: ``torch.utils.flop_counter``
for matmul/convolution/attention (2 FLOPs per multiply-add), the pooling
formula kh*kw*C*Hout*Wout*N, and element counts for memory-bound ops, whose
cost the roofline profile takes from their memory traffic instead.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.fx
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ..errors import InputError
from ..graph import Graph, Op

_VIEW_FUNCS = {torch.flatten, torch.reshape, torch.squeeze, torch.unsqueeze, torch.transpose, torch.permute}
_VIEW_METHODS = {"view", "reshape", "flatten", "squeeze", "unsqueeze", "transpose", "permute", "expand",
                 "contiguous", "view_as", "t"}
_ELEMENTWISE_FUNCS = {operator.add, operator.mul, operator.sub, operator.truediv, operator.iadd, operator.imul,
                      torch.add, torch.mul, torch.sub, torch.div}
_ACTIVATION_FUNCS = {torch.relu, torch.sigmoid, torch.tanh, nn.functional.relu, nn.functional.gelu,
                     nn.functional.silu, nn.functional.sigmoid, nn.functional.hardswish, nn.functional.hardsigmoid}
_POOL_FUNCS = {nn.functional.adaptive_avg_pool2d, nn.functional.adaptive_max_pool2d, nn.functional.avg_pool2d,
               nn.functional.max_pool2d, torch.nn.functional.adaptive_avg_pool1d}
_CONCAT_FUNCS = {torch.cat, torch.concat, torch.stack}


def module_kind(mod: nn.Module) -> str:
    if isinstance(mod, (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)):
        return "deconv"
    if isinstance(mod, (nn.Conv1d, nn.Conv2d, nn.Conv3d)):
        return "conv"
    if isinstance(mod, nn.Linear):
        return "linear"
    if isinstance(mod, (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d,
                        nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d, nn.AdaptiveMaxPool2d)):
        return "pool"
    if isinstance(mod, (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm)):
        return "norm"
    if isinstance(mod, (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)):
        return "dropout"
    if isinstance(mod, (nn.Softmax, nn.LogSoftmax)):
        return "softmax"
    if isinstance(mod, (nn.Flatten, nn.Unflatten, nn.Identity)):
        return "reshape"
    if isinstance(mod, nn.Embedding):
        return "embedding"
    if isinstance(mod, nn.MultiheadAttention):
        return "attention"
    if isinstance(mod, (nn.Upsample, nn.UpsamplingNearest2d, nn.UpsamplingBilinear2d)):
        return "upsample"
    if type(mod).__module__.startswith("torch.nn.modules.activation"):
        return "activation"
    return "other"


def function_kind(node: torch.fx.Node) -> str:
    t = node.target
    if node.op == "call_method":
        if t in _VIEW_METHODS:
            return "reshape"
        if t in ("add", "mul", "sub", "div", "add_", "mul_"):
            return "elementwise"
        if t in ("relu", "sigmoid", "tanh", "relu_"):
            return "activation"
        if t in ("softmax", "log_softmax"):
            return "softmax"
        if t in ("matmul", "bmm", "mm"):
            return "matmul"
        return "other"
    if t in _VIEW_FUNCS:
        return "reshape"
    if t in _ELEMENTWISE_FUNCS:
        return "elementwise"
    if t in _ACTIVATION_FUNCS:
        return "activation"
    if t in _POOL_FUNCS:
        return "pool"
    if t in _CONCAT_FUNCS:
        return "concat"
    if t in (torch.matmul, torch.bmm, torch.mm, operator.matmul):
        return "matmul"
    if t in (nn.functional.linear, torch.addmm):
        return "linear"
    if t in (nn.functional.softmax, torch.softmax, nn.functional.log_softmax):
        return "softmax"
    if t is getattr(nn.functional, "scaled_dot_product_attention", None):
        return "attention"
    if t in (nn.functional.dropout,):
        return "dropout"
    return "other"


def _tensors(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def _nbytes(value) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(value))


@dataclass
class _Record:
    name: str
    kind: str
    module: str | None
    inputs: list[tuple[str, float]] = field(default_factory=list)  # (producer op, bytes on the edge)
    output_bytes: float = 0.0
    shape: tuple[int, ...] = ()
    fwd_flops: float = 0.0
    param_bytes: float = 0.0
    in_bytes: float = 0.0
    first_layer: bool = False


class _Recorder(torch.fx.Interpreter):
    """Runs the traced graph once, recording every tensor-producing node."""

    def __init__(self, gm: torch.fx.GraphModule):
        super().__init__(gm)
        self.records: dict[str, _Record] = {}
        self.alias: dict[str, tuple[str, float]] = {}  # node -> (producing op, bytes): getitem on tuples
        self.param_of: dict[str, float] = {}
        self.placeholders: set[str] = set()
        self._module_uses: Counter = Counter()
        self._names: dict[str, str] = {}

    def _op_name(self, node: torch.fx.Node) -> str:
        if node.op == "call_module":
            self._module_uses[node.target] += 1
            k = self._module_uses[node.target]
            return node.target if k == 1 else f"{node.target}#{k}"
        return node.name

    def run_node(self, node: torch.fx.Node):
        if node.op == "output":
            return super().run_node(node)
        flops = FlopCounterMode(display=False)
        with flops:
            result = super().run_node(node)
        if node.op == "get_attr":
            self.param_of[node.name] = float(_nbytes(result))
            return result
        producers: list[tuple[str, float]] = []
        extra_params = 0.0
        for arg in node.all_input_nodes:
            if arg.name in self.param_of:
                extra_params += self.param_of[arg.name]
            elif arg.name in self.alias:
                producers.append(self.alias[arg.name])
            elif arg.name in self._names:
                rec = self.records[self._names[arg.name]]
                producers.append((rec.name, rec.output_bytes))
        if node.op == "call_function" and node.target is operator.getitem and not isinstance(result, torch.Tensor):
            return result
        if node.op == "call_function" and node.target is operator.getitem and producers:
            # One output of a multi-output op: consumers read it straight from the producer.
            self.alias[node.name] = (producers[0][0], float(_nbytes(result)))
            return result
        if not _tensors(result):
            return result  # sizes, shapes and other Python values are not ops
        name = self._op_name(node)
        if node.op == "placeholder":
            kind, module = "input", None
            self.placeholders.add(name)
        elif node.op == "call_module":
            mod = self.fetch_attr(node.target)
            kind, module = module_kind(mod), node.target
            extra_params += float(sum(p.numel() * p.element_size() for p in mod.parameters(recurse=True)))
        else:
            kind = function_kind(node)
            stack = node.meta.get("nn_module_stack") or {}
            module = next(reversed(stack.values()))[0] if stack else None
            if isinstance(module, tuple):
                module = module[0]
        out_bytes = float(_nbytes(result))
        first = _tensors(result)[0]
        ins = [t for a in node.args for t in _tensors(self._arg_value(a))]
        in_elems = sum(t.numel() for t in ins)
        out_elems = sum(t.numel() for t in _tensors(result))
        counted = float(flops.get_total_flops())
        fwd = _forward_flops(kind, node, self, counted, ins, result, in_elems, out_elems)
        # dedupe producers (x + x reads x once)
        seen: dict[str, float] = {}
        for p, b in producers:
            seen[p] = max(seen.get(p, 0.0), b)
        rec = _Record(name=name, kind=kind, module=module, inputs=list(seen.items()), output_bytes=out_bytes,
                      shape=tuple(int(s) for s in first.shape), fwd_flops=fwd, param_bytes=extra_params,
                      in_bytes=float(sum(b for _, b in seen.items())))
        rec.first_layer = bool(seen) and all(p in self.placeholders for p in seen)
        self.records[name] = rec
        self._names[node.name] = name
        return result

    def _arg_value(self, arg):
        if isinstance(arg, torch.fx.Node):
            return self.env.get(arg)
        if isinstance(arg, (list, tuple)):
            return [self._arg_value(a) for a in arg]
        return None


def _forward_flops(kind: str, node: torch.fx.Node, rec: _Recorder, counted: float, ins, result,
                   in_elems: int, out_elems: int) -> float:
    if kind in ("conv", "deconv", "linear", "matmul", "attention") and counted > 0:
        return counted
    if kind == "pool":
        if node.op == "call_module":
            mod = rec.fetch_attr(node.target)
            k = getattr(mod, "kernel_size", None)
            if k is not None:
                k = (k,) * (len(_tensors(result)[0].shape) - 2) if isinstance(k, int) else tuple(k)
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


def _memory_traffic(rec: _Record) -> float:
    if rec.kind in ("reshape", "input"):
        return 0.0
    return rec.in_bytes + rec.output_bytes + rec.param_bytes


def _backward_flops(rec: _Record) -> float:
    if rec.kind in ("conv", "deconv", "linear"):
        # input gradient + weight gradient; the first layer needs no input gradient
        return rec.fwd_flops * (1.0 if rec.first_layer else 2.0)
    if rec.kind in ("matmul", "attention"):
        return 2.0 * rec.fwd_flops
    return rec.fwd_flops


def trace(model: nn.Module) -> torch.fx.GraphModule:
    try:
        return torch.fx.symbolic_trace(model)
    except Exception as e:  # noqa: BLE001 - any tracing failure becomes one clear message
        raise InputError(f"torch.fx cannot trace {type(model).__name__}: {type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''}".rstrip(": "), field="model",
                         fix="Models with data-dependent control flow need torch.export or a wrapper that "
                             "fixes the branch; see docs/torch.md") from None


def import_module(model: nn.Module, input_shape: tuple[int, ...], *, name: str | None = None,
                  batch_size: int | None = None, gm: torch.fx.GraphModule | None = None) -> Graph:
    """The model's training step as a Graph at ``batch_size`` (default: the input's first dim)."""
    if not input_shape or any(int(s) <= 0 for s in input_shape):
        raise InputError(f"input shape must be positive sizes, got {input_shape!r}", field="input_shape",
                         fix="Write e.g. 1,3,224,224")
    model = model.train()
    gm = gm if gm is not None else trace(model)
    recorder = _Recorder(gm)
    example = torch.randn(*input_shape)
    try:
        with torch.no_grad():
            recorder.run(example)
    except Exception as e:  # noqa: BLE001
        raise InputError(f"running {type(model).__name__} on an input of shape {tuple(input_shape)} failed: "
                         f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", field="input_shape",
                         fix="Check the input shape the model expects") from None
    ops = []
    for r in recorder.records.values():
        ops.append(Op(name=r.name, kind=r.kind, inputs=tuple(p for p, _ in r.inputs),
                      input_bytes={p: b for p, b in r.inputs
                                   if b != recorder.records[p].output_bytes},
                      fwd_flops=r.fwd_flops, bwd_flops=_backward_flops(r), output_bytes=r.output_bytes,
                      param_bytes=r.param_bytes, mem_bytes=_memory_traffic(r), shape=r.shape, module=r.module))
    graph = Graph(name or type(model).__name__.lower(), ops, int(input_shape[0]))
    return graph if batch_size is None else graph.with_batch_size(batch_size)
