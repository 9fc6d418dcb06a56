"""Parametric GPU clusters: ``dgx-a100:nodes=N`` and ``dgx-h100:nodes=N``, two levels of links.

Each node is eight GPUs on NVSwitch; each GPU also has its own InfiniBand adapter (the DGX systems' compute
fabric, one adapter per GPU), and the nodes meet on a non-blocking fat tree. A GPU sends to a GPU of its own
node over its NVLink channel and to any other node's GPU over its InfiniBand channel: one channel per GPU and
level, so a GPU's sends queue behind each other on each level, and the fat tree adds no contention of its own.
Every figure is a datasheet's (docs/clusters.md names them); only the links' 5 µs latency is not: it is the
project's NVLink presets' figure, kept for InfiniBand too (a training step's transfers are megabytes, where
the bandwidth decides). Bandwidths are per direction. The default cost profile multiplies link bandwidths by
its communication efficiency (0.25, the thesis' value, ``--comm-efficiency``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.errors import InputError
from ..model.devices import Channel, Device, DeviceGraph

LATENCY = 5e-6
MAX_NODES = 32  # 256 GPUs: a device graph names every pair of GPUs it routes


@dataclass(frozen=True)
class NodeKind:
    gpu: str
    peak_fp32: float
    peak_half: float  # bf16 and fp16, dense tensor cores
    memory_bytes: float
    mem_bandwidth: float
    sms: int
    nvlink: float  # bytes/s per direction per GPU
    infiniband: float  # bytes/s per direction per GPU (its adapter)


KINDS = {
    # NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB) and the A100 architecture whitepaper (108 SMs);
    # DGX A100 datasheet: eight single-port ConnectX-6 HDR InfiniBand adapters at 200 Gb/s for the cluster.
    "dgx-a100": NodeKind("NVIDIA A100-SXM4-80GB", 19.5e12, 312e12, 80e9, 2039e9, 108, 600e9 / 2, 200e9 / 8),
    # NVIDIA H100 Tensor Core GPU datasheet (SXM5 80GB: dense rates, sparsity excluded) and the H100
    # architecture whitepaper (132 SMs); DGX H100 datasheet: eight ConnectX-7 adapters at 400 Gb/s.
    "dgx-h100": NodeKind("NVIDIA H100-SXM5-80GB", 67e12, 989.4e12, 80e9, 3350e9, 132, 900e9 / 2, 400e9 / 8),
}
FIX = "Write dgx-a100:nodes=N or dgx-h100:nodes=N, N from 1 to {}".format(MAX_NODES)


def is_cluster(spec: str) -> bool:
    return isinstance(spec, str) and spec.split(":", 1)[0].strip().lower() in KINDS and ":" in spec


def parse(spec: str) -> tuple[str, int]:
    kind, _, body = spec.strip().partition(":")
    kind = kind.strip().lower()
    key, eq, raw = body.strip().partition("=")
    if key.strip().lower() != "nodes" or not eq:
        raise InputError(f"{spec[:60]!r} does not say how many nodes", field="devices", fix=FIX)
    try:
        nodes = int(raw.strip())
    except ValueError:
        raise InputError(f"nodes={raw.strip()[:20]!r} is not a whole number", field="devices", fix=FIX) from None
    if not 1 <= nodes <= MAX_NODES:
        raise InputError(f"nodes={nodes} is outside 1..{MAX_NODES}", field="devices", fix=FIX)
    return kind, nodes


def cluster(kind: str, nodes: int) -> DeviceGraph:
    """``nodes`` nodes of ``kind``: GPUs ``n<i>g<j>``, channels ``nvl-n<i>g<j>`` and ``ib-n<i>g<j>``."""
    k = KINDS[kind]
    names = [[f"n{i}g{j}" for j in range(8)] for i in range(nodes)]
    devices = [Device(name, "gpu", k.peak_fp32, k.memory_bytes, k.mem_bandwidth, k.gpu,
                      peaks=(("bf16", k.peak_half), ("fp16", k.peak_half)), sms=k.sms)
               for node in names for name in node]
    channels = []
    for i, node in enumerate(names):
        for src in node:
            channels.append(Channel(f"nvl-{src}", k.nvlink, LATENCY,
                                    tuple((src, dst) for dst in node if dst != src)))
            if nodes > 1:
                channels.append(Channel(f"ib-{src}", k.infiniband, LATENCY,
                                        tuple((src, dst) for o, other in enumerate(names) if o != i
                                              for dst in other)))
    return DeviceGraph(f"{kind}:nodes={nodes}", devices, channels)


def load(spec: str) -> DeviceGraph:
    return cluster(*parse(spec))
