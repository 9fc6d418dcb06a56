"""The textbook step and bubble of each pipeline schedule: p equal stages, free transfers, m micro-batches.

``t_f`` and ``t_b`` are a whole stage's forward and backward times per micro-batch, ``t_w`` the
weight-gradient part of ``t_b`` (zb-h1's W; the rest, t_B = t_b - t_w, is the input gradient), ``v``
the virtual stages per device of interleaved 1F1B. The bubble is the time each stage sits idle in
one step (its share of the step is the bubble fraction). The simulator reproduces these exactly in
that setting (tests/test_pipeline_schedules.py, tests/test_toy_pipeline.py):

* gpipe, 1f1b: bubble (p - 1)(t_f + t_b) (GPipe, Huang et al. 2019; PipeDream-flush, Narayanan et al. 2021);
* interleaved-1f1b: (p - 1)(t_f + t_b) / v, m a multiple of p (Megatron-LM, Narayanan et al. 2021);
* zb-h1: (p - 1)(t_f + t_B - t_W), when t_W <= t_f and t_W <= t_B (Qi et al. 2023);
* thesis: one whole batch, no micro-batches: gpipe's with m = 1.

Every step adds the weight update ``t_u`` once, after the last backward.
"""

from __future__ import annotations

from ..base.errors import InputError

FORMULAS = {"thesis": "(p − 1)(t_f + t_b), m = 1", "gpipe": "(p − 1)(t_f + t_b)", "1f1b": "(p − 1)(t_f + t_b)",
            "interleaved-1f1b": "(p − 1)(t_f + t_b) / V", "zb-h1": "(p − 1)(t_f + t_B − t_W)"}


def bubble_time(schedule: str, p: int, t_f: float, t_b: float, *, v: int = 1, t_w: float = 0.0) -> float:
    """Seconds each of p equal stages is idle in one step."""
    if schedule in ("thesis", "gpipe", "1f1b"):
        return (p - 1) * (t_f + t_b)
    if schedule == "interleaved-1f1b":
        return (p - 1) * (t_f + t_b) / v
    if schedule == "zb-h1":
        return (p - 1) * (t_f + (t_b - t_w) - t_w)
    raise InputError(f"unknown schedule {schedule!r}", field="schedule")


def step_time(schedule: str, p: int, m: int, t_f: float, t_b: float, *, v: int = 1, t_w: float = 0.0,
              t_u: float = 0.0) -> float:
    """One step: every micro-batch's work on a stage, the stage's bubble, the weight update."""
    m = 1 if schedule == "thesis" else m
    return m * (t_f + t_b) + bubble_time(schedule, p, t_f, t_b, v=v, t_w=t_w) + t_u


def bubble_fraction(schedule: str, p: int, m: int, t_f: float, t_b: float, *, v: int = 1,
                    t_w: float = 0.0) -> float:
    """The bubble's share of the forward-backward part of the step (the update left out): for gpipe and
    1f1b (p - 1)/(m + p - 1), whatever t_f and t_b."""
    bubble = bubble_time(schedule, p, t_f, t_b, v=v, t_w=t_w)
    total = (1 if schedule == "thesis" else m) * (t_f + t_b) + bubble
    return bubble / total if total > 0 else 0.0


def holds(schedule: str, p: int, m: int, t_f: float, t_b: float, *, t_w: float = 0.0) -> str:
    """Why the closed form may not be exact for these numbers ("" when it is)."""
    if schedule == "interleaved-1f1b" and m % p:
        return f"the interleaved closed form assumes m a multiple of p ({m} micro-batches, {p} stages)"
    if schedule == "zb-h1" and t_w > min(t_f, t_b - t_w) + 1e-15:
        return "the ZB-H1 closed form assumes t_W ≤ t_f and t_W ≤ t_B"
    return ""
