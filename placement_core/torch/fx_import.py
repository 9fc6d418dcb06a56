"""Import an ``nn.Module`` as a computation graph: torch.fx trace + an interpreter that
records, node by node, the output tensors, the FLOPs and the parameters.

Granularity is the leaf module (every ``torch.nn`` module) plus the tensor
functions between them. FLOPs follow docs/design.md §4: ``torch.utils.flop_counter``
for matmul/convolution/attention (2 FLOPs per multiply-add), the recurrent
formula for LSTM/GRU/RNN layers (which the counter does not see), the pooling
formula kh*kw*C*Hout*Wout*N, and element counts for memory-bound ops, whose
cost the roofline profile takes from their memory traffic instead.

A parameter is counted once, at the first op that uses it: a module called
twice, or a weight shared by two modules (GPT-2's tied embedding), holds its
bytes once. A model whose input feeds an embedding takes token ids: the
example input is integers below the embedding's size (:func:`example_input`).

:func:`record` also gives which fx node belongs to which op, which is what
applying, benchmarking and calibrating a placement need. Choosing between
torch.fx and the torch.export fallback is :mod:`.model_import`'s job.
"""

from __future__ import annotations

import contextlib
import operator
from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.fx
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ..base.errors import InputError
from ..model.graph import Graph, Op
from .flops import backward_flops, forward_flops, memory_traffic, tensors_of, weight_flops
from .op_kinds import function_kind, module_kind


def _nbytes(value) -> int:
    return sum(t.numel() * t.element_size() for t in tensors_of(value))


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
    weight_flops: float | None = None  # the weight-gradient part of the backward (None: the default rule)
    groups: int = 1  # a convolution's groups


class _Recorder(torch.fx.Interpreter):
    """Runs the traced graph once, recording every tensor-producing node."""

    def __init__(self, gm: torch.fx.GraphModule, count_buffers: bool = True):
        super().__init__(gm)
        # torch.export reads buffers (BatchNorm statistics) through get_attr; they are not parameters.
        self.count_buffers = count_buffers
        self.records: dict[str, _Record] = {}
        self.alias: dict[str, tuple[str, float]] = {}  # node -> (producing op, bytes): getitem on tuples
        self.param_of: dict[str, torch.Tensor] = {}  # get_attr node -> the tensor it reads
        self._counted: set[int] = set()  # parameters (by identity) already counted at an earlier op
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
            if isinstance(result, torch.Tensor) and (self.count_buffers or isinstance(result, nn.Parameter)):
                self.param_of[node.name] = result
            return result
        producers: list[tuple[str, float]] = []
        extra_params = 0.0
        for arg in node.all_input_nodes:
            if arg.name in self.param_of:
                extra_params += self._first_use([self.param_of[arg.name]])
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
        if not tensors_of(result):
            return result  # sizes, shapes and other Python values are not ops
        name = self._op_name(node)
        if node.op == "placeholder":
            kind, module = "input", None
            self.placeholders.add(name)
        elif node.op == "call_module":
            mod = self.fetch_attr(node.target)
            kind, module = module_kind(mod), node.target
            extra_params += self._first_use(list(mod.parameters(recurse=True)))
        else:
            kind = function_kind(node)
            stack = node.meta.get("nn_module_stack") or {}
            module = next(reversed(stack.values()))[0] if stack else None
            if isinstance(module, tuple):
                module = module[0]
        out_bytes = float(_nbytes(result))
        first = tensors_of(result)[0]
        ins = [t for a in node.args for t in tensors_of(self._arg_value(a))]
        in_elems = sum(t.numel() for t in ins)
        out_elems = sum(t.numel() for t in tensors_of(result))
        counted = float(flops.get_total_flops())
        fwd = forward_flops(kind, node, self.fetch_attr, counted, ins, result, in_elems, out_elems)
        # dedupe producers (x + x reads x once)
        seen: dict[str, float] = {}
        for p, b in producers:
            seen[p] = max(seen.get(p, 0.0), b)
        rec = _Record(name=name, kind=kind, module=module, inputs=list(seen.items()), output_bytes=out_bytes,
                      shape=tuple(int(s) for s in first.shape), fwd_flops=fwd, param_bytes=extra_params,
                      in_bytes=float(sum(b for _, b in seen.items())))
        rec.first_layer = bool(seen) and all(p in self.placeholders for p in seen)
        rec.weight_flops = weight_flops(rec, node, self.param_of)
        rec.groups = conv_groups(node, self.fetch_attr) if kind in ("conv", "deconv") else 1
        self.records[name] = rec
        self._names[node.name] = name
        return result

    def _first_use(self, tensors) -> float:
        """Bytes of the tensors not counted at an earlier op (a shared module's, a tied weight's)."""
        total = 0.0
        for t in tensors:
            if id(t) not in self._counted:
                self._counted.add(id(t))
                total += float(t.numel() * t.element_size())
        return total

    def _arg_value(self, arg):
        if isinstance(arg, torch.fx.Node):
            return self.env.get(arg)
        if isinstance(arg, (list, tuple)):
            return [self._arg_value(a) for a in arg]
        return None


