"""Folded data-parallel replicas: a plan's ``dp`` identical replicas simulated as one, their gradients' collectives kept.

The replicas of a plan run the same ops on the same shapes at the same time, so simulating one of them (its
``tp × pp`` GPUs, the tensor-parallel groups folded as usual into their first GPU) gives every replica's
trace. What they do together is the data-parallel gradient reduction after the backward: here each op's
gradient bytes (one tensor-parallel rank's shard) are reduced over the ``dp`` replicas by
:mod:`..cost.collectives`, in two levels when the group spans nodes (each rank on its own InfiniBand adapter,
so the ``tp`` ranks' reductions run side by side, one per rail), and the time is charged to the op's weight
update on its GPU: the reduction runs after the op's last backward and before its update, holding the GPU, as
Megatron-LM's gradient all-reduce after the pipeline's backward does (no overlap with the backward). ZeRO
divides the training state and the update over the group as a batch split does. This is what lets a plan
of thousands of GPUs be simulated: only the replica's GPUs become a device graph (``formats.clusters``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable

import numpy as np

from ..cost import collectives
from ..cost.profiles import CostArrays, RooflineProfile
from ..cost.training_state import resident_copies
from ..model.devices import DeviceGraph
from ..model.graph import Graph


@dataclass(frozen=True)
class DPGroup:
    """A data-parallel group's shape: ``per_node`` ranks in each of ``nodes`` nodes, a rank's (alpha, beta)
    inside its node (``intra``) and across nodes (``inter``)."""

    ranks: int
    per_node: int
    nodes: int
    intra: tuple[float, float]
    inter: tuple[float, float]

    def time(self, kind: str, nbytes: float) -> float:
        """Seconds of ``kind`` (all-reduce, all-gather, reduce-scatter) of ``nbytes`` over the group."""
        if self.ranks < 2 or nbytes <= 0:
            return 0.0
        return collectives.hierarchical(kind, nbytes, self.per_node, self.nodes, self.intra, self.inter)


def gradient_kind(zero: int) -> str:
    """The gradients' collective: an all-reduce (ZeRO 1 and 2 reduce-scatter the gradients and all-gather the
    updated weights, the same bytes), a reduce-scatter under ZeRO-3 (its weights are gathered by their own ops)."""
    return "reduce-scatter" if zero >= 3 else "all-reduce"


@dataclass(frozen=True)
class FoldedReplicaProfile(RooflineProfile):
    """The default roofline for one replica of ``group.ranks``: each op's update also reduces its gradients over
    the group, and ZeRO partitions the training state and the update over it."""

    group: DPGroup | None = field(default=None, compare=False)

    @classmethod
    def of(cls, base: RooflineProfile, group: DPGroup) -> "FoldedReplicaProfile":
        return cls(**{f.name: getattr(base, f.name) for f in fields(base)}, group=group)

    @property
    def replicas(self) -> int:
        return self.group.ranks if self.group else 1

    def gradient_seconds(self, graph: Graph) -> np.ndarray:
        """[ops] seconds of each op's gradient collective over the group (0 for an op without weights)."""
        kind = gradient_kind(self.zero)
        return np.array([self.group.time(kind, float(op.param_bytes)) if self.group else 0.0 for op in graph.ops])

    def arrays(self, graph: Graph, devices: DeviceGraph) -> CostArrays:
        from dataclasses import replace

        a = super().arrays(graph, devices)
        k = self.replicas
        update = a.update / (k if self.zero >= 1 else 1) + self.gradient_seconds(graph)[:, None]
        return replace(a, update=update,
                       weight_copies=resident_copies(self.optimizer, graph.precision, self.zero, k))


def fold_profile(base: RooflineProfile, group: DPGroup) -> FoldedReplicaProfile:
    return FoldedReplicaProfile.of(base, group)


def replica_gpus(gpus: list[int], t: int, pp: int, dp: int) -> list[int]:
    """The simulated GPUs of replica 0: the first GPU of its tensor-parallel group in each of the ``pp`` stages
    (stage s holds the ``dp · t`` consecutive GPUs from ``s · dp · t``, Megatron-LM's order)."""
    return [gpus[s * dp * t] for s in range(pp)]


def group_from(link: Callable[[int, int], tuple[float, float]], same_node: Callable[[int, int], bool],
               ranks: list[int]) -> DPGroup:
    """The :class:`DPGroup` of ``ranks`` (GPU indices, the first's node first): ``link(a, b)`` gives (alpha,
    beta) from a to b. A group that ends part-way into a node counts that node whole."""
    dp = len(ranks)
    per_node = max(1, sum(1 for r in ranks if same_node(ranks[0], r)))
    nodes = -(-dp // per_node)
    intra = link(ranks[0], ranks[1]) if per_node > 1 else (0.0, 0.0)
    inter = link(ranks[0], ranks[per_node]) if nodes > 1 else (0.0, 0.0)
    return DPGroup(dp, per_node, nodes, intra, inter)
