"""What if a link were faster, or a device slower? Makespans under multipliers, and each link's sensitivity.

The multipliers act on the problem's cost arrays (op times per device, seconds per byte per channel),
so they apply to measured op times as much as to the roofline formulas, and nothing else about the
problem changes: same graph, placement, schedule and memory. A performance engineer hunting a
communication bottleneck reads which channel's bandwidth moves the makespan, and by how much.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Mapping

import numpy as np

from ..cost.profiles import curve_arrays
from ..base.errors import InputError
from ..problem import Problem


@dataclass(frozen=True)
class ScaledCosts:
    """Another profile's costs with devices ``speed`` times as fast and channels ``bandwidth`` times as wide."""

    base: object
    speed: tuple[float, ...]  # per device
    bandwidth: tuple[float, ...]  # per channel
    name: str = field(default="what-if")

    @property
    def comp_efficiency(self) -> float:
        return self.base.comp_efficiency

    @property
    def comm_efficiency(self) -> float:
        return self.base.comm_efficiency

    @property
    def optimizer(self) -> str:  # the training state a batch split's shards keep (simulate.shards) is the base's
        return getattr(self.base, "optimizer", "sgd")

    @property
    def zero(self) -> int:
        return getattr(self.base, "zero", 0)

    def _linked(self, devices):
        """The base profile with its own links scaled too: a cluster plan's data-parallel collective runs on
        the GPUs' channels (optimize.plan_fold), so scaling a channel scales it as it does a transfer."""
        if not hasattr(self.base, "with_link_scale"):
            return self.base
        return self.base.with_link_scale({c.name: m for c, m in zip(devices.channels, self.bandwidth)})

    def batch_gradient_seconds(self, graph, devices, split):
        """The base's data-parallel collective per batch shard, on the scaled links (simulate.shards)."""
        hook = getattr(self._linked(devices), "batch_gradient_seconds", None)
        return hook(graph, devices, split) if hook else None

    def arrays(self, graph, devices):
        base = self._linked(devices)
        a = base.arrays(graph, devices)
        speed = np.asarray(self.speed, dtype=float)
        # communication charged to the updates (a folded plan's collectives) does not run faster on a faster device
        comm = base.link_seconds(graph, devices) if hasattr(base, "link_seconds") else 0.0
        # a measured transfer curve: the time above its first point's (the latency) shrinks as the per-byte time
        curves = curve_arrays(devices, self.bandwidth) if a.curve_ptr is not None else {}
        return replace(a, fwd=a.fwd / speed, bwd=a.bwd / speed, update=(a.update - comm) / speed + comm,
                       ch_inv_rate=a.ch_inv_rate / np.asarray(self.bandwidth, dtype=float), **curves)


def _multipliers(names: list[str], given: Mapping[str, float] | None, what: str) -> tuple[float, ...]:
    given = dict(given or {})
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise InputError(f"no {what} named {unknown[0]!r}", field=what, fix="Use one of: " + ", ".join(names))
    for name, v in given.items():
        if not (isinstance(v, (int, float)) and 0 < v <= 1e6):
            raise InputError(f"the multiplier of {name} must be a positive number, got {v!r}", field=what)
    return tuple(float(given.get(n, 1.0)) for n in names)


def what_if_problem(problem: Problem, *, bandwidth: Mapping[str, float] | None = None,
                    speed: Mapping[str, float] | None = None) -> Problem:
    """The same problem with channel bandwidths and device speeds multiplied (1 = as they are)."""
    devices = problem.devices
    costs = ScaledCosts(problem.profile, _multipliers(devices.names, speed, "device"),
                        _multipliers([c.name for c in devices.channels], bandwidth, "channel"))
    return Problem(problem.graph, devices, profile=costs, settings=problem.settings, penalty=problem.penalty,
                   splits=problem.splits)


def what_if(problem: Problem, placement, *, bandwidth=None, speed=None) -> dict:
    """Makespan (and batch time) now and under the multipliers, with the difference."""
    before = problem.simulate(placement).result
    after = what_if_problem(problem, bandwidth=bandwidth, speed=speed).simulate(placement).result
    return {"makespan_s": before.makespan, "what_if_makespan_s": after.makespan,
            "delta_s": after.makespan - before.makespan, "batch_time_s": before.batch_time,
            "what_if_batch_time_s": after.batch_time}


def bandwidth_sensitivity(problem: Problem, placement, step: float = 0.01) -> list[dict]:
    """Per channel: ∂makespan/∂bandwidth by a forward difference of ``step`` (1 %), in seconds per (byte/s),
    and the makespan with that channel twice as wide. Channels that carry nothing have 0."""
    if not 0 < step < 1:
        raise InputError(f"the step must be between 0 and 1, got {step!r}", field="step")
    base = problem.simulate(placement).result
    rows = []
    for j, ch in enumerate(problem.devices.channels):
        if base.channel_bytes[j] == 0:
            rows.append({"channel": ch.name, "bytes": 0.0, "d_makespan_d_bandwidth": 0.0,
                         "makespan_2x_s": base.makespan, "saved_2x_s": 0.0})
            continue
        nudged = what_if_problem(problem, bandwidth={ch.name: 1 + step}).simulate(placement).result
        doubled = what_if_problem(problem, bandwidth={ch.name: 2.0}).simulate(placement).result
        rows.append({"channel": ch.name, "bytes": float(base.channel_bytes[j]),
                     "d_makespan_d_bandwidth": (nudged.makespan - base.makespan) / (step * ch.bandwidth),
                     "makespan_2x_s": doubled.makespan, "saved_2x_s": base.makespan - doubled.makespan})
    return rows
