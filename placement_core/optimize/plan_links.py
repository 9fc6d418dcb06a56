"""Where a plan's collectives run: the link between two GPUs and a data-parallel group's shape, read from a
materialised device graph (its routes and ``ib-`` channels) or from a :class:`Cluster` (by node number), so
folded and unfolded plans cost their collectives on the same figures."""

from __future__ import annotations

from dataclasses import replace

from ..base.errors import InputError
from ..formats.clusters import Cluster
from ..model.devices import DeviceGraph


def link_of(devices: DeviceGraph | Cluster, a: int, b: int, efficiency: float) -> tuple[float, float]:
    """(alpha, beta) of the link device ``a`` sends to ``b`` on: its latency and seconds per byte at the
    profile's communication efficiency, or at the link's measured bandwidth where it has one (what every
    transfer of the simulator reaches)."""
    if isinstance(devices, Cluster):
        return devices.link_cost(a, b, efficiency)
    if (a, b) not in devices.route:
        names = devices.names
        raise InputError(f"{names[a]} has no link to {names[b]}, which a collective of the plan needs",
                         field="--devices", fix="Connect every GPU of a group, or plan without that dimension")
    ch = devices.channels[devices.route[(a, b)]]
    return float(ch.latency), 1.0 / float(ch.rate(efficiency))


def by_hand_efficiency(devices: DeviceGraph | Cluster, efficiency: float | None) -> DeviceGraph | Cluster:
    """The devices a plan runs on: with a communication efficiency set by hand (``--comm-efficiency``) the
    links drop their measured rates, so that the efficiency applies to them."""
    if efficiency is None:
        return devices
    if isinstance(devices, Cluster):
        return replace(devices, measured=False) if devices.measured else devices
    return devices.without_measured_rates(links=True)


def same_node(devices: DeviceGraph | Cluster, a: int, b: int) -> bool:
    if isinstance(devices, Cluster):
        return devices.node_of(a) == devices.node_of(b)
    return a == b or ((a, b) in devices.route and not devices.channels[devices.route[(a, b)]].name.startswith("ib-"))


def dp_group(devices: DeviceGraph | Cluster, gpus: list[int], t: int, dp: int, efficiency: float):
    """The first stage's data-parallel group (every ``t``-th GPU of ``gpus``, ``dp`` of them) as a
    :class:`.plan_fold.DPGroup`: its ranks per node and a rank's links."""
    from .plan_fold import group_from

    ranks = gpus[::t][:dp]
    if dp < 2:
        return group_from(lambda a, b: (0.0, 0.0), lambda a, b: True, ranks)
    return group_from(lambda a, b: link_of(devices, a, b, efficiency), lambda a, b: same_node(devices, a, b),
                      ranks)


def node_size(devices: DeviceGraph | Cluster, gpus: list[int]) -> int:
    """How many of ``gpus`` share the first one's node: those it reaches without InfiniBand (every GPU of a
    device graph without ``ib-`` channels)."""
    first = gpus[0]
    if isinstance(devices, Cluster):
        return sum(1 for g in gpus if devices.node_of(g) == devices.node_of(first))
    return 1 + sum(1 for g in gpus[1:]
                   if (first, g) in devices.route
                   and not devices.channels[devices.route[(first, g)]].name.startswith("ib-"))
