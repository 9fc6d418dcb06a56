"""What the PyTorch commands share: model options, sizes, the input shape and the placement to run."""

from __future__ import annotations

import argparse
import re
import sys

from ..base.errors import InputError
from .common import positive_int

MODEL_HELP = ("torchvision:NAME (built with weights=None, e.g. torchvision:resnet18), placement:gpt2 (GPT-2, defined "
              "here; e.g. placement:gpt2(layers=4, d_model=256)) or FILE.py:NAME (a class, "
              "factory or module in that file); keyword arguments as NAME(key=value)")
DEVICES_HELP = "cpu:N (N CPU ranks, each on its own cores), cuda:0,cuda:1, or a mix such as cpu,cuda:0"


def _model_options(p) -> None:
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument("--input-shape", help="example input, e.g. 1,3,224,224 (default: the --network's input)")
    p.add_argument("--batch-size", type=positive_int, help="batch of the steps (default: the input's first size)")


def byte_size(text: str) -> float:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?i?b?)?\s*", text.lower())
    if not m:
        raise argparse.ArgumentTypeError(f"expected a size such as 512MB or 2GB, got {text!r}")
    unit = (m.group(2) or "").rstrip("b")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}
    if unit not in scale:
        raise argparse.ArgumentTypeError(f"unknown unit in {text!r}; use B, kB, MB, GB")
    value = float(m.group(1)) * scale[unit]
    if value <= 0:
        raise argparse.ArgumentTypeError(f"the size must be positive, got {text!r}")
    return value


def _needs_torch() -> None:
    from ..torch import require_torch
    require_torch()


def _shape_and_network(args):
    """(input shape, batch, network or None, group mapping or None) from --input-shape / --network."""
    from ..formats.catalog import load_network
    from ..model.coarsen import groups_path, read_groups
    from ..torch.sources import parse_input_shape
    from ..cost.timings import input_shape_of

    network = groups = None
    if getattr(args, "network", None):
        network = load_network(args.network)
        gp = groups_path(args.network)
        if gp.is_file():
            groups = read_groups(gp)
    if args.input_shape:
        shape = parse_input_shape(args.input_shape)
    elif network is not None and input_shape_of(network):
        shape = input_shape_of(network)
    else:
        raise InputError("the example input's shape is needed", field="--input-shape",
                         fix="Give --input-shape, e.g. 1,3,224,224 (or --network, an import-model output)")
    batch = args.batch_size or (network.batch_size if network is not None else shape[0])
    return shape, batch, network, groups


def _assignment(args, shape, network, groups, devs) -> tuple[dict[str, str], object]:
    """The placement as op -> device name over the model's own ops, and the traced model."""
    from ..analysis.pipeline import placement_option
    from ..model.coarsen import expand_assignment
    from ..torch.devspec import nominal_device_graph
    from ..torch.model_import import trace_model
    from ..torch.sources import load_model, parse_source

    src = parse_source(args.model)
    traced = trace_model(load_model(src, seed=getattr(args, "seed", 0)), shape, name=src.default_name)
    graph = network if network is not None else traced.graph
    devgraph = nominal_device_graph(devs)
    ignored: list[str] = []
    splits: list = []
    placement = placement_option(args.placement, graph, devgraph, ignored=ignored, splits=splits)
    if ignored:
        from ..model.placement import describe_ignored
        print(f"note: {describe_ignored(ignored)}", file=sys.stderr)
    from ..model.placement import placement_to_dict
    assignment = placement_to_dict(placement, graph, devgraph, splits)["assignment"]  # a split op: its entry
    if groups is not None:
        if splits:
            raise InputError("a placement of a coarsened network's groups cannot split them", field="--placement",
                             fix="Benchmark the model's own network (without --groups) to split its layers")
        assignment = expand_assignment(assignment, groups)
    return assignment, traced
