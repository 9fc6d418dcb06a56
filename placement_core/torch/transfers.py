"""Transfer times between two devices at many message sizes (thesis E1), every sample kept.

Two ways to move a tensor, as the benchmark runners do:

* ``ranks``: one worker process per device, pinned to its own cores like a benchmark rank; a sample is a
  ping-pong (rank 0 sends, rank 1 sends it back) from a common barrier, halved: the one-way time of a
  message between ranks (gloo on CPU ranks, NCCL between GPUs).
* ``inprocess``: one process; a sample is ``tensor.to(dst)`` with the devices synchronised, the thesis'
  CPU -> GPU copy.

Sizes run in ``rounds``, each round visiting every size (ascending in even rounds, descending in odd
ones) for ``repeats`` samples, so a slow drift of a shared machine spreads over all sizes instead of
falling on a few. The first exchange of each size in each round sets buffers up and is dropped. Each
worker also reports its device's GEMM rate, copy bandwidth and memory, so the measurement makes a
whole device graph.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from ..base.errors import InputError
from .devspec import LocalDevice, check_available, parse_devices

# 4 B .. 256 MiB, every factor of 4: "a few bytes to hundreds of MB"
SIZES = tuple(4 ** k for k in range(1, 15))


@dataclass
class TransferMeasurement:
    runner: str
    devices: list[LocalDevice]
    samples: dict[int, list[float]]  # bytes -> one-way seconds, every sample in the order measured
    rounds: dict[int, list[int]] = field(default_factory=dict)  # bytes -> the round of each sample
    device_figures: dict[str, dict] = field(default_factory=dict)  # name -> gemm_flops, copy_bandwidth, ...
    cores: list | None = None


def measure_transfers(devices, *, sizes=SIZES, runner: str = "ranks", repeats: int = 10, rounds: int = 5,
                      timeout: float = 1800.0, progress: Callable[[str], None] | None = None) -> TransferMeasurement:
    """Sample the one-way time of every size between the two ``devices`` (``cpu:2``, ``cpu,cuda:0``, ...)."""
    from .launcher import WorkerJob, assign_cores

    devs = parse_devices(devices) if isinstance(devices, str) else list(devices)
    if len(devs) != 2:
        raise InputError(f"E1 measures one link, between two devices; got {len(devs)}", field="--devices",
                         fix="Give two devices, e.g. cpu:2, cpu,cuda:0 or cuda:0,cuda:1")
    check_available(devs)
    if runner not in ("ranks", "inprocess"):
        raise InputError(f"unknown runner {runner!r}", field="--runner", fix="Use ranks or inprocess")
    if runner == "inprocess" and devs[0].torch == devs[1].torch:
        raise InputError("in one process both devices are the same torch device: nothing crosses a link",
                         field="--runner", fix="Use --runner ranks for cpu:2")
    sizes = sorted({int(s) for s in sizes})
    if len(sizes) < 2 or sizes[0] < 1:
        raise InputError("give at least two message sizes of 1 byte or more", field="--sizes")
    world = 2 if runner == "ranks" else 1
    affinity, threads, _ = assign_cores(devs) if runner == "ranks" else (None, None, False)
    spec = {"mode": "transfers", "runner": runner, "devices": [asdict(d) for d in devs], "sizes": sizes,
            "repeats": int(repeats), "rounds": int(rounds), "affinity": affinity, "threads": threads,
            "comm_timeout": timeout}
    out = TransferMeasurement(runner, devs, {s: [] for s in sizes}, {s: [] for s in sizes}, cores=affinity)
    deadline = time.monotonic() + timeout
    with WorkerJob(spec, world) as job:
        while True:
            for _, ev in job.events():
                _take(out, ev, progress)
            if not job.running():
                break
            if time.monotonic() > deadline:
                raise InputError(f"the transfers did not finish within {timeout:.0f} s", field="--timeout",
                                 fix="Use fewer --rounds or --repeats, or smaller --sizes")
            time.sleep(0.05)
        for _, ev in job.events():
            _take(out, ev, progress)
        tail = job.log_tail()
    missing = [s for s in sizes if not out.samples[s]]
    if missing:
        raise InputError(f"no transfer of {missing[0]} bytes was measured" + (f" ({tail})" if tail else ""),
                         field="e1")
    return out


def _take(out: TransferMeasurement, ev: dict, progress) -> None:
    kind = ev.get("event")
    if kind == "samples":
        out.samples[ev["size"]].extend(ev["seconds"])
        out.rounds[ev["size"]].extend([ev["round"]] * len(ev["seconds"]))
        if progress and ev["size"] == max(out.samples):
            progress(f"round {ev['round'] + 1}: every size measured")
    elif kind == "device":
        out.device_figures[ev["name"]] = {k: v for k, v in ev.items() if k not in ("event", "name")}
    elif kind == "fatal":
        if ev.get("kind") == "input":
            raise InputError(ev["message"])
        raise InputError(f"the transfer measurement failed: {ev['message']}", field="e1")


# -- worker side ----------------------------------------------------------------------------------------

def worker_main(spec: dict, rank: int, events) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    from .calibrate_worker import copy_bandwidth, device_model, gemm_rate, memory_bytes
    from .transfer_probe import copy_samples, ping_pong_samples

    devs = [LocalDevice(**d) for d in spec["devices"]]
    ranks = spec["runner"] == "ranks"
    mine = [rank] if ranks else [0, 1]
    if ranks:
        backend = "nccl" if all(d.is_cuda for d in devs) else "gloo"
        if devs[rank].is_cuda:
            torch.cuda.set_device(torch.device(devs[rank].torch))
        dist.init_process_group(backend, store=dist.FileStore(spec["store"], 2), rank=rank, world_size=2,
                                timeout=datetime.timedelta(seconds=float(spec.get("comm_timeout", 1800))))
    events.write({"event": "ready"})
    try:
        for r in mine:
            device = torch.device(devs[r].torch)
            events.write({"event": "device", "name": devs[r].name, "gemm_flops": gemm_rate(device),
                          "copy_bandwidth": copy_bandwidth(device), "memory_bytes": memory_bytes(devs[r], spec),
                          "model": device_model(device), "threads": torch.get_num_threads()})
        for rnd in range(int(spec["rounds"])):
            order = spec["sizes"] if rnd % 2 == 0 else spec["sizes"][::-1]
            for size in order:
                if ranks:
                    stage = backend == "gloo" and devs[rank].is_cuda  # gloo moves CPU tensors only
                    device = torch.device("cpu" if stage else devs[rank].torch)
                    seconds = ping_pong_samples(size, int(spec["repeats"]), rank, device)
                else:
                    seconds = copy_samples(size, int(spec["repeats"]), devs[0].torch, devs[1].torch)
                if rank == 0:
                    events.write({"event": "samples", "round": rnd, "size": size, "seconds": seconds})
    finally:
        if ranks:
            dist.destroy_process_group()
