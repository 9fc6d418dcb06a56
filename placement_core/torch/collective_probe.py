"""Calibration's collectives on the ranks: all-reduce, all-gather and reduce-scatter against size, alone and
beside a compute loop, and how much ranks computing at once slow each other (docs/torch.md)."""

from __future__ import annotations

import statistics
import time


def _sync(device) -> None:
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _all_reduce(x, k):
    import torch.distributed as dist
    dist.all_reduce(x)


def _all_gather(x, k):
    import torch
    import torch.distributed as dist
    dist.all_gather_into_tensor(torch.empty(x.numel() * k, dtype=x.dtype, device=x.device), x)


def _reduce_scatter(x, k):
    import torch
    import torch.distributed as dist
    dist.reduce_scatter_tensor(torch.empty(x.numel() // k, dtype=x.dtype, device=x.device), x)


# op -> (call, the share of the curve's size each rank passes in): a size is the bytes every rank ends up
# with (all-reduce, all-gather) or starts with (reduce-scatter), as the simulator's all-reduce of W bytes
COLLECTIVES = {"allreduce": (_all_reduce, 1), "allgather": (_all_gather, -1), "reducescatter": (_reduce_scatter, 1)}


class _Spinner:
    """A matrix-product loop on the rank's device in a second thread, standing for the backward that a
    step's all-reduce overlaps (torch releases the GIL inside the product)."""

    def __init__(self, device):
        import threading

        import torch
        self.device, self.stop = device, threading.Event()
        self.a = torch.randn(256, 256, device=device)
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            self.a @ self.a
            _sync(self.device)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def collective_times(op, sizes, k: int, device, busy: bool) -> list[float]:
    """Seconds of one collective per size in bytes (float32 elements, a multiple of k), median of repeats,
    every repeat started together after a barrier; ``busy``: while a product loop runs on the rank."""
    import contextlib

    import torch
    import torch.distributed as dist
    fn, share = op
    out = []
    for size in sizes:
        n = max(k, int(size) // 4 // k * k)
        x = torch.ones(n // k if share < 0 else n, device=device)
        reps = max(3, min(20, int(2e8 / max(int(size), 1))))
        times = []
        with (_Spinner(device) if busy else contextlib.nullcontext()):
            fn(x, k)  # warm-up
            for _ in range(reps):
                dist.barrier()
                _sync(device)
                t0 = time.perf_counter()
                fn(x, k)
                _sync(device)
                times.append(time.perf_counter() - t0)
        out.append(statistics.median(times))
    return out


def contention(device, rank: int, k: int, work=None, products: int = 30) -> tuple[float, float]:
    """Seconds of ``work`` (the model's own training step, see calibrate_worker; else a fixed loop of matrix
    products) on this rank alone (the others wait), then on every rank at once: the ratio is how much ranks
    computing together slow each other (shared cores, caches, memory bandwidth). A loop of 384x384 products
    stays in each core's cache and measured no slowdown where ResNet-18's steps measured 1.09-1.16
    (docs/e5.md)."""
    import torch
    import torch.distributed as dist
    a = torch.randn(384, 384, device=device)

    def loop() -> float:
        t0 = time.perf_counter()
        if work is not None:
            work()
        else:
            for _ in range(products):
                a @ a
        return time.perf_counter() - t0

    loop()
    alone = []
    for _ in range(3):
        for r in range(k):
            dist.barrier()
            if r == rank:
                alone.append(loop())
    together = []
    for _ in range(3):
        dist.barrier()
        together.append(loop())
    dist.barrier()
    return min(alone), min(together)
