"""Writes the device presets under assets/devices/ (run after editing this file).

Numbers from the thesis' Tables 4.1 and 4.2 (Malvik, Luke01) and the layout of
its published device files: each GPU sits on its own PCIe3 x16 link (128
Gbit/s), and a device sends everything over the link in its own neighbour
list, so CPU->GPU and GPU->GPU traffic share a link. Clocks are those files'
values (the CPU's is the thesis' core-count x frequency figure); only the
exprimo-2020 profile reads them.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from placement_core.model.devices import Channel, Device, DeviceGraph, devices_to_dict  # noqa: E402
from placement_core.base.jsonio import write_json  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "assets" / "devices"
PCIE3 = 128e9 / 8  # bytes/s
PCIE4 = 256e9 / 8
PCIE_LATENCY = 10e-6
NVLINK_LATENCY = 5e-6


def xeon_gold(memory=755e9) -> Device:
    return Device("cpu0", "cpu", 1800e9, memory, 76.8e9, "2x Intel Xeon Gold 6132", clock_hz=145600e6)


def v100(i: int, memory=32e9) -> Device:
    return Device(f"gpu{i}", "gpu", 14000e9, memory, 900e9, "NVIDIA Tesla V100", clock_hz=1312e6)


def pcie_per_gpu(devices: list[Device], bandwidth=PCIE3) -> list[Channel]:
    """One link per GPU: the CPU reaches gpu i over link i, gpu i sends everything over link i."""
    gpus = [d.name for d in devices if d.kind == "gpu"]
    cpu = next(d.name for d in devices if d.kind == "cpu")
    chans = []
    for i, g in enumerate(gpus):
        routes = [(cpu, g), (g, cpu)] + [(g, other) for other in gpus if other != g]
        chans.append(Channel(f"pcie{i}", bandwidth, PCIE_LATENCY, tuple(routes)))
    return chans


def malvik(n_gpus: int, gpu_memory: float = 32e9, name: str = "malvik") -> DeviceGraph:
    devs = [xeon_gold()] + [v100(i, gpu_memory) for i in range(n_gpus)]
    return DeviceGraph(name, devs, pcie_per_gpu(devs))


def luke01() -> DeviceGraph:
    cpu = Device("cpu0", "cpu", 800e9, 504e9, 76.8e9, "2x Intel Xeon E5-2650 v4", clock_hz=105600e6)
    gpus = [Device(f"gpu{i}", "gpu", 9300e9, 16e9, 732e9, "NVIDIA Tesla P100", clock_hz=1190e6) for i in range(2)]
    devs = [cpu] + gpus
    return DeviceGraph("luke01", devs, pcie_per_gpu(devs))


def nvlink_8gpu() -> DeviceGraph:
    """A DGX-A100-like server: 8 A100s on NVSwitch (300 GB/s out of each GPU), PCIe4 to the host."""
    cpu = Device("cpu0", "cpu", 4600e9, 1024e9, 409.6e9, "2x AMD EPYC 7742")
    gpus = [Device(f"gpu{i}", "gpu", 19500e9, 40e9, 1555e9, "NVIDIA A100 40GB") for i in range(8)]
    names = [g.name for g in gpus]
    chans = [Channel(f"pcie{i}", PCIE4, PCIE_LATENCY, (("cpu0", g), (g, "cpu0"))) for i, g in enumerate(names)]
    chans += [Channel(f"nvlink{i}", 300e9, NVLINK_LATENCY, tuple((g, o) for o in names if o != g))
              for i, g in enumerate(names)]
    return DeviceGraph("nvlink-8gpu", [cpu] + gpus, chans)


PRESETS = {
    "malvik": malvik(2),
    "luke01": luke01(),
    "malvik-4gpu": malvik(4, name="malvik-4gpu"),
    # Experiment E3's "limited" case: memory reduced so that all GPUs must be used.
    "malvik-4gpu-limited-alexnet": malvik(4, 200e6, "malvik-4gpu-limited-alexnet"),
    "malvik-4gpu-limited-resnet50": malvik(4, 2.5e9, "malvik-4gpu-limited-resnet50"),
    "malvik-4gpu-limited-inception": malvik(4, 2.5e9, "malvik-4gpu-limited-inception"),
    "nvlink-8gpu": nvlink_8gpu(),
}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, graph in PRESETS.items():
        write_json(OUT / f"{name}.json", devices_to_dict(graph))
        print(f"wrote {OUT / f'{name}.json'}")


if __name__ == "__main__":
    main()
