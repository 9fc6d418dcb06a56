"""Numbers behind the dashboard's panels: per-device and per-channel load, the largest
transfers, a placement's summary, comparisons, and simulated-vs-measured agreement."""

from __future__ import annotations

import math

import numpy as np

from ..problem import Evaluation, Problem
from ..simulate import SimResult, TraceEvent


def busy_intervals(trace: list[TraceEvent], resource: str) -> list[tuple[float, float]]:
    return sorted((e.start, e.end) for e in trace if e.resource == resource)


def _gaps(intervals: list[tuple[float, float]], horizon: float) -> list[float]:
    """Idle stretches between 0 and ``horizon`` not covered by any interval."""
    gaps, t = [], 0.0
    for s, e in intervals:
        if s > t:
            gaps.append(s - t)
        t = max(t, e)
    if horizon > t:
        gaps.append(horizon - t)
    return gaps


def device_stats(result: SimResult, device_names, capacity, trace: list[TraceEvent] | None = None) -> list[dict]:
    """Per device: busy and idle seconds, utilisation, peak memory against capacity.

    With a trace, also the longest idle stretch (a pipeline bubble shows up here).
    """
    rows = []
    span = result.makespan
    for d, name in enumerate(device_names):
        busy = float(result.busy[d])
        row = {"device": name, "busy_s": busy, "idle_s": max(span - busy, 0.0),
               "utilisation": busy / span if span > 0 else 0.0,
               "peak_memory": float(result.peak_memory[d]), "capacity": float(capacity[d]),
               "overflow": max(float(result.peak_memory[d]) - float(capacity[d]), 0.0)}
        if trace is not None:
            gaps = _gaps(busy_intervals(trace, name), span)
            row["longest_idle_s"] = max(gaps, default=0.0)
        rows.append(row)
    return rows


def channel_stats(result: SimResult, channel_names, trace: list[TraceEvent] | None = None) -> list[dict]:
    """Per channel: bytes carried, busy seconds, utilisation (busy / makespan), transfers, throughput."""
    counts: dict[str, int] = {}
    for e in trace or []:
        if e.kind == "transfer":
            counts[e.resource] = counts.get(e.resource, 0) + 1
    rows = []
    for c, name in enumerate(channel_names):
        busy = float(result.channel_busy[c])
        nbytes = float(result.channel_bytes[c])
        row = {"channel": name, "bytes": nbytes, "busy_s": busy,
               "utilisation": busy / result.makespan if result.makespan > 0 else 0.0,
               "throughput": nbytes / busy if busy > 0 else 0.0}
        if trace is not None:
            row["transfers"] = counts.get(name, 0)
        rows.append(row)
    return rows


def largest_transfers(trace: list[TraceEvent], k: int = 10) -> list[dict]:
    """The ``k`` transfers that moved the most bytes (ties: the longer one first)."""
    xs = [e for e in trace if e.kind == "transfer"]
    xs.sort(key=lambda e: (-e.bytes, -(e.end - e.start), e.start))
    return [{"tensor": e.op, "kind": "activation" if e.phase == "fwd" else "gradients", "batch": e.batch,
             "channel": e.resource, "src": e.src, "dst": e.dst, "bytes": e.bytes, "start_s": e.start,
             "duration_s": e.end - e.start} for e in xs[:k]]


def cross_device_edges(problem: Problem, placement) -> int:
    p = np.asarray(placement)
    return sum(1 for a, b, _ in problem.graph.edges() if p[a] != p[b])


def placement_summary(problem: Problem, placement, evaluation: Evaluation | None = None) -> dict:
    """Objective, time, memory fit, transfers, cross-device edges and ops per device of one placement."""
    ev = evaluation or problem.simulate(placement)
    p = np.asarray(placement)
    r = ev.result
    counts = np.bincount(p[p < problem.n_devices], minlength=problem.n_devices)
    if problem.splits:  # a split op counts on each of its devices
        from ..model.sharding import gene_devices
        for g in p[p >= problem.n_devices].tolist():
            counts[list(gene_devices(int(g), problem.n_devices, problem.splits))] += 1
    return {
        "ops_split": int((p >= problem.n_devices).sum()),
        "objective_s": float(ev.objective),
        "batch_time_s": float(r.batch_time),
        "makespan_s": float(r.makespan),
        "feasible": bool(ev.feasible),
        "overflow_bytes": float(ev.overflow.sum()),
        "transfers": int(r.transfers),
        "bytes_moved": float(r.channel_bytes.sum()),
        "cross_device_edges": cross_device_edges(problem, p),
        "devices_used": int((counts > 0).sum()),
        "ops_per_device": {name: int(n) for name, n in zip(problem.devices.names, counts)},
        "busy_s": {name: float(b) for name, b in zip(problem.devices.names, r.busy)},
        "peak_memory": {name: float(m) for name, m in zip(problem.devices.names, r.peak_memory)},
        "channel_bytes": {c.name: float(b) for c, b in zip(problem.devices.channels, r.channel_bytes)},
    }


