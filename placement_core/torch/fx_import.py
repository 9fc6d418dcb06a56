"""Import an ``nn.Module`` as a computation graph: torch.fx trace + an interpreter that
records, node by node, the output tensors, the FLOPs and the parameters.

Granularity is the leaf module (every ``torch.nn`` module) plus the tensor
functions between them. FLOPs follow docs/design.md §4: ``torch.utils.flop_counter``
for matmul/convolution/attention (2 FLOPs per multiply-add), the pooling
formula kh*kw*C*Hout*Wout*N, and element counts for memory-bound ops, whose
cost the roofline profile takes from their memory traffic instead.

:func:`record` also gives which fx node belongs to which op, which is what
applying, benchmarking and calibrating a placement need. Choosing between
torch.fx and the torch.export fallback is :mod:`.model_import`'s job.
"""

from __future__ import annotations

import contextlib
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


# Kinds of ATen operators, which is what a torch.export graph is made of.
_ATEN_KINDS = {
    "conv": ("conv1d", "conv2d", "conv3d", "convolution", "_convolution", "mkldnn_convolution"),
    "deconv": ("conv_transpose1d", "conv_transpose2d", "conv_transpose3d"),
    "linear": ("linear", "addmm"),
    "matmul": ("mm", "bmm", "matmul", "baddbmm"),
    "pool": ("max_pool1d", "max_pool2d", "max_pool3d", "max_pool2d_with_indices", "avg_pool1d", "avg_pool2d",
             "avg_pool3d", "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
             "adaptive_max_pool2d", "_adaptive_avg_pool2d"),
    "norm": ("batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
             "_native_batch_norm_legit_no_training", "native_batch_norm", "layer_norm", "native_layer_norm",
             "group_norm", "native_group_norm", "instance_norm"),
    "activation": ("relu", "relu_", "gelu", "silu", "silu_", "sigmoid", "tanh", "hardtanh", "hardtanh_",
                   "hardswish", "hardswish_", "hardsigmoid", "leaky_relu", "elu", "mish"),
    "elementwise": ("add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_"),
    "reshape": ("view", "_unsafe_view", "reshape", "flatten", "permute", "transpose", "t", "expand", "squeeze",
                "unsqueeze", "contiguous", "alias", "clone", "slice", "select", "detach"),
    "concat": ("cat", "stack"),
    "softmax": ("softmax", "_softmax", "log_softmax", "_log_softmax"),
    "dropout": ("dropout", "native_dropout"),
    "attention": ("scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
                  "_scaled_dot_product_efficient_attention"),
    "embedding": ("embedding",),
    "upsample": ("upsample_nearest2d", "upsample_bilinear2d"),
}
_ATEN_KIND = {name: kind for kind, names in _ATEN_KINDS.items() for name in names}


def function_kind(node: torch.fx.Node) -> str:
    t = node.target
    if isinstance(t, torch._ops.OpOverload):
        return _ATEN_KIND.get(t.overloadpacket.__name__, "other")
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

    def __init__(self, gm: torch.fx.GraphModule, count_buffers: bool = True):
        super().__init__(gm)
        # torch.export reads buffers (BatchNorm statistics) through get_attr; they are not parameters.
        self.count_buffers = count_buffers
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
            counted = self.count_buffers or isinstance(result, nn.Parameter)
            self.param_of[node.name] = float(_nbytes(result)) if counted else 0.0
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


def _reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__


class TraceFailure(InputError):
    """torch.fx could not trace the model; ``reason`` says why (the export fallback quotes it)."""

    def __init__(self, model: nn.Module, e: BaseException):
        self.reason = _reason(e)
        super().__init__(f"torch.fx cannot trace {type(model).__name__}: {self.reason}", field="model",
                         fix="Models with data-dependent control flow need torch.export or a wrapper that "
                             "fixes the branch; see docs/torch.md")


def trace(model: nn.Module) -> torch.fx.GraphModule:
    try:
        return torch.fx.symbolic_trace(model)
    except Exception as e:  # noqa: BLE001 - any tracing failure becomes one clear message
        raise TraceFailure(model, e) from None


@dataclass
class Traced:
    """A traced model: the fx graph that runs it, the op graph, and which node belongs to which op.

    ``node_op`` maps every fx node whose value holds tensors (ops, and ``getitem``
    on a multi-output op) to its op; parameters read through ``get_attr`` and
    Python values (sizes) are not ops. ``graph`` is at the example input's batch
    size. An fx graph runs at any batch; an exported one only at ``batch`` (the
    batch it was exported at, which is 2 for a batch of 1 that BatchNorm refused).
    """

    gm: torch.fx.GraphModule
    graph: Graph
    node_op: dict[str, str]
    method: str  # "fx" or "export"
    batch: int | None = None  # the only batch an exported gm runs at; None: any


def _check_shape(input_shape) -> tuple[int, ...]:
    if not input_shape or any(int(s) <= 0 for s in input_shape):
        raise InputError(f"input shape must be positive sizes, got {input_shape!r}", field="input_shape",
                         fix="Write e.g. 1,3,224,224")
    return tuple(int(s) for s in input_shape)


@contextlib.contextmanager
def batchnorm_eval(module: nn.Module):
    """BatchNorm modules with running statistics in eval mode for the duration, then back.

    The recording pass only needs shapes, bytes and FLOPs, which are the same in
    both modes; in eval mode a batch of 1 is fine where training mode refuses
    one value per channel (ResNet at 32x32 shrinks to 1x1), and the pass leaves
    the running statistics alone. The graph itself stays the one traced in
    training mode: fx calls the modules, whose mode is restored afterwards.
    """
    switched = [m for m in module.modules()
                if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training and m.running_mean is not None]
    for m in switched:
        m.train(False)
    try:
        yield
    finally:
        for m in switched:
            m.train(True)


def record(gm: torch.fx.GraphModule, model: nn.Module, input_shape: tuple[int, ...],
           count_buffers: bool = True) -> _Recorder:
    """Run ``gm`` once on a random input, recording every node (no gradients; BatchNorm in eval mode)."""
    recorder = _Recorder(gm, count_buffers=count_buffers)
    example = torch.randn(*input_shape)
    try:
        with torch.no_grad(), batchnorm_eval(gm):
            recorder.run(example)
    except Exception as e:  # noqa: BLE001
        raise InputError(f"running {type(model).__name__} on an input of shape {tuple(input_shape)} failed: "
                         f"{_reason(e)}", field="input_shape",
                         fix="Check the input shape the model expects (a batch norm without running statistics "
                             "needs a batch of at least 2 when the spatial size shrinks to 1x1)") from None
    return recorder


def recorded_ops(recorder: _Recorder) -> list[Op]:
    ops = []
    for r in recorder.records.values():
        ops.append(Op(name=r.name, kind=r.kind, inputs=tuple(p for p, _ in r.inputs),
                      input_bytes={p: b for p, b in r.inputs
                                   if b != recorder.records[p].output_bytes},
                      fwd_flops=r.fwd_flops, bwd_flops=_backward_flops(r), output_bytes=r.output_bytes,
                      param_bytes=r.param_bytes, mem_bytes=_memory_traffic(r), shape=r.shape, module=r.module))
    return ops


def node_ops(recorder: _Recorder) -> dict[str, str]:
    mapping = dict(recorder._names)
    mapping.update({node: op for node, (op, _) in recorder.alias.items()})
    return mapping
