"""Parametric GPU clusters: ``dgx-a100:nodes=N`` and ``dgx-h100:nodes=N``, two levels of links.

Each node is eight GPUs on NVSwitch; each GPU also has its own InfiniBand adapter (the DGX systems' compute
fabric, one adapter per GPU), and the nodes meet on a non-blocking fat tree. A GPU sends to a GPU of its own
node over its NVLink channel and to any other node's GPU over its InfiniBand channel: one channel per GPU and
level, so a GPU's sends queue behind each other on each level, and the fat tree adds no contention of its own.
Peaks, memory and link rates are the datasheets'; what a GPU and a link reach is measured by public
microbenchmarks, not by training runs: the best bf16 matmul rate (Bekman's MAMF table) and NCCL's bus
bandwidth on each link class (docs/clusters.md names every source). They replace the cost profile's
efficiencies (``--comp-efficiency``, ``--comm-efficiency``, which still apply to fp32 and to other device
graphs). Only the links' 5 µs latency is the project's own: its NVLink presets' figure, kept for InfiniBand
too (a training step's transfers are megabytes, where the bandwidth decides). Bandwidths are per direction.

A device graph names every ordered pair of GPUs it routes, so a whole cluster is materialised only up to
``MAX_NODES``; :class:`Cluster` describes one of up to ``MAX_PLAN_NODES`` nodes without its pairs and builds
the graph of just the GPUs a plan simulates (one data-parallel replica's, ``optimize.plan_fold``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.errors import InputError
from ..model.devices import Channel, Device, DeviceGraph

LATENCY = 5e-6
MAX_NODES = 32  # 256 GPUs: a device graph names every pair of GPUs it routes
MAX_PLAN_NODES = 1024  # 8,192 GPUs: `placement plan` builds only one data-parallel replica's GPUs
GPUS_PER_NODE = 8


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
    achieved_half: float  # FLOP/s of the best bf16 matmul measured (fp16 runs on the same tensor cores)
    nvlink_achieved: float  # bytes/s NCCL reaches on NVLink (bus bandwidth of a large ring collective)
    infiniband_achieved: float  # bytes/s NCCL reaches across nodes, per GPU's adapter


# What NCCL reaches on a link, as a share of its line rate (docs/clusters.md "What the hardware reaches"):
# NVLink loses ~20 % to its protocol (NCCL's maintainers: 370 GB/s of NVLink 4's 450 with a ring; the same
# share is taken for NVLink 3); InfiniBand 0.94 (376.7 GB/s all-reduce bus bandwidth over four nodes of
# eight 400 Gb/s adapters each, Bekman's measurement).
NVLINK_PROTOCOL = 370e9 / 450e9
IB_REACHED = 376.7e9 / (8 * 400e9 / 8)

KINDS = {
    # NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB) and the A100 architecture whitepaper (108 SMs);
    # DGX A100 datasheet: eight single-port ConnectX-6 HDR InfiniBand adapters at 200 Gb/s for the cluster;
    # Bekman's MAMF table: 267.9 TFLOP/s for the best bf16 matmul on an A100 SXM.
    "dgx-a100": NodeKind("NVIDIA A100-SXM4-80GB", 19.5e12, 312e12, 80e9, 2039e9, 108, 600e9 / 2, 200e9 / 8,
                         267.9e12, NVLINK_PROTOCOL * 600e9 / 2, IB_REACHED * 200e9 / 8),
    # NVIDIA H100 Tensor Core GPU datasheet (SXM5 80GB: dense rates, sparsity excluded) and the H100
    # architecture whitepaper (132 SMs); DGX H100 datasheet: eight ConnectX-7 adapters at 400 Gb/s;
    # Bekman's MAMF table: 792.1 TFLOP/s on an H100 SXM (an H200 measured 769-798 here, docs/clusters.md).
    "dgx-h100": NodeKind("NVIDIA H100-SXM5-80GB", 67e12, 989.4e12, 80e9, 3350e9, 132, 900e9 / 2, 400e9 / 8,
                         792.1e12, NVLINK_PROTOCOL * 900e9 / 2, IB_REACHED * 400e9 / 8),
}
FIX = "Write dgx-a100:nodes=N or dgx-h100:nodes=N, N from 1 to {}".format(MAX_NODES)
PLAN_FIX = "Write dgx-a100:nodes=N or dgx-h100:nodes=N, N from 1 to {}".format(MAX_PLAN_NODES)


def is_cluster(spec: str) -> bool:
    return isinstance(spec, str) and spec.split(":", 1)[0].strip().lower() in KINDS and ":" in spec


def parse(spec: str, limit: int = MAX_NODES) -> tuple[str, int]:
    """(kind, nodes) of ``dgx-…:nodes=N``; N from 1 to ``limit`` (a whole device graph's, or a plan's)."""
    fix = FIX if limit == MAX_NODES else PLAN_FIX
    kind, _, body = spec.strip().partition(":")
    kind = kind.strip().lower()
    key, eq, raw = body.strip().partition("=")
    if key.strip().lower() != "nodes" or not eq:
        raise InputError(f"{spec[:60]!r} does not say how many nodes", field="devices", fix=fix)
    try:
        nodes = int(raw.strip())
    except ValueError:
        raise InputError(f"nodes={raw.strip()[:20]!r} is not a whole number", field="devices", fix=fix) from None
    if not 1 <= nodes <= limit:
        if limit == MAX_NODES and MAX_NODES < nodes <= MAX_PLAN_NODES:
            fix = (f"{FIX}; `placement plan` takes up to {MAX_PLAN_NODES} nodes (it simulates one data-parallel "
                   "replica)")
        raise InputError(f"nodes={nodes} is outside 1..{limit}", field="devices", fix=fix)
    return kind, nodes


@dataclass(frozen=True)
class Cluster:
    """``nodes`` nodes of ``kind`` without their pairs of GPUs: GPU ``g`` is ``n<g // 8>g<g % 8>``, and
    :meth:`graph` materialises any subset of them (the whole cluster: :func:`cluster`)."""

    kind: str
    nodes: int
    measured: bool = True  # links and tensor cores at their measured rates; False: datasheet x efficiencies

    @property
    def name(self) -> str:
        return f"{self.kind}:nodes={self.nodes}"

    @property
    def n_gpus(self) -> int:
        return GPUS_PER_NODE * self.nodes

    def node_of(self, gpu: int) -> int:
        return gpu // GPUS_PER_NODE

    def link(self, a: int, b: int) -> tuple[float, float]:
        """(latency, bandwidth per direction) of the link GPU ``a`` sends to GPU ``b`` on."""
        k = KINDS[self.kind]
        return LATENCY, (k.nvlink if self.node_of(a) == self.node_of(b) else k.infiniband)

    def link_cost(self, a: int, b: int, efficiency: float) -> tuple[float, float]:
        """(latency, seconds per byte) of the link ``a`` sends to ``b`` on, at what NCCL reaches on it (the
        measured rate wins over ``efficiency``, as in the cluster's device graph), or at the datasheet's rate
        times ``efficiency`` when the cluster is not ``measured``."""
        k = KINDS[self.kind]
        near = self.node_of(a) == self.node_of(b)
        if not self.measured:
            return LATENCY, 1.0 / ((k.nvlink if near else k.infiniband) * efficiency)
        return LATENCY, 1.0 / (k.nvlink_achieved if near else k.infiniband_achieved)

    def graph(self, gpus: list[int] | None = None) -> DeviceGraph:
        """The device graph of ``gpus`` (indices into the cluster, in order; all when None): each GPU's NVLink
        channel to the chosen GPUs of its node and its InfiniBand channel to the others (a channel with no
        route left out), named as in the whole cluster."""
        k = KINDS[self.kind]
        chosen = list(range(self.n_gpus)) if gpus is None else [int(g) for g in gpus]
        if any(not 0 <= g < self.n_gpus for g in chosen) or len(set(chosen)) != len(chosen):
            raise ValueError(f"GPUs must be distinct indices below {self.n_gpus}")
        names = {g: f"n{self.node_of(g)}g{g % GPUS_PER_NODE}" for g in chosen}
        devices = [Device(names[g], "gpu", k.peak_fp32, k.memory_bytes, k.mem_bandwidth, k.gpu,
                          peaks=(("bf16", k.peak_half), ("fp16", k.peak_half)), sms=k.sms,
                          achieved=(("bf16", k.achieved_half), ("fp16", k.achieved_half)) if self.measured else ())
                   for g in chosen]
        by_node: dict[int, list[str]] = {}
        for g in chosen:
            by_node.setdefault(self.node_of(g), []).append(names[g])
        channels = []
        for g in chosen:
            src, node = names[g], self.node_of(g)
            near = tuple((src, dst) for dst in by_node[node] if dst != src)
            far = tuple((src, dst) for o, others in by_node.items() if o != node for dst in others)
            if near:
                channels.append(Channel(f"nvl-{src}", k.nvlink, LATENCY, near,
                                        achieved_bandwidth=k.nvlink_achieved if self.measured else 0.0))
            if far:
                channels.append(Channel(f"ib-{src}", k.infiniband, LATENCY, far,
                                        achieved_bandwidth=k.infiniband_achieved if self.measured else 0.0))
        return DeviceGraph(self.name if gpus is None else f"{self.name} ({len(chosen)} GPUs)", devices, channels)


def cluster(kind: str, nodes: int) -> DeviceGraph:
    """``nodes`` nodes of ``kind``: GPUs ``n<i>g<j>``, channels ``nvl-n<i>g<j>`` and ``ib-n<i>g<j>``."""
    return Cluster(kind, nodes).graph()


def load(spec: str) -> DeviceGraph:
    return cluster(*parse(spec))


def load_plan_cluster(spec: str) -> Cluster:
    """A cluster for `placement plan`, up to ``MAX_PLAN_NODES`` nodes, not materialised."""
    return Cluster(*parse(spec, MAX_PLAN_NODES))
