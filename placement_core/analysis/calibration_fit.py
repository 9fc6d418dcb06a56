"""Turning calibration measurements into a device graph and a timing table (no torch).

The worker processes (:mod:`placement_core.torch.calibrate`) measure; this module fits:
link latency and bandwidth from ping-pong times (least squares on relative error) and
the link's measured transfer curve (the size-dependent model the simulator uses),
each figure's least disturbed round, op times scaled to the measured single-device step,
and the CPU devices' per-message overhead that makes the simulator reproduce whole
steps. Device and channel figures are stored divided by the default efficiencies
(η_comp 0.9, η_comm 0.25), so the default profile reproduces the measured rates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..cost.profiles import RooflineProfile
from ..model.devices import Channel, Device, DeviceGraph
from ..base.errors import InputError
from ..cost.timings import FORMAT as TIMINGS_FORMAT
from ..cost.timings import AT, FIXED, MAX_SPREAD, SPREAD, check_timings

SIZES = tuple(int(10 ** e) for e in (3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7, 7.5, 8))
ETA_COMP = RooflineProfile.comp_efficiency
ETA_COMM = RooflineProfile.comm_efficiency


@dataclass(frozen=True)
class CalibrationSettings:
    sizes: tuple[int, ...] = SIZES  # transfer sizes in bytes
    steps: int = 10  # whole training steps timed per device
    min_time: float = 0.05  # seconds of repeats per op and phase (at least min_reps)
    min_reps: int = 3
    max_reps: int = 50
    reconcile: str = "scale"  # "scale" op times to the measured step, or "none"
    rounds: int = 3  # device measurements repeated, devices taking turns; the fastest round of each op counts
    fit_placements: int = 6  # whole-step runs to fit the CPU devices' message overhead to (0: none)
    fit_rounds: int = 2
    fit_steps: int = 3
    # which link model the device graph keeps: the measured transfer curve, latency + bytes / bandwidth
    # ("affine"), or "auto": whichever reproduces the whole-step runs better once the overhead is fitted
    # (on CPU ranks the ping-pong's delayed-ack hump is not paid by a step's streamed sends: docs/e5.md)
    link_model: str = "auto"
    # devices of one kind with the same hardware and core count (cpu:N ranks, GPUs of one model) are the same
    # machine: each figure is taken from the fastest of them, as from the fastest round (a disturbed
    # measurement only ever reads slow), so noise cannot make identical devices look different
    pool_identical: bool = True
    # every op measured again at half the batch, for the part of its time that does not shrink with the
    # batch (timings.FIXED): what a micro-batch or a batch shard of it costs (docs/torch.md)
    batch_fit: bool = True
    # all-reduce, all-gather and reduce-scatter over all ranks at these sizes (bytes), alone and while every
    # rank computes, and ranks computing at once against alone (a shared resource); () : neither
    collective_sizes: tuple[int, ...] = (4096, 65536, 1 << 20, 8 << 20, 32 << 20)
    seed: int = 0
    timeout: float = 1800.0


@dataclass
class Calibration:
    devices: DeviceGraph
    timings: dict  # placement-timings/1
    report: dict = field(default_factory=dict)  # per device and channel: what was measured



def fit_placements(n_ops: int, n_devices: int, k: int, seed: int):
    """Calibration placements: random contiguous zones and random mixes, from their own random stream."""
    import numpy as np
    rng = np.random.default_rng([seed, 0xCA1B])
    out = []
    for j in range(k):
        if j % 2 == 0:  # contiguous zones: few to many crossings
            zones = 2 + (j * 3) % max(2, min(12, n_ops - 1))
            cuts = np.sort(rng.choice(np.arange(1, n_ops), size=min(zones - 1, n_ops - 1), replace=False))
            x = np.zeros(n_ops, dtype=np.int32)
            for z, (a, b) in enumerate(zip([0, *cuts], [*cuts, n_ops])):
                x[a:b] = z % n_devices
        else:  # each op away from device 0 with a probability: many scattered crossings
            p = (0.1, 0.3, 0.5)[(j // 2) % 3]
            x = np.where(rng.random(n_ops) < p, rng.integers(1, n_devices, n_ops), 0).astype(np.int32)
        out.append(x)
    return out


LINK_MODELS = ("auto", "curve", "affine")


def fit_message_overhead(cal: Calibration, graph, overhead_devices: list[str], runs,
                         link_model: str = "curve") -> tuple[DeviceGraph, dict]:
    """The device graph with ``message_overhead`` on ``overhead_devices`` set to the value that minimises
    the squared log error of simulated against measured step times (``runs``: (placement, measured seconds,
    messages per step)), and the fit's record. A grid over 0 and 1 us .. 100 ms, then golden-section search
    between the best grid point's neighbours; the result is never worse than the best grid point, and so
    never worse than no overhead at all.

    ``link_model``: "curve" keeps the channels as they are; "affine" drops their transfer curves (latency +
    bytes / bandwidth); "auto" fits both and keeps the one with the smaller error (a tie keeps the curve).
    Channels without a curve have one model only."""
    if link_model not in LINK_MODELS:
        raise InputError(f"unknown link model {link_model!r}", field="--link-model",
                         fix="Use one of: " + ", ".join(LINK_MODELS))
    has_curve = any(c.transfer_curve for c in cal.devices.channels)
    models = ["curve", "affine"] if (link_model == "auto" and has_curve) else \
        ["affine" if (link_model == "affine" and has_curve) else "curve"]
    fits = {m: _fit_overhead(cal.devices if m == "curve" else without_curves(cal.devices), cal.timings, graph,
                             overhead_devices, runs) for m in models}
    chosen = min(models, key=lambda m: (fits[m][1]["log_error_after"], models.index(m)))
    fitted, fit = fits[chosen]
    fit = dict(fit, link_model=chosen if has_curve else "affine")
    if len(models) > 1:
        fit["link_models"] = {m: {"message_overhead_s": f["message_overhead_s"], "log_error_after": f["log_error_after"]}
                              for m, (_, f) in fits.items()}
    return fitted, fit


def without_curves(devices: DeviceGraph) -> DeviceGraph:
    """A copy whose channels use latency + bytes / bandwidth (their transfer curves dropped)."""
    from dataclasses import replace
    return DeviceGraph(devices.name, list(devices.devices), [replace(c, transfer_curve=()) for c in devices.channels],
                       source=devices.source, collectives=devices.collectives, shared=devices.shared)


def _fit_overhead(devices: DeviceGraph, timings: dict, graph, overhead_devices: list[str], runs):
    import numpy as np

    from ..problem import Problem
    from ..cost.timings import timing_table

    table = timing_table(timings, graph)

    def error(overhead: float) -> float:
        problem = Problem(graph, with_message_overhead(devices, overhead_devices, overhead), timings=table)
        return sum((math.log(problem.simulate(x).result.batch_time) - math.log(t)) ** 2 for x, t, _ in runs)

    grid = np.concatenate([[0.0], np.geomspace(1e-6, 0.1, 61)])
    errors = [error(float(v)) for v in grid]
    k = int(np.argmin(errors))
    lo, hi = float(grid[max(k - 1, 0)]), float(grid[min(k + 1, len(grid) - 1)])
    for _ in range(30):  # golden-section refinement between the neighbours of the best grid point
        a, b = lo + 0.382 * (hi - lo), lo + 0.618 * (hi - lo)
        lo, hi = (lo, b) if error(a) < error(b) else (a, hi)
    overhead = (lo + hi) / 2
    if error(overhead) > errors[k]:
        overhead = float(grid[k])
    fitted = with_message_overhead(devices, overhead_devices, overhead)
    before = Problem(graph, with_message_overhead(devices, overhead_devices, 0.0), timings=table)
    after = Problem(graph, fitted, timings=table)
    fit = {"message_overhead_s": overhead, "devices": list(overhead_devices), "placements": len(runs),
           "log_error_before": errors[0], "log_error_after": error(overhead),
           "runs": [{"measured_s": t, "messages_per_step": m, "before_s": before.simulate(x).result.batch_time,
                     "after_s": after.simulate(x).result.batch_time} for x, t, m in runs]}
    return fitted, fit


def with_message_overhead(devices: DeviceGraph, names, overhead: float) -> DeviceGraph:
    """A copy with ``message_overhead`` = ``overhead`` on the devices named (the others unchanged)."""
    from dataclasses import replace
    chosen = set(names)
    return DeviceGraph(devices.name, [replace(d, message_overhead=overhead) if d.name in chosen else d
                                      for d in devices.devices], list(devices.channels), source=devices.source,
                       collectives=devices.collectives, shared=devices.shared)


def fastest(rounds: list[dict]) -> dict:
    """Several rounds of one device's measurements as one: each figure from its least disturbed round.

    Other processes only ever slow a measurement down, so on a shared machine the
    minimum over rounds is the estimate of the undisturbed time.
    """
    out = dict(rounds[0])
    out["ops"] = {op: {ph: _least([r["ops"][op][ph] for r in rounds])
                       for ph in set.intersection(*(set(r["ops"][op]) for r in rounds))}
                  for op in rounds[0]["ops"]}
    # how much each op's forward and backward moved between rounds (sd over mean): the simulated time's
    # interval (analysis.uncertainty) draws from it; one round says nothing about it
    out["spreads"] = {op: {ph: _spread([r["ops"][op][ph] for r in rounds]) for ph in SPREAD
                           if all(ph in r["ops"][op] for r in rounds)}
                      for op in rounds[0]["ops"]} if len(rounds) > 1 else {}
    out["half_batch"] = min(r.get("half_batch") or 0 for r in rounds)  # a round that could not: no fit
    # the smaller batches every round measured (a round that could not run them: none)
    out["fit_batches"] = sorted(set.intersection(*(set(r.get("fit_batches") or ()) for r in rounds)))
    out["step_s"] = min(r["step_s"] for r in rounds)
    out["steps_s"] = [s for r in rounds for s in r["steps_s"]]
    out["gemm_flops"] = max(r["gemm_flops"] for r in rounds)
    out["copy_bandwidth"] = max(r["copy_bandwidth"] for r in rounds)
    out["rounds"] = len(rounds)
    return out


def _spread(values: list[float]) -> float:
    """Sample standard deviation over mean of several rounds' times (0 for times of 0)."""
    mean = sum(values) / len(values)
    if mean <= 0:
        return 0.0
    return (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5 / mean


def _least(values: list):
    """The least of several rounds' figures; for times at smaller batches ({batch: s}), per batch all have."""
    if isinstance(values[0], dict):
        common = set.intersection(*(set(v) for v in values))
        return {b: min(v[b] for v in values) for b in sorted(common, key=int)}
    return min(values)


def batch_points(m: dict, t: dict, ph: str) -> dict[int, float]:
    """An op's phase measured at smaller batches, {batch: seconds}: the times at the fitted batches, or a
    measurement of the first version (``half_batch`` and ``fwd_half``)."""
    sizes = [int(b) for b in m.get("fit_batches") or ()]
    at = t.get(f"{ph}_at") or {}
    points = {b: float(at[str(b)]) for b in sizes if str(b) in at}
    half = int(m.get("half_batch") or 0)
    if not points and half and f"{ph}_half" in t:
        points = {half: float(t[f"{ph}_half"])}
    return points


def fixed_fit(t_full: float, batch: int, points: dict[int, float]) -> float:
    """The batch-independent part of a time measured at ``batch`` and at the smaller batches of ``points``:
    the intercept of the least-squares line through all of them (through both, with one smaller batch), kept
    between 0 (time proportional to the batch) and ``t_full`` (time independent of it)."""
    xs = [float(batch), *map(float, points)]
    ys = [t_full, *points.values()]
    if len(xs) < 2 or t_full <= 0:
        return 0.0
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return 0.0
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return min(max(my - slope * mx, 0.0), t_full)


def pool_identical(devs, measured: dict) -> tuple[dict, list[list[str]]]:
    """Devices' measurements with every group of identical devices (same kind, torch device type, model and
    thread count) replaced by the group's fastest figures (:func:`fastest` over all their rounds); the groups."""
    groups: dict[tuple, list[str]] = {}
    for d in devs:
        m = measured[d.name]
        key = (d.kind, d.torch.split(":")[0], m.get("model"), m.get("threads"), len(m.get("cores") or []))
        groups.setdefault(key, []).append(d.name)
    out, pooled = dict(measured), []
    for names in groups.values():
        if len(names) > 1:
            best = fastest([measured[n] for n in names])
            for n in names:
                out[n] = dict(best, memory_bytes=measured[n]["memory_bytes"], cores=measured[n].get("cores"))
            pooled.append(names)
    return out, pooled


def fit_link(sizes, seconds) -> tuple[float, float]:
    """(latency s, bandwidth B/s) minimising the relative error of latency + size / bandwidth."""
    xs = [float(s) for s in sizes]
    ys = [float(t) for t in seconds]
    w = [1.0 / (y * y) for y in ys]  # weights for relative error
    sw = sum(w)
    sx = sum(wi * x for wi, x in zip(w, xs))
    sy = sum(wi * y for wi, y in zip(w, ys))
    sxx = sum(wi * x * x for wi, x in zip(w, xs))
    sxy = sum(wi * x * y for wi, x, y in zip(w, xs, ys))
    den = sw * sxx - sx * sx
    slope = (sw * sxy - sx * sy) / den if den > 0 else 0.0
    intercept = (sy - slope * sx) / sw
    if slope <= 0:  # flat: everything is latency; take the largest transfer's rate as the bandwidth
        slope = max(y / x for x, y in zip(xs, ys))
        intercept = 0.0
    if intercept < 0:  # refit through the origin: no negative latency
        intercept = 0.0
        slope = sum(wi * x * y for wi, x, y in zip(w, xs, ys)) / sum(wi * x * x for wi, x in zip(w, xs))
    return intercept, 1.0 / slope


def isotonic(values, weights=None) -> list[float]:
    """The non-decreasing sequence closest to ``values`` in weighted least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [weighted mean, weight, count]
    for v, w in zip(values, weights or [1.0] * len(values)):
        blocks.append([float(v), float(w), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, w1, n1), (m2, w2, n2) = blocks[-2], blocks.pop()
            blocks[-1] = [(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2]
    return [m for m, _, n in blocks for _ in range(n)]


def fixed_part(t_full: float, t_half: float, batch: int, half: int) -> float:
    """The batch-independent part of a time measured at ``batch`` (``t_full``) and at ``half`` (``t_half``):
    the intercept of the line through both points, kept between 0 (time proportional to the batch) and
    ``t_full`` (time independent of it; a half batch measured slower is noise around that)."""
    if batch <= half or t_full <= 0:
        return 0.0
    return min(max((t_half * batch - t_full * half) / (batch - half), 0.0), t_full)


def fit_curve(sizes, seconds) -> tuple[tuple[float, float], ...]:
    """A channel's ``transfer_curve`` from transfer times measured at several sizes (one figure per size,
    e.g. the median of repeats): the measured points made non-decreasing (isotonic regression of the log
    times, so that a pooled run of sizes takes the geometric mean of their times: a larger message never
    arrives sooner, so a dip is noise), then trimmed so the last segment rises (its slope is the bandwidth
    beyond the last point). ``()`` when fewer than two sizes are left."""
    pairs = sorted((float(b), float(t)) for b, t in zip(sizes, seconds))
    merged: dict[float, list[float]] = {}
    for b, t in pairs:
        merged.setdefault(b, []).append(t)
    xs = sorted(merged)
    ys = [sum(merged[b]) / len(merged[b]) for b in xs]
    logs = [math.log(max(y, 1e-300)) for y in ys]
    ys = [y if v == lg else math.exp(v) for y, lg, v in zip(ys, logs, isotonic(logs))]  # unpooled: exactly as measured
    points = list(zip(xs, ys))
    while len(points) > 2 and points[-1][1] <= points[-2][1]:
        del points[-2]
    if len(points) < 2 or points[-1][1] <= points[-2][1]:
        return ()
    return tuple(points)


def build_calibration(graph, source, shape, devs, measured: dict, links: dict,
                      settings: CalibrationSettings, shared: bool = False) -> Calibration:
    """The device graph and timing table from the workers' measurements."""
    devices, ops_table, report = [], {}, {"devices": {}, "channels": {}, "shared_cores": shared}
    if settings.pool_identical:
        measured, report["pooled"] = pool_identical(devs, measured)
    for d in devs:
        m = measured[d.name]
        sum_s = sum(t["fwd"] + t["bwd"] + t["update"] for t in m["ops"].values())
        scale = m["step_s"] / sum_s if settings.reconcile == "scale" and sum_s > 0 else 1.0
        fixed_s = 0.0
        fitted: set[int] = set()
        missed: dict[int, list[float]] = {}  # batch: [|measured - the fixed part's line|, measured] summed
        for op in graph.ops:
            t = m["ops"].get(op.name, {"fwd": 0.0, "bwd": 0.0, "update": 0.0})
            entry = {ph: t[ph] * scale for ph in ("fwd", "bwd", "update")}
            for ph, key in FIXED.items():
                points = batch_points(m, t, ph)
                if points and t[ph] > 0:  # (an input op runs nothing)
                    fixed = fixed_fit(t[ph], graph.batch_size, points)
                    entry[key] = fixed * scale
                    fixed_s += entry[key]
                    fitted.update(points)
                    for b, v in points.items():
                        line = fixed + (t[ph] - fixed) * b / graph.batch_size
                        acc = missed.setdefault(b, [0.0, 0.0])
                        acc[0] += abs(v - line)
                        acc[1] += v
                    if len(points) > 1:  # one smaller batch says no more than the fixed part's line
                        entry[AT[ph]] = {f"{b / graph.batch_size:g}": v * scale for b, v in sorted(points.items())}
            for ph, key in SPREAD.items():  # relative: the reconciling scale leaves it as it is
                spread = (m.get("spreads") or {}).get(op.name, {}).get(ph, 0.0)
                if spread > 0:
                    entry[key] = min(spread, MAX_SPREAD)
            ops_table.setdefault(op.name, {})[d.name] = entry
        half = max(fitted) if fitted else 0  # the largest smaller batch (half the batch): the report's figure
        devices.append(Device(d.name, d.kind, peak_flops=m["gemm_flops"] / ETA_COMP, memory_bytes=m["memory_bytes"],
                              mem_bandwidth=m["copy_bandwidth"],
                              model=f"{m.get('model', d.torch)}, {m.get('threads') or 'default'} thread(s), calibrated"))
        report["devices"][d.name] = {"torch": d.torch, "threads": m.get("threads"), "cores": m.get("cores"),
                                     "step_s": m["step_s"], "ops_sum_s": sum_s, "scale": scale,
                                     "gemm_flops": m["gemm_flops"], "copy_bandwidth": m["copy_bandwidth"],
                                     "memory_bytes": m["memory_bytes"]}
        if half:  # how much of the ops' time a smaller batch keeps
            report["devices"][d.name].update(half_batch=half, fixed_s=fixed_s,
                                             fixed_share=fixed_s / (sum_s * scale) if sum_s > 0 else 0.0)
            # at each smaller batch, how far the ops' measured times are from the fixed part's line (the
            # share of their time that interpolating between measurements corrects)
            report["devices"][d.name]["fit_batches"] = sorted(fitted)
            report["devices"][d.name]["line_error"] = {str(b): (e / v if v > 0 else 0.0)
                                                       for b, (e, v) in sorted(missed.items())}
    channels = []
    for (a, b), ev in sorted(links.items()):
        latency, bandwidth = fit_link(ev["sizes"], ev["seconds"])
        curve = fit_curve(ev["sizes"], ev["seconds"])
        channels.append(Channel(f"{a}-{b}", bandwidth=bandwidth / ETA_COMM, latency=latency,
                                routes=((a, b), (b, a)), transfer_curve=curve))
        report["channels"][f"{a}-{b}"] = {"sizes": ev["sizes"], "seconds": ev["seconds"], "latency_s": latency,
                                          "bandwidth": bandwidth, "transfer_curve": [list(p) for p in curve]}
    device_graph = DeviceGraph("local", devices, channels)
    timings = check_timings({
        "format": TIMINGS_FORMAT, "network": graph.name, "source": source, "input_shape": list(shape),
        "batch_size": graph.batch_size, "devices": "local", "reconcile": settings.reconcile,
        "ops": ops_table, "measured": report["devices"], "channels": report["channels"],
        "pooled": report.get("pooled", []),
        "efficiencies": {"comp": ETA_COMP, "comm": ETA_COMM}})
    return Calibration(device_graph, timings, report)


