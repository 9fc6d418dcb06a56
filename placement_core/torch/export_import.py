"""The torch.export fallback for models torch.fx cannot trace.

torch.fx traces Python symbolically, so ``if x.shape[1] == 3:`` or a loop over
a tensor's size stops it; torch.export traces with real (symbolic-size)
tensors and specialises such branches to the example input. Its graph is made
of ATen operators; to keep leaf-module granularity, the operators that one
call of a leaf module (a Conv2d, a BatchNorm2d) emits are contracted into one
op named by the module's path, like the fx importer names them. The rest stay
one op per operator. Control flow that depends on tensor *values* stops both
tracers; the error then says so and what to do.
"""

from __future__ import annotations

import contextlib
import io
import logging

import torch
from torch import nn

from ..base.errors import InputError
from ..model.graph import Graph
from ..model.coarsen import contract
from .fx_import import Traced, _reason, example_input, node_ops, record, recorded_ops
from .op_kinds import module_kind

FIX = ("Make the branch independent of tensor values (torch.where, or a flag set in __init__), or trace a "
       "wrapper module whose forward takes one tensor; see docs/torch.md")


@contextlib.contextmanager
def _quiet():
    """torch.export logs whole graphs when it fails; the InputError says enough."""
    loggers = [lg for name, lg in logging.Logger.manager.loggerDict.items()
               if name.startswith("torch") and isinstance(lg, logging.Logger) and not lg.disabled]
    for lg in loggers:
        lg.disabled = True
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # it also prints the partial graph to stderr
            yield
    finally:
        for lg in loggers:
            lg.disabled = False


def _export(model: nn.Module, input_shape: tuple[int, ...]):
    with _quiet():
        return torch.export.export(model, (example_input(None, input_shape, model=model),))


def trace_exported(model: nn.Module, input_shape: tuple[int, ...], *, name: str, fx_reason: str) -> Traced:
    """The exported model's graph at ``input_shape[0]``.

    torch.export runs the model in training mode, where BatchNorm refuses a batch
    of 1 once the spatial size is 1x1; a batch of 1 that cannot be exported is
    exported at batch 2 instead and the graph rescaled to 1 (``gm`` is then the
    batch-2 program: :func:`.fx_import.trace_for_batch` exports again at the
    batch a run uses).
    """
    traced_shape = tuple(input_shape)
    try:
        program = _export(model, traced_shape)
    except Exception as e:  # noqa: BLE001 - every export failure becomes one message
        program, error = None, e
        if int(input_shape[0]) == 1:
            traced_shape = (2, *input_shape[1:])
            try:
                program = _export(model, traced_shape)
            except Exception:  # noqa: BLE001 - the batch-1 error is the one to report
                program = None
        if program is None:
            raise InputError(f"{type(model).__name__} cannot be traced: torch.fx: {fx_reason}; torch.export: "
                             f"{_reason(error)}", field="model", fix=FIX) from None
    gm = program.module()
    recorder = record(gm, model, traced_shape, count_buffers=False)
    fine = Graph(name, recorded_ops(recorder), int(traced_shape[0]))
    node_op = node_ops(recorder)
    groups, names, kinds = _leaf_module_groups(gm, model, fine)
    graph = contract(fine, groups, names, kinds).with_batch_size(int(input_shape[0]))
    group_of = {m: n for n, members in zip(names, groups) for m in members}
    return Traced(gm, graph, {node: group_of[op] for node, op in node_op.items()}, "export",
                  batch=int(traced_shape[0]))


def _leaf_module_groups(gm: torch.fx.GraphModule, model: nn.Module, fine: Graph):
    """Ops of one leaf-module call become one group named by the module path (``#k`` for later calls)."""
    nodes = {n.name: n for n in gm.graph.nodes}
    calls: dict[str, list[str]] = {}  # nn_module_stack key of a leaf-module call -> its ops
    call_path: dict[str, str] = {}
    singles: list[str] = []
    for op in fine.ops:
        node = nodes.get(op.name)
        stack = node.meta.get("nn_module_stack") if node is not None else None
        key, path = None, None
        if stack:
            key, (path, _) = next(reversed(stack.items()))
            mod = _submodule(model, path)
            if mod is None or mod is model or any(True for _ in mod.children()):
                key = None
        if key is None:
            singles.append(op.name)
        else:
            calls.setdefault(key, []).append(op.name)
            call_path[key] = path
    taken = set(singles)
    uses: dict[str, int] = {}
    groups, names, kinds = [], [], []
    for key, members in calls.items():
        path = call_path[key]
        uses[path] = uses.get(path, 0) + 1
        label = path if uses[path] == 1 else f"{path}#{uses[path]}"
        while label in taken:
            label += "_"
        taken.add(label)
        groups.append(members)
        names.append(label)
        kinds.append(module_kind(_submodule(model, path)))
    for op in singles:
        groups.append([op])
        names.append(op)
        kinds.append(fine.op(op).kind)
    return groups, names, kinds


def _submodule(model: nn.Module, path: str):
    try:
        return model.get_submodule(path) if path else model
    except AttributeError:
        return None