def conv_groups(node, fetch_attr) -> int:
    """A convolution node's groups: its module's, or the functional call's (F.conv* and aten.conv*: 7th
    argument, aten.convolution: 9th), 1 when it does not say."""
    if node.op == "call_module":
        return int(getattr(fetch_attr(node.target), "groups", 1) or 1)
    if "groups" in node.kwargs:
        value = node.kwargs["groups"]
    else:
        position = 8 if "convolution" in str(node.target) else 6
        value = node.args[position] if len(node.args) > position else 1
    return int(value) if isinstance(value, int) and value >= 1 else 1


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


def token_vocabulary(gm: torch.fx.GraphModule) -> int | None:
    """The embedding size when the model's input is token ids (it feeds an ``nn.Embedding`` or an
    embedding function, possibly through views), else None."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    todo, seen = placeholders[:1], set()
    while todo:
        node = todo.pop()
        for user in node.users:
            if user in seen:
                continue
            seen.add(user)
            if user.op == "call_module" and isinstance(gm.get_submodule(user.target), nn.Embedding):
                return int(gm.get_submodule(user.target).num_embeddings)
            if user.op == "call_function" and function_kind(user) == "embedding":
                weight = next((a for a in user.args[:2] if isinstance(a, torch.fx.Node) and a.op == "get_attr"), None)
                if weight is not None:
                    return int(gm.get_parameter(weight.target).shape[0])
            elif function_kind(user) == "reshape" or _moves_only(user):
                todo.append(user)
    return None


def _moves_only(node: torch.fx.Node) -> bool:
    """A copy to another device or dtype (``.to``, or the placed model's moves between devices)."""
    if node.op == "call_method":
        return node.target in ("to", "long", "int", "cuda", "cpu")
    return node.op == "call_function" and getattr(node.target, "__name__", "") == "_move"


def example_input(gm: torch.fx.GraphModule | None, shape, generator: torch.Generator | None = None, *,
                  model: nn.Module | None = None) -> torch.Tensor:
    """The example batch of ``shape``: token ids below the vocabulary for a model that embeds its input,
    standard normal values otherwise. Without a traced ``gm``, a ``model`` whose first module with
    parameters is an embedding takes token ids."""
    vocab = token_vocabulary(gm) if gm is not None else None
    if vocab is None and model is not None:
        first = next((m for m in model.modules() if next(m.parameters(recurse=False), None) is not None), None)
        vocab = first.num_embeddings if isinstance(first, nn.Embedding) else None
    if vocab is not None:
        return torch.randint(vocab, tuple(shape), generator=generator)
    return torch.randn(tuple(shape), generator=generator)


def record(gm: torch.fx.GraphModule, model: nn.Module, input_shape: tuple[int, ...],
           count_buffers: bool = True) -> _Recorder:
    """Run ``gm`` once on an example input, recording every node (no gradients; BatchNorm in eval mode)."""
    recorder = _Recorder(gm, count_buffers=count_buffers)
    example = example_input(gm, input_shape)
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
        bwd = backward_flops(r)
        weight = None if r.weight_flops is None else min(r.weight_flops, bwd)
        if weight is not None and weight == (0.5 * bwd if r.param_bytes > 0 else 0.0):
            weight = None  # what a file without the field means anyway (Op.weight_grad_share)
        ops.append(Op(name=r.name, kind=r.kind, inputs=tuple(p for p, _ in r.inputs),
                      input_bytes={p: b for p, b in r.inputs
                                   if b != recorder.records[p].output_bytes},
                      fwd_flops=r.fwd_flops, bwd_flops=bwd, output_bytes=r.output_bytes,
                      param_bytes=r.param_bytes, mem_bytes=memory_traffic(r), shape=r.shape, module=r.module,
                      bwd_weight_flops=weight, groups=r.groups))
    return ops


def node_ops(recorder: _Recorder) -> dict[str, str]:
    mapping = dict(recorder._names)
    mapping.update({node: op for node, (op, _) in recorder.alias.items()})
    return mapping
