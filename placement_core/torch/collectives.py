"""The collectives of split ops on ranks: process groups per set of ranks, and gradients all-reduced in
buckets while the backward runs, as DDP does (docs/sharding.md)."""

from __future__ import annotations

import torch

# DDP's defaults (torch.nn.parallel.DistributedDataParallel: bucket_cap_mb=25, and a first bucket of 1 MiB
# so that the first all-reduce starts as soon as the last layers' gradients are in)
BUCKET_BYTES = 25 * 2**20
FIRST_BUCKET_BYTES = 2**20


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


class _Bucket:
    def __init__(self, group, k: int, params: list, offsets: list[int], size: int):
        self.group, self.k, self.params, self.offsets, self.size = group, k, params, offsets, size
        self.flat = None  # allocated at the first step, kept (a fresh buffer cost first-touch page faults)
        self.arrived: set[int] = set()
        self.work = None


class GradientBuckets:
    """The replicated layers' gradients summed over their ranks in flat buckets, each all-reduced as soon as
    its gradients are in, while the backward goes on (DDP's overlap), instead of one call after the whole
    backward (which left 40-75 ms of a ResNet-18 step on CPU ranks uncovered, docs/e5.md).

    Buckets hold each group's parameters in reverse order (the backward's), up to ``BUCKET_BYTES``, the first
    up to ``FIRST_BUCKET_BYTES``; every rank of a group builds the same buckets from the same replica list and
    starts them strictly in that order (gloo and NCCL match collectives by order), so a bucket that is ready
    early waits for the ones before it. A parameter that several nodes on this rank use (a layer whose batch
    shards share a rank) may gain gradient in more than one backward call: its bucket starts only at
    :meth:`finish`. The gradients become views into the bucket after the sum (``gradient_as_bucket_view``).
    ``replicas``: (parameters, group, ranks in it); ``comm`` counts the bytes and stages CUDA tensors for gloo;
    ``late``: ids of the parameters to hold back."""

    def __init__(self, replicas, comm, late: set[int] = frozenset()):
        self.comm, self.late = comm, set(late)
        self.buckets: list[_Bucket] = []
        self.where: dict[int, tuple[_Bucket, int]] = {}
        self.handles: list = []
        by_group: dict[tuple, tuple[object, int, list]] = {}
        for params, group, k in replicas:
            for p in params:
                by_group.setdefault((id(group), p.dtype), (group, k, []))[2].append(p)
        for group, k, params in by_group.values():
            seen: set[int] = set()
            chosen, offsets, size = [], [], 0
            cap = FIRST_BUCKET_BYTES
            for p in reversed(params):
                if id(p) in seen:
                    continue
                seen.add(id(p))
                if chosen and (size + p.numel()) * p.element_size() > cap:
                    self.buckets.append(_Bucket(group, k, chosen, offsets, size))
                    chosen, offsets, size, cap = [], [], 0, BUCKET_BYTES
                chosen.append(p)
                offsets.append(size)
                size += p.numel()
            if chosen:
                self.buckets.append(_Bucket(group, k, chosen, offsets, size))
        for b in self.buckets:
            for p, off in zip(b.params, b.offsets):
                self.where[id(p)] = (b, off)
        self.next = 0  # the first bucket not started yet

    def arm(self) -> None:
        """Before the step's backward: watch every replicated parameter's gradient."""
        self.next = 0
        for b in self.buckets:
            b.arrived, b.work = set(), None
            if b.flat is None:
                b.flat = torch.empty(b.size, dtype=b.params[0].dtype,
                                     device="cpu" if self.comm.stage else b.params[0].device)
            for p in b.params:
                if id(p) not in self.late:
                    self.handles.append(p.register_post_accumulate_grad_hook(self._arrived))

    def _copy(self, p, b: _Bucket, off: int) -> None:
        g = p.grad
        dst = b.flat[off:off + p.numel()]
        if g is None:
            dst.zero_()
        else:
            dst.copy_(g.reshape(-1))

    def _arrived(self, p) -> None:
        b, off = self.where[id(p)]
        if b.work is not None:  # a sum already under way would miss it: never silently
            raise RuntimeError("a replicated parameter gained gradient after its bucket's all-reduce started")
        self._copy(p, b, off)
        b.arrived.add(id(p))
        while self.next < len(self.buckets) and len(self.buckets[self.next].arrived) == len(self.buckets[self.next].params):
            self._start(self.buckets[self.next])
            self.next += 1

    def _start(self, b: _Bucket) -> None:
        import torch.distributed as dist
        b.work = dist.all_reduce(b.flat, group=b.group, async_op=True)
        self.comm.bytes_sent += 2.0 * (b.k - 1) / b.k * b.flat.numel() * b.flat.element_size()
        self.comm.messages += 1

    def finish(self) -> None:
        """After the backward: the buckets still waiting (held-back or unused parameters) start in order,
        every sum is waited for, and the gradients become views into the buckets."""
        for h in self.handles:
            h.remove()
        self.handles.clear()
        while self.next < len(self.buckets):
            b = self.buckets[self.next]
            for p, off in zip(b.params, b.offsets):
                if id(p) in self.late or p.grad is None:
                    self._copy(p, b, off)
            self._start(b)
            self.next += 1
        for b in self.buckets:
            b.work.wait()
            for p, off in zip(b.params, b.offsets):
                view = b.flat[off:off + p.numel()].view_as(p)
                p.grad = view.to(p.device) if self.comm.stage else view
