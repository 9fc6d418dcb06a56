"""Calibration's collectives and contention into the device graph (docs/torch.md "Calibrate the simulator",
docs/formats.md "collectives", "shared"): no torch here, the measuring is torch/collective_probe.py."""

from __future__ import annotations

from ..model.devices import Collective, DeviceGraph, SharedResource
from .calibration_fit import Calibration


# ranks that compute together less than this much slower than alone share nothing worth modelling (the
# product loop's slowdown read 0.93 and 1.07 in two runs on ranks that share nothing: noise)
CONTENTION_THRESHOLD = 1.10


def with_collectives(cal: Calibration, collectives: list[dict], contention: list[dict]) -> Calibration:
    """The calibration with the workers' collective curves and shared-resource figure in its device graph
    (docs/formats.md "collectives", "shared") and its report.

    ``collectives``: per rank and op, its medians per size (``seconds``, ``busy_seconds``); a curve keeps the
    slowest rank's time per size (a collective ends when its last rank does), made non-decreasing (a larger
    message never finishes sooner; a measured dip is noise). ``contention``: per CPU rank, a fixed product
    loop's seconds alone and with every rank computing at once; the median slowdown s of k ranks makes a
    resource of capacity k / s that the k devices share (each demand 1), declared when s exceeds
    CONTENTION_THRESHOLD."""
    devices, report = cal.devices, dict(cal.report)
    curves, errors = [], {}
    by_op: dict[str, list[dict]] = {}
    for ev in collectives:
        if "error" in ev:
            errors[ev["op"]] = ev["error"]
        else:
            by_op.setdefault(ev["op"], []).append(ev)
    for op in sorted(by_op):
        evs = by_op[op]
        sizes = [float(x) for x in evs[0]["sizes"]]
        if len(sizes) < 2:
            continue
        quiet = _running_max([max(ev["seconds"][j] for ev in evs) for j in range(len(sizes))])
        busy = _running_max([max(ev["busy_seconds"][j] for ev in evs) for j in range(len(sizes))])
        curves.append(Collective(tuple(evs[0]["devices"]), op, tuple(sizes), tuple(quiet), tuple(busy)))
    shared = []
    if len(contention) >= 2:
        ratios = sorted(ev["together_s"] / ev["alone_s"] for ev in contention if ev["alone_s"] > 0)
        slowdown = ratios[len(ratios) // 2] if len(ratios) % 2 else (ratios[len(ratios) // 2 - 1]
                                                                      + ratios[len(ratios) // 2]) / 2
        k = len(contention)
        report["contention"] = {"devices": [ev["device"] for ev in contention], "slowdown": slowdown,
                                "alone_s": {ev["device"]: ev["alone_s"] for ev in contention},
                                "together_s": {ev["device"]: ev["together_s"] for ev in contention}}
        if slowdown > CONTENTION_THRESHOLD:
            names = [ev["device"] for ev in contention]
            shared.append(SharedResource("cpu-cores", tuple(n for n in devices.names if n in names), k / slowdown))
            report["contention"]["capacity"] = k / slowdown
    if curves:
        report["collectives"] = [{"op": c.op, "devices": list(c.devices), "sizes": list(c.sizes),
                                  "seconds": list(c.seconds), "busy_seconds": list(c.busy_seconds)} for c in curves]
    if errors:
        report["collective_errors"] = errors
    if not curves and not shared:
        return Calibration(devices, cal.timings, report)
    graph = DeviceGraph(devices.name, list(devices.devices), list(devices.channels), source=devices.source,
                        collectives=curves, shared=shared)
    return Calibration(graph, cal.timings, report)


def _running_max(values: list[float]) -> list[float]:
    out, top = [], 0.0
    for v in values:
        top = max(top, float(v))
        out.append(top)
    return out
