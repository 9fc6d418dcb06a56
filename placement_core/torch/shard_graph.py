"""Split ops of a traced model across ranks, with the simulator's semantics (docs/sharding.md).

:func:`shard_graph` rewrites the fx graph so that every node runs on one rank again, and the rank
executor (:class:`.executor.RankStep`) needs to know only one thing more, which weights to all-reduce:

* ``channel`` (a ``Conv2d`` or ``Linear`` call): shard j is a copy of the layer holding output channels
  ``lo:hi`` of its weights, on its own rank; it reads the whole input (sent once to each shard's rank),
  and each consumer concatenates the slices on its own rank. Each shard's input gradient is a full-size
  partial sum that autograd sends back and the producer's rank adds up.
* ``batch`` (any node whose weights, if any, belong to the module it calls): shard j runs the same layer
  on samples ``lo:hi``, which its producer slices off (``narrow`` on the producer's rank, so only the
  slice travels); a consumer split the same way reads its own shard, any other concatenates the pieces
  it needs. The layer's weights are replicated on the shards' ranks and their gradients all-reduced
  (summed: the loss is over the whole batch) before the optimizer steps.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Mapping

import torch
from torch import nn

from ..base.errors import InputError


def take_samples(x, start: int, length: int):
    """Samples ``start:start + length`` as a tensor of their own (an in-place consumer must not write into
    the producer's output through a view)."""
    return x.narrow(0, start, length).clone()


@dataclass(frozen=True)
class Part:
    node: object  # the fx node holding this piece
    rank: int
    lo: int  # the piece's range along the split axis
    hi: int
    batch: bool  # split along the batch (axis 0), else along the channels
    axis: int = 0  # the axis a consumer concatenates the pieces along


def _sizes(entry: Mapping, total: int, op: str, what: str) -> list[int]:
    k = len(entry["devices"])
    sizes = entry.get("sizes")
    if sizes is None:
        if k > total:
            raise InputError(f"op {op!r} has {total} {what}, fewer than its {k} shards", field=f"placement.{op}")
        return [total // k + (1 if i < total % k else 0) for i in range(k)]
    if len(sizes) != k or sum(sizes) != total or min(sizes) < 1:
        raise InputError(f"op {op!r}: sizes {list(sizes)} do not divide its {total} {what} over {k} shards",
                         field=f"placement.{op}", fix="Leave sizes out for an even split at the benchmark's batch")
    return list(sizes)


def _channel_copy(mod: nn.Module, lo: int, hi: int) -> nn.Module:
    part = copy.deepcopy(mod)
    with torch.no_grad():
        part.weight = nn.Parameter(mod.weight.detach()[lo:hi].clone())
        if mod.bias is not None:
            part.bias = nn.Parameter(mod.bias.detach()[lo:hi].clone())
    if isinstance(mod, nn.Linear):
        part.out_features = hi - lo
    else:
        part.out_channels = hi - lo
    return part


def shard_graph(gm, node_op: Mapping[str, str], placement: Mapping[str, object], node_rank: dict[str, int],
                meta: Mapping[str, tuple], batch: int):
    """(the rewritten graph module, node -> rank, [(module targets, ranks)] to all-reduce, the inputs every
    rank holds itself: a batch-split input, whose shards each take their samples where they run).

    ``placement`` maps op -> rank or ``{"devices": [ranks], "split": "channel"|"batch", "sizes": ...}``;
    ``node_rank`` is every node's rank with a split op's nodes on its first device (:func:`.apply.node_devices`);
    ``meta`` the dry run's shapes of the original graph. ``gm`` is changed in place (pass a copy).
    """
    graph = gm.graph
    ranks = dict(node_rank)
    parts: dict[str, list[Part]] = {}
    shard_of: dict[str, Part] = {}  # a batch shard's node -> its part (what it needs of its inputs)
    replicas = []
    for op, entry in placement.items():
        if not isinstance(entry, Mapping):
            continue
        nodes = [n for n in graph.nodes if node_op.get(n.name) == op and n.op != "get_attr"]
        if len(nodes) != 1:
            raise InputError(f"op {op!r} is {len(nodes)} nodes of the traced model; only an op that is one layer "
                             "can be split", field=f"placement.{op}", fix="Give it one device")
        node = nodes[0]
        split = entry["split"]
        devs = list(entry["devices"])
        if node.op == "placeholder" and split != "batch":
            raise InputError(f"op {op!r} is the model's input, which can only be split by batch",
                             field=f"placement.{op}", fix="Split it by batch, or give it one device")
        if split == "channel":
            mod = gm.get_submodule(node.target) if node.op == "call_module" else None
            if not (isinstance(mod, nn.Linear) or (isinstance(mod, nn.Conv2d) and mod.groups == 1)):
                raise InputError(f"op {op!r}: only a Conv2d (groups=1) or Linear layer can be split by channel",
                                 field=f"placement.{op}", fix="Split it by batch, or give it one device")
            out = mod.out_features if isinstance(mod, nn.Linear) else mod.out_channels
            sizes = _sizes(entry, out, op, "output channels")
        else:
            if any(a.op == "get_attr" for a in node.all_input_nodes):
                raise InputError(f"op {op!r} reads weights outside a module call, which a batch split cannot "
                                 "replicate", field=f"placement.{op}", fix="Give it one device")
            sizes = _sizes(entry, batch, op, "samples in the benchmark's batch")
            if node.op == "call_module" and any(True for _ in gm.get_submodule(node.target).parameters()):
                replicas.append(([node.target], sorted(set(devs))))
        lo, made = 0, []
        for j, (rank, size) in enumerate(zip(devs, sizes)):
            with graph.inserting_after(node) if node.op == "placeholder" else graph.inserting_before(node):
                if node.op == "placeholder":  # every rank has the batch: each takes its own samples
                    new = graph.call_function(take_samples, (node, lo, size))
                elif split == "channel":
                    target = f"{node.target}_shard{j}"
                    gm.add_submodule(target, _channel_copy(mod, lo, lo + size))
                    new = graph.call_module(target, node.args, node.kwargs)
                else:
                    new = graph.node_copy(node)
            ranks[new.name] = rank
            made.append(Part(new, rank, lo, lo + size, split == "batch",
                             0 if split == "batch" else (-1 if isinstance(mod, nn.Linear) else 1)))
            if split == "batch":
                shard_of[new.name] = made[-1]
            lo += size
        parts[node.name] = made
    if not parts:
        return gm, ranks, replicas, set()
    local = {name for name, ps in parts.items() if ps[0].node.args and getattr(ps[0].node.args[0], "name", None)
             == name}
    made_nodes: dict[tuple, object] = {}

    def narrow(src, rank: int, start: int, length: int, dim_size: int):
        if start == 0 and length == dim_size:
            return src
        key = ("narrow", src.name, start, length)
        if key not in made_nodes:
            with graph.inserting_after(src):
                made_nodes[key] = graph.call_function(take_samples, (src, start, length))
            ranks[made_nodes[key].name] = rank
        return made_nodes[key]

    def piece_for(arg, consumer_rank: int, need: tuple[int, int] | None):
        """What a consumer on ``consumer_rank`` that needs samples ``need`` (None: all) reads of ``arg``."""
        full = (0, batch) if need is None else need
        if arg.name in parts:
            got = []
            for p in parts[arg.name]:
                blo, bhi = (p.lo, p.hi) if p.batch else (0, batch)
                lo, hi = max(blo, full[0]), min(bhi, full[1])
                if hi > lo:
                    got.append(narrow(p.node, p.rank, lo - blo, hi - lo, bhi - blo))
            if len(got) == 1:
                return got[0]
            dim = parts[arg.name][0].axis
            key = ("cat", arg.name, full, consumer_rank)
            if key not in made_nodes:
                with graph.inserting_after(max(got, key=lambda g: _position(graph, g))):
                    made_nodes[key] = graph.call_function(torch.cat, (list(got),), {"dim": dim})
                ranks[made_nodes[key].name] = consumer_rank
            return made_nodes[key]
        if need is not None and _has_batch(meta.get(arg.name), batch):
            return narrow(arg, ranks[arg.name], need[0], need[1] - need[0], batch)
        return arg

    for node in list(graph.nodes):
        if node.name in parts or node.op in ("placeholder", "get_attr") or node.target is take_samples and \
                node.args[0].name in local:
            continue
        part = shard_of.get(node.name)
        need = (part.lo, part.hi) if part is not None else None
        if node.op == "output":
            first = node.all_input_nodes[0] if node.all_input_nodes else None
            if first is not None and node.args[0] is first and first.name in parts and parts[first.name][0].batch:
                # a batch-split last op: each rank takes the loss of its own samples, as data parallelism does
                # (DDP), so no output travels; the simulator likewise has no loss op to gather them for
                shards = parts[first.name]
                node.args = (tuple(p.node for p in shards),)
                gm.meta["loss_shards"] = {p.node.name: (p.lo, p.hi) for p in shards}
                gm.meta["loss_batch"] = batch
                continue
            # otherwise the loss is computed where the output's first value was to be
            rank = ranks.get(first.name, 0) if first is not None else 0
        else:
            rank = ranks.get(node.name, 0)
        for arg in list(node.all_input_nodes):
            if arg.name in parts or (need is not None and arg.op != "get_attr"):
                node.replace_input_with(arg, piece_for(arg, rank, need))
    for old in reversed(list(graph.nodes)):  # consumers first: a node is erased once nothing reads it
        if old.name in parts and old.name not in local:  # the input stays: the graph's signature
            graph.erase_node(old)
    graph.lint()
    gm.recompile()
    return gm, ranks, replicas, local


def _position(graph, node) -> int:
    for i, n in enumerate(graph.nodes):
        if n is node:
            return i
    return -1


def _has_batch(entry, batch: int) -> bool:
    if not entry:
        return False
    leaves = entry[0]
    return len(leaves) == 1 and leaves[0].is_tensor and bool(leaves[0].shape) and leaves[0].shape[0] == batch
