"""Pipelined benchmarks: a placement's stages run by torch.distributed.pipelining on CPU ranks (gloo).

The driver side of :mod:`.pipeline_worker`: it checks the placement against the schedule
(:func:`..analysis.pipeline_stages.pipeline_plan`), starts one worker per device like every benchmark
(:mod:`.launcher`, :func:`.benchmark._run_items`: timeouts, crashes and out-of-memory end a worker, not
the caller) and adds what a pipeline measures: each rank's busy and idle time per step and the bubble,
the mean share of the step a rank waits.
"""

from __future__ import annotations

import statistics
import tempfile
from dataclasses import asdict
from pathlib import Path

from ..base.errors import InputError
from ..analysis.pipeline_stages import PipelinePlan
from .benchmark import BenchmarkResult, BenchmarkSettings
from .devspec import LocalDevice


def measured_bubble(result: BenchmarkResult) -> dict:
    """Per device the median busy and idle seconds of a step, and the bubble: per step, the mean over the
    ranks of the share of the step they wait, the median over the steps."""
    steps = result.steps_s
    names = list(result.busy_s)
    shares = [statistics.fmean((s - result.busy_s[d][i]) / s for d in names) for i, s in enumerate(steps) if s > 0]
    return {"bubble_fraction": statistics.median(shares) if shares else None,
            "busy_s": {d: statistics.median(b) for d, b in result.busy_s.items()},
            "idle_s": {d: statistics.median(s - b for s, b in zip(steps, result.busy_s[d])) for d in names}}


def benchmark_pipeline(source: str, input_shape, assignment: dict[str, str], devices: list[LocalDevice],
                       plan: PipelinePlan, *, batch_size: int, settings: BenchmarkSettings | None = None,
                       name: str | None = None, progress=None) -> BenchmarkResult:
    """Run ``plan`` (the chunks of ``assignment``, op -> device name) for real; one result."""
    import torch

    from .apply import check_assignment
    from .benchmark import _run_items
    from .devspec import check_available
    from .model_import import trace_model
    from .sources import load_model, parse_input_shape, parse_source

    settings = (settings or BenchmarkSettings()).check()
    check_available(devices)
    gpus = [d.name for d in devices if d.is_cuda]
    if gpus:
        raise InputError(f"pipelined runs use CPU ranks (gloo) here; {', '.join(gpus)} is a GPU", field="--devices",
                         fix="Use --devices cpu:N")
    if settings.rounds != 1:
        raise InputError("a pipelined run measures one placement: --rounds is for comparing several",
                         field="--rounds", fix="Leave --rounds out (or raise --steps)")
    shape = parse_input_shape(input_shape)
    src = parse_source(source)
    model = load_model(src, seed=settings.seed)
    traced = trace_model(model, shape, name=name or src.default_name)
    check_assignment(traced.graph, assignment)
    with tempfile.TemporaryDirectory(prefix="placement-state-") as tmp:
        state = Path(tmp) / "state.pt"
        torch.save(model.state_dict(), state)
        spec = {"mode": "pipeline", "runner": "ranks", "source": source, "seed": settings.seed,
                "input_shape": list(shape), "batch_size": int(batch_size), "state_dict": str(state),
                "devices": [asdict(d) for d in devices], "placements": [assignment], "steps": settings.steps,
                "warmup": settings.warmup, "memory_limit": settings.memory_limit, "comm_timeout": settings.timeout,
                "plan": {"schedule": plan.schedule, "micro_batches": plan.micro_batches, "order": list(plan.order),
                         "chunks": [{"device": d, "ops": list(ops)} for d, ops in plan.chunks]}}
        result = _run_items(spec, devices, "ranks", settings, 1, progress)[0]
    result.pipeline = {**plan.to_dict(), **(measured_bubble(result) if result.ok and result.busy_s else {})}
    return result
