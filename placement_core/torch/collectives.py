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
    The bucket is allocated once and kept on ``comm`` (a fresh 46.8 MB buffer each step cost 35-44 ms of
    first-touch page faults on one core, against 9-11 ms to copy into a kept one), and the gradients become
    views into it after the sum, as DDP's ``gradient_as_bucket_view``: no copy back.
    ``replicas``: (parameters, group, ranks in it); ``comm`` counts the bytes and stages CUDA tensors."""
    import torch.distributed as dist

    buckets: dict[tuple, tuple[object, int, list]] = {}
    for params, group, k in replicas:
        for p in params:
            buckets.setdefault((id(group), p.dtype), (group, k, []))[2].append(p)
    if not buckets:  # nothing replicated (a calibration's single rank has no comm at all)
        return
    kept = comm.buckets
    for (gid, dtype), (group, k, params) in buckets.items():
        key = (gid, dtype, tuple(id(p) for p in params))
        total = sum(p.numel() for p in params)
        flat = kept.get(key)
        if flat is None:
            flat = kept[key] = torch.empty(total, dtype=dtype, device="cpu" if comm.stage else params[0].device)
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        torch.cat([(g.cpu() if comm.stage else g).reshape(-1) for g in grads], out=flat)
        dist.all_reduce(flat, group=group)
        off = 0
        for p in params:
            view = flat[off:off + p.numel()].view_as(p)
            p.grad = view.to(p.device) if comm.stage else view
            off += p.numel()
        comm.bytes_sent += 2.0 * (k - 1) / k * flat.numel() * flat.element_size()
        comm.messages += 1
