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
A plan whose replicas are all simulated (batch splits) is charged the same collective on each shard's update
(:class:`DataParallelProfile` with ``folded=False``), so a plan's step does not depend on folding.
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


def _scale(scale: tuple[tuple[str, float], ...], name: str) -> float:
    return next((m for n, m in scale if n == name), 1.0)


@dataclass(frozen=True)
class DataParallelProfile(RooflineProfile):
    """The default roofline for a plan of ``group.ranks`` data-parallel replicas: each op's update also
    reduces its gradients over the group by the collective model (the one model of a plan, folded or not).

    ``folded``: one replica is simulated, so every op's update carries its collective and ZeRO partitions the
    training state and the update over the group; otherwise the replicas are batch splits, whose shards'
    updates carry it (:meth:`batch_gradient_seconds`, read by ``simulate.shards``: no ring of messages then).
    A rank's links are its GPU's own: ``nvl-<gpu>`` inside the node, ``ib-<gpu>`` (its rail) across nodes, so a
    what-if that scales those channels (``link_scale``, the multipliers by channel name) scales the group's
    beta, the slowest member's for a batch split."""

    group: DPGroup | None = field(default=None, compare=False)
    folded: bool = True
    link_scale: tuple[tuple[str, float], ...] = ()

    @classmethod
    def of(cls, base: RooflineProfile, group: DPGroup, folded: bool = True) -> "DataParallelProfile":
        return cls(**{f.name: getattr(base, f.name) for f in fields(base)}, group=group, folded=folded)

    @property
    def replicas(self) -> int:
        """Replicas one simulated op stands for (memory_parts): the group when folded, else 1."""
        return self.group.ranks if self.group and self.folded else 1

    def with_link_scale(self, scale: dict[str, float]) -> "DataParallelProfile":
        """The same profile with its links' bandwidths multiplied by ``scale`` (channel name -> multiplier)."""
        from dataclasses import replace

        return replace(self, link_scale=tuple(sorted((n, float(m)) for n, m in scale.items() if m != 1.0)))

    def group_for(self, names: list[str]) -> DPGroup | None:
        """The group as the GPUs ``names`` run it: beta divided by the smallest multiplier of their channels."""
        g = self.group
        if g is None or not self.link_scale:
            return g
        near = min(_scale(self.link_scale, f"nvl-{n}") for n in names)
        far = min(_scale(self.link_scale, f"ib-{n}") for n in names)
        return DPGroup(g.ranks, g.per_node, g.nodes, (g.intra[0], g.intra[1] / near), (g.inter[0], g.inter[1] / far))

    def gradient_seconds(self, graph: Graph, names: list[str] | None = None) -> np.ndarray:
        """[ops] seconds of each op's gradient collective over the group (0 for an op without weights), on the
        links of the GPUs ``names`` (the unscaled links when None)."""
        group = self.group_for(names or [])
        kind = gradient_kind(self.zero)
        return np.array([group.time(kind, float(op.param_bytes)) if group else 0.0 for op in graph.ops])

    def link_seconds(self, graph: Graph, devices: DeviceGraph) -> np.ndarray:
        """[ops, devices] seconds of ``arrays().update`` that are communication (a what-if's device speed
        leaves them alone)."""
        if not self.folded:
            return np.zeros((len(graph), len(devices.devices)))
        if not self.link_scale:  # every GPU's links alike: one column
            return np.repeat(self.gradient_seconds(graph)[:, None], len(devices.devices), axis=1)
        return np.stack([self.gradient_seconds(graph, [d.name]) for d in devices.devices], axis=1)

    def batch_gradient_seconds(self, graph: Graph, devices: DeviceGraph, split) -> np.ndarray | None:
        """[ops] seconds a batch shard's update over ``split``'s devices adds (its group's collective; the
        group's shape from the plan, one stage's like another's), None when the replicas are folded."""
        if self.folded:
            return None
        return self.gradient_seconds(graph, [devices.devices[d].name for d in split.devices])

    def arrays(self, graph: Graph, devices: DeviceGraph) -> CostArrays:
        from dataclasses import replace

        a = super().arrays(graph, devices)
        if not self.folded:
            return a
        k = self.replicas
        update = a.update / (k if self.zero >= 1 else 1) + self.link_seconds(graph, devices)
        return replace(a, update=update,
                       weight_copies=resident_copies(self.optimizer, graph.precision, self.zero, k))


def fold_profile(base: RooflineProfile, group: DPGroup, folded: bool = True) -> DataParallelProfile:
    return DataParallelProfile.of(base, group, folded)


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
