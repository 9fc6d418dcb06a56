"""A pipeline to teach with: p equal stages, chosen forward, backward and update times, no network.

The stages are simulated by the same simulator and schedules as real placements (so what the
lecture shows is what the tool computes), on p identical devices with one link per ordered pair.
Under interleaved 1F1B each stage is V chunks placed round-robin (chunk c on device c mod p); under
ZB-H1 ``t_w`` of each backward is the weight gradient (W), the rest the input gradient. With free
transfers the step is the schedule's closed form (:mod:`.closed_forms`); a transfer time per hop
shows how communication widens the bubble beyond the textbook.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..model.devices import Channel, Device, DeviceGraph
from ..base.errors import InputError
from ..model.graph import Graph, Op
from .closed_forms import bubble_time, step_time
from .pipeline import ScheduleRun, run_schedule

BANDWIDTH = 1e9  # bytes/s of every toy link: a hop of ``transfer`` seconds carries transfer * 1e9 bytes


@dataclass(frozen=True)
class Toy:
    """p equal stages, m micro-batches; t_f, t_b per micro-batch and stage (t_w of t_b the weight gradient),
    t_u per stage; V chunks per stage for interleaved 1F1B; seconds."""

    p: int
    m: int
    t_f: float
    t_b: float
    t_u: float = 0.0
    transfer: float = 0.0  # one activation (and its gradient) between neighbouring stages
    v: int = 1
    t_w: float = 0.0

    def check(self) -> "Toy":
        for name, top in (("p", 64), ("m", 64), ("v", 16)):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or not 1 <= v <= top:
                raise InputError(f"{name} must be a whole number from 1 to {top}, got {v!r}", field=name)
        for name in ("t_f", "t_b", "t_u", "transfer", "t_w"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and 0 <= v <= 3600):
                raise InputError(f"{name} must be between 0 and 3600 seconds, got {v!r}", field=name)
        if self.t_f + self.t_b <= 0:
            raise InputError("a stage needs some work: t_f + t_b must be positive", field="t_f")
        if self.t_w > self.t_b:
            raise InputError(f"the weight gradient t_W ({self.t_w:g} s) is part of the backward t_b ({self.t_b:g} s)",
                             field="t_w", fix="Give t_W at most t_b")
        return self


def closed_form_step(p: int, m: int, t_f: float, t_b: float, t_u: float = 0.0, *, schedule: str = "gpipe",
                     v: int = 1, t_w: float = 0.0) -> float:
    """The schedule's step with p equal stages and free transfers; GPipe's and 1F1B's (m + p - 1)(t_f + t_b) + t_u."""
    return step_time(schedule, p, m, t_f, t_b, v=v, t_w=t_w, t_u=t_u)


def closed_form_bubble(p: int, m: int, *, schedule: str = "gpipe", t_f: float = 1.0, t_b: float = 2.0, v: int = 1,
                       t_w: float = 0.0) -> float:
    """The share of the forward-backward part a stage is idle; GPipe's and 1F1B's (p - 1)/(m + p - 1)."""
    from .closed_forms import bubble_fraction
    return bubble_fraction(schedule, p, m, t_f, t_b, v=v, t_w=t_w)


def toy_network(toy: Toy, schedule: str = "gpipe") -> tuple[Graph, DeviceGraph, np.ndarray]:
    """The stages (V chunks round-robin under interleaved 1F1B) as a chain of ops, the identical devices, and
    the placement. Times are given for the whole batch (m micro-batches) and scale down per micro-batch."""
    toy.check()
    v = toy.v if schedule == "interleaved-1f1b" else 1
    n = toy.p * v
    share = {"bwd_flops": 1.0, "bwd_weight_flops": toy.t_w / toy.t_b if toy.t_b > 0 else 0.0}
    ops = [Op(name=f"stage{c}" if v == 1 else f"chunk{c}", kind="stage",
              inputs=(((f"stage{c - 1}" if v == 1 else f"chunk{c - 1}"),) if c else ()),
              output_bytes=toy.transfer * BANDWIDTH * toy.m if c < n - 1 else 0.0,
              param_bytes=1.0 if toy.t_u > 0 else 0.0,
              times={"gpu": {"fwd": toy.t_f / v * toy.m, "bwd": toy.t_b / v * toy.m,
                             "update": toy.t_u if c < toy.p else 0.0}}, **share)
           for c in range(n)]
    graph = Graph("toy pipeline", ops, batch_size=toy.m)
    devs = [Device(f"stage {s}", "gpu", 1e12, 1e15, 1e12) for s in range(toy.p)]
    links = [Channel(f"{a.name}→{b.name}", BANDWIDTH, 0.0, ((a.name, b.name),))
             for a in devs for b in devs if a is not b]
    return graph, DeviceGraph("toy", devs, links), np.arange(n, dtype=np.int32) % toy.p


def run_toy(toy: Toy, schedule: str = "gpipe", trace: bool = True) -> ScheduleRun:
    graph, devices, placement = toy_network(toy, schedule)
    return run_schedule(graph, devices, placement, schedule, toy.m, trace=trace, comm_efficiency=1.0,
                        virtual_stages=toy.v)


def bubble_breakdown(toy: Toy, run: ScheduleRun) -> dict:
    """Where the stages' idle time goes: the textbook bubble of equal stages with free transfers, and what
    the transfers add. Seconds summed over the stages (each stage idles makespan - its busy time)."""
    r = run.evaluation.result
    idle = float(sum(r.makespan - r.busy[d] for d in run.stage_devices))
    v = toy.v if run.schedule == "interleaved-1f1b" else 1
    textbook = toy.p * bubble_time(run.schedule, toy.p, toy.t_f, toy.t_b, v=v, t_w=toy.t_w)
    extra = idle - textbook if abs(idle - textbook) > 1e-12 * max(idle, 1.0) else 0.0  # rounding is not a transfer
    return {"idle_s": idle, "textbook_s": textbook, "transfers_s": extra,
            "transfer_share": extra / idle if idle > 0 else 0.0}