def compare_placements(problem: Problem, a, b) -> tuple[list[dict], dict]:
    """Side-by-side rows (metric, unit, a, b, b - a) and how the assignments differ."""
    sa, sb = placement_summary(problem, a), placement_summary(problem, b)
    rows = []

    def add(metric, unit, x, y):
        rows.append({"metric": metric, "unit": unit, "a": x, "b": y, "difference": y - x})

    add("objective", "s", sa["objective_s"], sb["objective_s"])
    add("time per batch", "s", sa["batch_time_s"], sb["batch_time_s"])
    add("memory overflow", "B", sa["overflow_bytes"], sb["overflow_bytes"])
    add("transfers", "", sa["transfers"], sb["transfers"])
    add("bytes moved", "B", sa["bytes_moved"], sb["bytes_moved"])
    add("cross-device edges", "", sa["cross_device_edges"], sb["cross_device_edges"])
    add("devices used", "", sa["devices_used"], sb["devices_used"])
    if problem.splits:
        add("ops split over several devices", "", sa["ops_split"], sb["ops_split"])
    for name in problem.devices.names:
        add(f"ops on {name}", "", sa["ops_per_device"][name], sb["ops_per_device"][name])
    for name in problem.devices.names:
        add(f"peak memory {name}", "B", sa["peak_memory"][name], sb["peak_memory"][name])
    pa, pb = np.asarray(a), np.asarray(b)
    moved = np.flatnonzero(pa != pb)
    diff = {"ops_moved": int(len(moved)), "ops": len(pa),
            "moved_names": [problem.graph.ops[i].name for i in moved]}
    return rows, diff


# -- simulated vs measured --------------------------------------------------------------------------

def pearson_r(x, y) -> float:
    """Pearson correlation; NaN with fewer than two points or no variance."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2:
        return math.nan
    dx, dy = x - x.mean(), y - y.mean()
    den = math.sqrt(float((dx * dx).sum()) * float((dy * dy).sum()))
    return float((dx * dy).sum()) / den if den > 0 else math.nan


def kendall_tau(x, y) -> float:
    """Kendall's tau-b (ties in either variable handled); NaN with fewer than two points."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(x)
    if n < 2:
        return math.nan
    concordant = discordant = ties_x = ties_y = 0
    for i in range(n):
        sx = np.sign(x[i + 1:] - x[i])
        sy = np.sign(y[i + 1:] - y[i])
        prod = sx * sy
        concordant += int((prod > 0).sum())
        discordant += int((prod < 0).sum())
        ties_x += int(((sx == 0) & (sy != 0)).sum())
        ties_y += int(((sy == 0) & (sx != 0)).sum())
    den = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / den if den > 0 else math.nan


def mape(predicted, measured) -> float:
    """Mean absolute percentage error of ``predicted`` against ``measured`` (in %)."""
    p, m = np.asarray(predicted, float), np.asarray(measured, float)
    return float(np.mean(np.abs(p - m) / m) * 100.0)


def linear_fit(x, y) -> tuple[float, float]:
    """Least-squares (slope, intercept) of y on x; NaNs when x has no spread."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) < 2 or float(np.ptp(x)) == 0:
        return math.nan, math.nan
    dx = x - x.mean()
    slope = float((dx * (y - y.mean())).sum() / (dx * dx).sum())
    return slope, float(y.mean() - slope * x.mean())


def correlation_stats(simulated, measured) -> dict:
    """How well the simulator's numbers agree with measurements (thesis E5)."""
    slope, intercept = linear_fit(simulated, measured)
    return {"n": len(simulated), "pearson_r": pearson_r(simulated, measured),
            "kendall_tau": kendall_tau(simulated, measured), "slope": slope, "intercept": intercept}


# -- over seeds ---------------------------------------------------------------------------------------

def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (modified Lentz)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1.0) / (a + b + 2.0):  # the fraction converges fast on this side only
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * f


def student_t_quantile(p: float, dof: int) -> float:
    """The p-quantile (0.5 < p < 1) of Student's t with ``dof`` degrees of freedom, by bisection on its CDF.

    Exact to about 1e-12, so a 95 % interval over 11 to 30 seeds is as wide as it should be (a table that
    stops at ten values and then uses the normal's 1.96 makes it 4 to 8 % too narrow there)."""
    if not 0.5 < p < 1.0 or dof < 1:
        raise ValueError("student_t_quantile needs 0.5 < p < 1 and dof >= 1")
    lo, hi = 0.0, 1.0
    upper = lambda t: 0.5 * _betainc(dof / 2.0, 0.5, dof / (dof + t * t))  # noqa: E731  P(T > t)
    while upper(hi) > 1.0 - p:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if upper(mid) > 1.0 - p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-13 * hi:
            break
    return 0.5 * (lo + hi)


def mean_ci(values) -> tuple[float, float]:
    """Mean and the half-width of its 95 % confidence interval (Student's t with n - 1 degrees of freedom)."""
    values = [float(v) for v in values]
    m = sum(values) / len(values)
    if len(values) < 2:
        return m, 0.0
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))
    return m, student_t_quantile(0.975, len(values) - 1) * sd / math.sqrt(len(values))
