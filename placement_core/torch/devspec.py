"""Local device specs: ``cpu:2``, ``cuda:0,cuda:1``, ``cpu,cuda:0`` -> named local devices.

``cpu:N`` is N CPU "devices": in the ``ranks`` runner, N processes each pinned
to its own share of the cores, which is how a CPU-only machine benchmarks a
split for real. ``cuda:I`` is GPU I. Devices get the names the device graphs
use (``cpu0``, ``cpu1``, ``gpu0``, ... by kind and position), so a placement
made against the calibrated ``local`` preset names them directly.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.devices import Channel, Device, DeviceGraph
from ..base.errors import InputError

FIELD = "--devices"
USAGE = "Write e.g. cpu:2 (two CPU ranks), cuda:0,cuda:1, or cpu,cuda:0"


@dataclass(frozen=True)
class LocalDevice:
    name: str  # device-graph name: cpu0, gpu1
    kind: str  # "cpu" | "gpu"
    torch: str  # torch device string: "cpu", "cuda:1"

    @property
    def is_cuda(self) -> bool:
        return self.torch.startswith("cuda")


def parse_devices(spec: str) -> list[LocalDevice]:
    if not isinstance(spec, str) or not spec.strip():
        raise InputError("no devices given", field=FIELD, fix=USAGE)
    out: list[LocalDevice] = []
    n_cpu = n_gpu = 0
    seen_cuda: set[int] = set()
    for item in (s.strip() for s in spec.split(",")):
        head, _, arg = item.partition(":")
        if head == "cpu":
            count = 1
            if arg:
                if not arg.isdigit() or int(arg) < 1:
                    raise InputError(f"cpu:{arg} needs a positive number of CPU devices", field=FIELD, fix=USAGE)
                count = int(arg)
            for _ in range(count):
                out.append(LocalDevice(f"cpu{n_cpu}", "cpu", "cpu"))
                n_cpu += 1
        elif head in ("cuda", "gpu"):
            index = arg or "0"
            if not index.isdigit():
                raise InputError(f"{item!r} is not a CUDA device", field=FIELD, fix="Write cuda:0, cuda:1, ...")
            if int(index) in seen_cuda:
                raise InputError(f"cuda:{index} is listed twice", field=FIELD, fix="List each GPU once")
            seen_cuda.add(int(index))
            out.append(LocalDevice(f"gpu{n_gpu}", "gpu", f"cuda:{int(index)}"))
            n_gpu += 1
        else:
            raise InputError(f"unknown device {item!r}", field=FIELD, fix=USAGE)
    return out


def check_available(devices: list[LocalDevice]) -> None:
    """Fail early, with the reason, when a CUDA device does not exist here."""
    cuda = [d for d in devices if d.is_cuda]
    if not cuda:
        return
    import torch
    if not torch.cuda.is_available():
        raise InputError(f"{cuda[0].torch} was asked for, but this machine has no usable CUDA GPU", field=FIELD,
                         fix="Use cpu:N here, or run on a machine with GPUs")
    count = torch.cuda.device_count()
    for d in cuda:
        if int(d.torch.split(":")[1]) >= count:
            raise InputError(f"{d.torch} does not exist: this machine has {count} GPU(s)", field=FIELD,
                             fix=f"Use cuda:0 .. cuda:{count - 1}")


def device_index(devices: list[LocalDevice], key) -> int:
    """A placement's device (graph name ``cpu1``, torch string ``cuda:1`` or an index) as a position."""
    if isinstance(key, int) and not isinstance(key, bool):
        if 0 <= key < len(devices):
            return key
    else:
        for i, d in enumerate(devices):
            if key == d.name:
                return i
        matches = [i for i, d in enumerate(devices) if key == d.torch]
        if len(matches) == 1:
            return matches[0]
    raise InputError(f"the placement uses device {key!r}, which is not among {', '.join(d.name for d in devices)}",
                     field="placement",
                     fix="Name devices as the --devices list does (cpu0, cpu1, gpu0, ...) or list more devices")


def nominal_device_graph(devices: list[LocalDevice]) -> DeviceGraph:
    """Names and kinds only, for reading placement files against these devices (no costs)."""
    devs = [Device(d.name, d.kind, 1.0, 1.0, 1.0, model=d.torch) for d in devices]
    routes = tuple((a.name, b.name) for a in devs for b in devs if a.name != b.name)
    chans = [Channel("local", 1.0, 0.0, routes)] if routes else []
    return DeviceGraph("local", devs, chans)
