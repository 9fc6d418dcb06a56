"""The collectives of split ops on ranks: process groups per set of ranks, and gradients all-reduced in
buckets (docs/sharding.md)."""

from __future__ import annotations

import torch


def replica_group(groups: dict, ranks) -> object:
    """The process group of ``ranks``, made once and kept in ``groups`` (the caller's, for the life of its
    process group). Every rank asks for the same rank sets in the same order, so every rank makes every
    group (``new_group`` is collective) at the same point. A group per replicated layer and placement, as
    before, leaked a gloo context with its sockets and threads each time: thousands over an E5 run, whose
    wake-ups slowed every later step (docs/e5.md)."""
    import torch.distributed as dist

    key = tuple(sorted(int(r) for r in ranks))
    if key not in groups:
        groups[key] = dist.new_group(list(key))  # the world's too: its collectives stay apart from the sends
    return groups[key]


def all_reduce_buckets(replicas, comm) -> None:
    """Sum the gradients of every replicated layer over its ranks (a ring moves 2(k-1)/k of them), one
    flat bucket per process group and dtype, as DDP does: an all-reduce per tensor cost gloo about 2 ms a
    call on two CPU ranks (ResNet-18's 62 tensors: 121 ms, one 46.8 MB bucket: 32 ms; docs/e5.md).
    ``replicas``: (parameters, group, ranks in it); ``comm`` counts the bytes and stages CUDA tensors."""
    import torch.distributed as dist
    from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

    buckets: dict[tuple, tuple[object, int, list]] = {}
    for params, group, k in replicas:
        for p in params:
            buckets.setdefault((id(group), p.dtype), (group, k, []))[2].append(p)
    for group, k, params in buckets.values():
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = _flatten_dense_tensors([g.cpu() for g in grads] if comm.stage else grads)
        dist.all_reduce(flat, group=group)
        for p, g in zip(params, _unflatten_dense_tensors(flat, grads)):
            p.grad = g.to(p.device) if comm.stage else g
        comm.bytes_sent += 2.0 * (k - 1) / k * flat.numel() * flat.element_size()
        comm.messages += 1
