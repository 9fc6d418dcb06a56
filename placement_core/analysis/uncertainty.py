"""How sure a simulated time is: an interval from the spread of the calibration's measurements.

A calibrated op time is a measurement, and ``placement calibrate`` records how much each one moved between
its rounds (``fwd_spread``, ``bwd_spread`` in the timing table: standard deviation over mean). A step is a
max-plus function of its op times (a critical path, queues, overlap), so that spread does not carry to the
step by a formula: op times are drawn again and the step simulated again. Each draw multiplies an op's
forward and backward time on a device by a lognormal factor of mean 1 and the op's relative spread,
independently per op and device (the rounds' disturbances are not shared between ops in the calibration
data, so nothing supports a common factor). Every placement compared sees the same draws, so a ranking
is a paired comparison: two placements are *indistinguishable* when the central interval of their
difference contains zero.

A problem without measured times (roofline formulas, a file's own op times) has no spread to draw from:
its intervals are ``None``, not a made-up width.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..base.errors import InputError
from ..cost.timings import AT, FIXED, SPREAD
from ..problem import Problem

SAMPLES = 64  # draws of the op times: a 90 % interval's ends to within about a draw's resolution
LEVEL = 0.9


@dataclass(frozen=True)
class Interval:
    """A simulated time (the point simulation, seconds) and the central ``level`` range of its draws."""

    point: float
    low: float
    high: float
    level: float
    samples: int

    def to_dict(self) -> dict:
        return {"point_s": self.point, "low_s": self.low, "high_s": self.high, "level": self.level,
                "samples": self.samples}


def has_spread(problem: Problem) -> bool:
    """Whether the problem's measured op times say how much they move (some op carries a spread)."""
    table = getattr(problem.profile, "timings", None) or {}
    return any(v.get(key, 0.0) > 0 for per_device in table.values() for v in per_device.values()
               for key in SPREAD.values())


def drawn_table(table: dict, rng: np.random.Generator) -> dict:
    """One draw of a timing table: every phase with a spread (and its fixed part and its times at smaller
    batches, which the same measurement gave) times a lognormal factor of mean 1 and that spread."""
    out = {}
    for op, per_device in table.items():
        out[op] = {}
        for dev, v in per_device.items():
            w = dict(v)
            for ph, key in SPREAD.items():
                s = float(v.get(key, 0.0))
                if s <= 0 or ph not in v:
                    continue
                sigma = np.sqrt(np.log1p(s * s))  # a lognormal whose sd / mean is s
                f = float(np.exp(sigma * rng.standard_normal() - sigma * sigma / 2))
                w[ph] = v[ph] * f
                if FIXED[ph] in v:
                    w[FIXED[ph]] = v[FIXED[ph]] * f
                if AT[ph] in v:
                    w[AT[ph]] = {k: t * f for k, t in v[AT[ph]].items()}
            out[op][dev] = w
    return out


def draws(problem: Problem, placements, samples: int = SAMPLES, seed: int = 0) -> np.ndarray:
    """``(samples, k)`` objectives of the k placements under the same ``samples`` draws of the op times."""
    if not isinstance(samples, int) or isinstance(samples, bool) or not 2 <= samples <= 10_000:
        raise InputError(f"samples must be an integer from 2 to 10000, got {samples!r}", field="samples")
    if not has_spread(problem):
        raise InputError("the problem's op times carry no spread to draw from", field="timings",
                         fix="Use the timings of placement calibrate (it records how much each op time moved "
                             "between its rounds), or calibrate again with --rounds 2 or more")
    batch = problem.checked(np.atleast_2d(np.asarray(placements)))
    rng = np.random.default_rng([seed, 0x5EED])
    table = problem.profile.timings
    out = np.empty((samples, len(batch)))
    for s in range(samples):
        profile = replace(problem.profile, timings=drawn_table(table, rng))
        drawn = Problem(problem.graph, problem.devices, profile=profile, settings=problem.settings,
                        penalty=problem.penalty, splits=problem.splits)
        out[s] = drawn.evaluate_valid(batch)
    return out


@dataclass(frozen=True)
class Spread:
    """What the draws say about a batch of placements: their point simulations, each one's ``level`` interval
    (``low``, ``high``), and which pairs cannot be told apart (``same``, :func:`indistinguishable`)."""

    point: np.ndarray
    low: np.ndarray
    high: np.ndarray
    same: np.ndarray


def spread(problem: Problem, placements, samples: int = SAMPLES, level: float = LEVEL, seed: int = 0) -> Spread:
    """The draws of :func:`draws` summed up for the k placements (every view of the intervals reads this).

    An interval always holds its point: where placements run branches side by side, a step is a maximum of
    paths, and mean-1 draws push a maximum up (Jensen), so the draws' central range can sit wholly above the
    point simulation; the point (every factor 1) is one outcome of the draws, and an interval that excludes it
    would draw error bars of negative length."""
    batch = problem.checked(np.atleast_2d(np.asarray(placements)))
    d = draws(problem, batch, samples, seed)
    lo, hi = np.quantile(d, [(1 - level) / 2, (1 + level) / 2], axis=0)
    point = problem.evaluate_valid(batch)
    return Spread(point, np.minimum(lo, point), np.maximum(hi, point), indistinguishable(d, level))


def intervals(problem: Problem, placements, samples: int = SAMPLES, level: float = LEVEL,
              seed: int = 0) -> list[Interval] | None:
    """The interval of each placement's objective, or None when the problem has no spread."""
    if not 0 < level < 1:
        raise InputError(f"level must be between 0 and 1, got {level!r}", field="level")
    if not has_spread(problem):
        return None
    sp = spread(problem, placements, samples, level, seed)
    return [Interval(float(p), float(a), float(b), level, samples) for p, a, b in zip(sp.point, sp.low, sp.high)]


def indistinguishable(d: np.ndarray, level: float = LEVEL) -> np.ndarray:
    """``(k, k)`` booleans from draws ``(samples, k)``: True where the central ``level`` interval of the
    paired difference of two placements contains zero (the diagonal is True)."""
    k = d.shape[1]
    out = np.ones((k, k), dtype=bool)
    for i in range(k):
        for j in range(i + 1, k):
            lo, hi = np.quantile(d[:, j] - d[:, i], [(1 - level) / 2, (1 + level) / 2])
            out[i, j] = out[j, i] = bool(lo <= 0 <= hi)
    return out


def ranking(problem: Problem, placements, labels=None, samples: int = SAMPLES, level: float = LEVEL,
            seed: int = 0) -> list[dict] | None:
    """The placements fastest first by their point simulation, each with its interval and whether it is
    distinguishable from the one ranked just above it; None when the problem has no spread."""
    if not has_spread(problem):
        return None
    batch = problem.checked(np.atleast_2d(np.asarray(placements)))
    labels = list(labels) if labels is not None else [f"placement {i + 1}" for i in range(len(batch))]
    d = draws(problem, batch, samples, seed)
    point = problem.evaluate_valid(batch)
    same = indistinguishable(d, level)
    lo, hi = np.quantile(d, [(1 - level) / 2, (1 + level) / 2], axis=0)
    order = np.argsort(point, kind="stable")  # (ranking reads the draws themselves for faster_share)
    rows = []
    for rank, i in enumerate(order):
        above = order[rank - 1] if rank else None
        rows.append({"rank": rank + 1, "placement": labels[i], "simulated_s": float(point[i]),
                     "low_s": float(lo[i]), "high_s": float(hi[i]),
                     "tied_with_above": bool(above is not None and same[i, above]),
                     "faster_share": None if above is None else float(np.mean(d[:, i] < d[:, above]))})
    return rows
