"""One message size, timed: a ping-pong between two ranks, or a copy between two devices in one process.

Shared by calibration (its link fit, from the medians) and E1 (every sample kept).
"""

from __future__ import annotations

import time


def _sync(device) -> None:
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def ping_pong_samples(size: int, repeats: int, rank: int, device, peer: int | None = None, group=None
                      ) -> list[float]:
    """``repeats`` one-way times of ``size`` bytes between this rank and ``peer`` (the other of ranks 0 and
    1 by default; the lower rank sends first): round trips from a barrier, halved; one extra exchange first.
    With more than two ranks ``group`` must hold just the pair, so the barrier waits for no one else."""
    import torch
    import torch.distributed as dist
    peer = 1 - rank if peer is None else peer
    t = torch.randint(0, 256, (int(size),), dtype=torch.uint8, device=device)
    out = []
    for i in range(repeats + 1):
        dist.barrier(group=group)
        _sync(device)
        t0 = time.perf_counter()
        if rank < peer:
            dist.send(t, peer)
            dist.recv(t, peer)
        else:
            dist.recv(t, peer)
            dist.send(t, peer)
        _sync(device)
        if i:  # the first exchange sets the connection and buffers up
            out.append((time.perf_counter() - t0) / 2)
    return out


def copy_samples(size: int, repeats: int, src: str, dst: str) -> list[float]:
    """``repeats`` times of ``tensor.to(dst)`` for ``size`` bytes (both devices synchronised around it)."""
    import torch
    t = torch.randint(0, 256, (int(size),), dtype=torch.uint8, device=src)
    devices = {torch.device(src), torch.device(dst)}
    out = []
    for i in range(repeats + 1):
        for d in devices:
            _sync(d)
        t0 = time.perf_counter()
        y = t.to(dst)
        for d in devices:
            _sync(d)
        if i:
            out.append(time.perf_counter() - t0)
        del y
    return out
