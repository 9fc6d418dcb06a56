"""A placement as the stages of a real pipelined run (torch.distributed.pipelining), checked before any
worker starts.

A pipelined run needs the placement to be a sequence of chunks: each maximal run of ops (in topological
order) on one device is a chunk, and chunk k feeds chunk k + 1. GPipe, 1F1B and ZB-H1 run one chunk per
device; interleaved 1F1B runs V chunks per device, chunk c on the (c mod p)-th device in stage order
(torch's looped layout: ``--placement stages:PxV`` makes one). The network's input op goes with the
first chunk. Every device of the run must hold a stage.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..base.errors import InputError
from ..model.graph import Graph
from ..simulate.schedules import PIPELINES

# torch.distributed.pipelining's schedule for each of ours (one stage per rank but for interleaved 1F1B;
# ScheduleInterleavedZeroBubble with one stage per rank is ZB-H1: 1F1B's warm-up, W deferred by the rank)
TORCH_SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved-1f1b": "ScheduleInterleaved1F1B",
                   "zb-h1": "ScheduleInterleavedZeroBubble"}


@dataclass(frozen=True)
class PipelinePlan:
    schedule: str
    micro_batches: int
    order: tuple[str, ...]  # devices in stage order (pipeline rank r = order[r])
    chunks: tuple[tuple[str, tuple[str, ...]], ...]  # (device, ops) in data-flow order

    @property
    def stages(self) -> int:
        return len(self.order)

    @property
    def virtual_stages(self) -> int:
        return len(self.chunks) // len(self.order)

    def to_dict(self) -> dict:
        return {"schedule": self.schedule, "torch_schedule": TORCH_SCHEDULES[self.schedule],
                "micro_batches": self.micro_batches, "virtual_stages": self.virtual_stages,
                "stages": list(self.order), "chunks": [{"device": d, "ops": len(ops)} for d, ops in self.chunks]}


def pipeline_plan(graph: Graph, assignment: dict[str, str], schedule: str, micro_batches: int, batch_size: int,
                  devices: list[str]) -> PipelinePlan:
    """The chunks of ``assignment`` (op -> device name) for ``schedule``, or an InputError saying what to fix."""
    if schedule not in PIPELINES:
        raise InputError(f"unknown pipeline schedule {schedule!r}", field="--schedule", fix="Use " + ", ".join(PIPELINES))
    m = micro_batches
    if m < 1 or batch_size % m:
        raise InputError(f"{m} micro-batches do not split the batch of {batch_size} evenly", field="--micro-batches",
                         fix="Use a divisor of the batch size")
    split = next((op.name for op in graph.ops if isinstance(assignment.get(op.name), dict)), None)
    if split is not None:
        raise InputError(f"op {split!r} is split over several devices, and a pipelined run gives each op one stage",
                         field="--placement", fix="Give each op one device (e.g. stages:4), or leave --schedule out "
                                                  "to measure the split placement")
    ops = [op for op in graph.ops if not (op.kind == "input" and not op.inputs)]
    chunks: list[tuple[str, list[str]]] = []
    for op in ops:
        d = assignment[op.name]
        if not chunks or chunks[-1][0] != d:
            chunks.append((d, []))
        chunks[-1][1].append(op.name)
    for op in graph.ops:  # the input goes with the first chunk
        if op.kind == "input" and not op.inputs and chunks:
            chunks[0][1].insert(0, op.name)
    order = list(dict.fromkeys(d for d, _ in chunks))
    unused = [d for d in devices if d not in order]
    if unused:
        raise InputError(f"the placement leaves {', '.join(unused)} without a stage; a pipelined run gives every "
                         "device a stage", field="--placement",
                         fix=f"Use --placement stages:{len(devices)} (or fewer devices)")
    p = len(order)
    if schedule != "interleaved-1f1b":
        if len(chunks) != p:
            raise InputError(f"a {schedule} pipeline needs each device's ops in one run, in stage order; this "
                             f"placement has {len(chunks)} runs on {p} devices", field="--placement",
                             fix=f"Use --placement stages:{p}, or --schedule interleaved-1f1b for a placement whose "
                                 "devices hold several runs")
    else:
        bad = next((c for c, (d, _) in enumerate(chunks) if d != order[c % p]), None)
        if len(chunks) % p or len(chunks) == p or bad is not None:
            raise InputError(f"interleaved 1F1B needs V ≥ 2 chunks per device with chunk c on the (c mod {p})-th "
                             f"device; this placement has {len(chunks)} runs on {p} devices", field="--placement",
                             fix=f"Use --placement stages:{p}x2 (or stages:{p}xV)")
    rounds = max(1, m // p)
    if schedule in ("interleaved-1f1b", "zb-h1") and m % rounds:
        raise InputError(f"torch's {TORCH_SCHEDULES[schedule]} runs micro-batches in rounds of {p}: {m} is not a "
                         f"multiple of {rounds} rounds", field="--micro-batches",
                         fix=f"Use a multiple of {p}, or at most {p}")
    return PipelinePlan(schedule, m, tuple(order), tuple((d, tuple(o)) for d, o in chunks))
