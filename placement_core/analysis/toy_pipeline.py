"""A pipeline to teach with: p equal stages, chosen forward, backward and update times, no network.

The stages are simulated by the same simulator and schedules as real placements (so what the
lecture shows is what the tool computes), on p identical devices with one link per ordered pair.
With free transfers the step is the closed form ``(m + p - 1)(t_f + t_b) + t_u`` and the bubble
``(p - 1)/(m + p - 1)`` of the forward-backward part; a transfer time per hop shows how
communication widens the bubble beyond the textbook.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..devices import Channel, Device, DeviceGraph
from ..errors import InputError
from ..graph import Graph, Op
from .pipeline import ScheduleRun, run_schedule

BANDWIDTH = 1e9  # bytes/s of every toy link: a hop of ``transfer`` seconds carries transfer * 1e9 bytes


@dataclass(frozen=True)
class Toy:
    """p equal stages, m micro-batches; t_f, t_b per micro-batch and stage, t_u per stage; seconds."""

    p: int
    m: int
    t_f: float
    t_b: float
    t_u: float = 0.0
    transfer: float = 0.0  # one activation (and its gradient) between neighbouring stages

    def check(self) -> "Toy":
        for name in ("p", "m"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or not 1 <= v <= 64:
                raise InputError(f"{name} must be a whole number from 1 to 64, got {v!r}", field=name)
        for name in ("t_f", "t_b", "t_u", "transfer"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 <= v <= 3600):
                raise InputError(f"{name} must be between 0 and 3600 seconds, got {v!r}", field=name)
        if self.t_f + self.t_b <= 0:
            raise InputError("a stage needs some work: t_f + t_b must be positive", field="t_f")
        return self


def closed_form_step(p: int, m: int, t_f: float, t_b: float, t_u: float = 0.0) -> float:
    """GPipe's and 1F1B's step with p equal stages and free transfers: (m + p - 1)(t_f + t_b) + t_u."""
    return (m + p - 1) * (t_f + t_b) + t_u


def closed_form_bubble(p: int, m: int) -> float:
    """The share of the forward-backward part a stage is idle: (p - 1)/(m + p - 1)."""
    return (p - 1) / (m + p - 1)


def toy_network(toy: Toy) -> tuple[Graph, DeviceGraph, np.ndarray]:
    """The stages as a chain of ops, the identical devices, and the placement of stage s on device s.

    Times are given for the whole batch (m micro-batches) and scale down to t_f, t_b per micro-batch."""
    toy.check()
    ops = [Op(name=f"stage{s}", kind="stage", inputs=(f"stage{s - 1}",) if s else (),
              output_bytes=toy.transfer * BANDWIDTH * toy.m if s < toy.p - 1 else 0.0,
              param_bytes=1.0 if toy.t_u > 0 else 0.0,
              times={"gpu": {"fwd": toy.t_f * toy.m, "bwd": toy.t_b * toy.m, "update": toy.t_u}})
           for s in range(toy.p)]
    graph = Graph("toy pipeline", ops, batch_size=toy.m)
    devs = [Device(f"stage {s}", "gpu", 1e12, 1e15, 1e12) for s in range(toy.p)]
    links = [Channel(f"{a.name}→{b.name}", BANDWIDTH, 0.0, ((a.name, b.name),))
             for a in devs for b in devs if a is not b]
    return graph, DeviceGraph("toy", devs, links), np.arange(toy.p, dtype=np.int32)


def run_toy(toy: Toy, schedule: str = "gpipe", trace: bool = True) -> ScheduleRun:
    graph, devices, placement = toy_network(toy)
    return run_schedule(graph, devices, placement, schedule, toy.m, trace=trace, comm_efficiency=1.0)


def bubble_breakdown(toy: Toy, run: ScheduleRun) -> dict:
    """Where the stages' idle time goes: the textbook bubble of equal stages with free transfers, and what
    the transfers add. Seconds summed over the stages (each stage idles makespan - its busy time)."""
    r = run.evaluation.result
    idle = float(sum(r.makespan - r.busy[d] for d in run.stage_devices))
    textbook = toy.p * (toy.p - 1) * (toy.t_f + toy.t_b)  # every stage idles (p - 1)(t_f + t_b)
    extra = idle - textbook if abs(idle - textbook) > 1e-12 * max(idle, 1.0) else 0.0  # rounding is not a transfer
    return {"idle_s": idle, "textbook_s": textbook, "transfers_s": extra,
            "transfer_share": extra / idle if idle > 0 else 0.0}
