"""Import an ``nn.Module``: torch.fx first (:mod:`.fx_import`), torch.export when fx cannot
trace it (:mod:`.export_import`). Both record ops the same way; this module only chooses."""

from __future__ import annotations

import torch
import torch.fx
from torch import nn

from ..model.graph import Graph
from .export_import import trace_exported
from .fx_import import Traced, TraceFailure, _check_shape, node_ops, record, recorded_ops, trace


def trace_model(model: nn.Module, input_shape: tuple[int, ...], *, name: str | None = None,
                gm: torch.fx.GraphModule | None = None) -> Traced:
    """Trace with torch.fx, or with torch.export when fx cannot (data-dependent Python control flow)."""
    input_shape = _check_shape(input_shape)
    model = model.train()
    name = name or type(model).__name__.lower()
    if gm is None:
        try:
            gm = trace(model)
        except TraceFailure as failure:
            return trace_exported(model, input_shape, name=name, fx_reason=failure.reason)
    recorder = record(gm, model, input_shape)
    graph = Graph(name, recorded_ops(recorder), int(input_shape[0]))
    return Traced(gm, graph, node_ops(recorder), "fx")


def trace_for_batch(model: nn.Module, input_shape: tuple[int, ...], batch_size: int, *,
                    name: str | None = None) -> Traced:
    """A trace that runs at ``batch_size``: torch.export specialises to the example's batch, so
    an exported model is traced again at the batch it will run with (op names stay the same)."""
    traced = trace_model(model, input_shape, name=name)
    if traced.method == "export" and traced.batch != int(batch_size):
        traced = trace_model(model, (int(batch_size), *input_shape[1:]), name=name)
    return traced


def import_module(model: nn.Module, input_shape: tuple[int, ...], *, name: str | None = None,
                  batch_size: int | None = None, gm: torch.fx.GraphModule | None = None) -> Graph:
    """The model's training step as a Graph at ``batch_size`` (default: the input's first dim)."""
    graph = trace_model(model, input_shape, name=name, gm=gm).graph
    return graph if batch_size is None else graph.with_batch_size(batch_size)