def summary_rows(cal: Calibration) -> list[list[str]]:
    """For printing: one row per device and per channel."""
    rows = []
    for name, d in cal.report["devices"].items():
        rows.append([name, f"{d['torch']} ({d['threads']} thread(s))", f"{d['gemm_flops'] / 1e9:.1f} GFLOP/s",
                     f"{d['copy_bandwidth'] / 1e9:.2f} GB/s", f"step {d['step_s'] * 1e3:.1f} ms",
                     f"ops sum {d['ops_sum_s'] * 1e3:.1f} ms (x{d['scale']:.2f})"
                     + (f", {d['fixed_share']:.0%} of it fixed (batch "
                        f"{', '.join(map(str, sorted(d.get('fit_batches') or [d['half_batch']], reverse=True)))} "
                        "measured too)" if "fixed_share" in d else "")])
    fit = cal.report.get("overhead_fit")
    if fit:
        rows.append([", ".join(fit["devices"]), "per message",
                     f"overhead {fit['message_overhead_s'] * 1e6:.0f} us", "", "",
                     f"fitted to {fit['placements']} steps"])
    for name, c in cal.report["channels"].items():
        fitted = f" (ping-pong {c['ping_pong_latency_s'] * 1e6:.0f} us)" if "ping_pong_latency_s" in c else ""
        curve = c.get("transfer_curve") or []
        rows.append([name, "link", f"latency {c['latency_s'] * 1e6:.0f} us{fitted}",
                     f"{c['bandwidth'] / 1e9:.3f} GB/s",
                     f"measured curve: {len(curve)} sizes" if curve else "", ""])
    return rows

