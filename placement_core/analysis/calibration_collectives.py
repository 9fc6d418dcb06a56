"""Calibration's collectives and contention into the device graph (docs/torch.md "Calibrate the simulator",
docs/formats.md "collectives", "shared"): no torch here, the measuring is torch/collective_probe.py."""

from __future__ import annotations

from ..model.devices import Collective, DeviceGraph, SharedResource
from .calibration_fit import Calibration


# ranks that compute together less than this much slower than alone share nothing worth modelling (the
# product loop's slowdown read 0.93 and 1.07 in two runs on ranks that share nothing: noise)
CONTENTION_THRESHOLD = 1.10
# an all-reduce slowed by less than this while the ranks compute shares no cores worth modelling; a demand is
# capped where the busy curve barely exceeds the alone one (c = 1 / (b - 1) grows without bound)
COLLECTIVE_SHARE_MIN = 1.05
COLLECTIVE_SHARE_MAX = 10.0


def with_collectives(cal: Calibration, collectives: list[dict], contention: list[dict]) -> Calibration:
    """The calibration with the workers' collective curves and shared-resource figure in its device graph
    (docs/formats.md "collectives", "shared") and its report.

    ``collectives``: per rank and op, its medians per size (``seconds``, ``busy_seconds``); a curve keeps the
    slowest rank's time per size (a collective ends when its last rank does), made non-decreasing (a larger
    message never finishes sooner; a measured dip is noise). ``contention``: per CPU rank, a fixed product
    loop's seconds alone and with every rank computing at once; the median slowdown s of k ranks makes a
    resource of capacity k / s that the k devices share (each demand 1), declared when s exceeds
    CONTENTION_THRESHOLD.

    On CPU ranks (``contention`` given) gloo sums on the ranks' own cores, so an all-reduce and the backward
    beside it share them: the resource is declared with capacity k (or k / s) and a collective demand
    c = 1 / (b - 1), b the all-reduce's busy over alone time at its largest size. That is processor sharing
    of one core between the compute thread (weight 1) and gloo's (weight c): the all-reduce then runs at
    c / (1 + c) = 1 / b of its speed, as measured, and the compute at 1 / (1 + c), which loses the all-reduce's
    time alone, A, over the b A it lasts (docs/e5.md). An all-reduce that computing ranks do not slow
    (b <= COLLECTIVE_SHARE_MIN) takes no share."""
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
                                "work": contention[0].get("work", "products"),
                                "alone_s": {ev["device"]: ev["alone_s"] for ev in contention},
                                "together_s": {ev["device"]: ev["together_s"] for ev in contention}}
        capacity = k / slowdown if slowdown > CONTENTION_THRESHOLD else float(k)
        ratio, coll = collective_share(curves)
        if slowdown > CONTENTION_THRESHOLD or coll > 0.0:
            names = [ev["device"] for ev in contention]
            shared.append(SharedResource("cpu-cores", tuple(n for n in devices.names if n in names), capacity,
                                         collective_demand=coll))
            report["contention"]["capacity"] = capacity
            if coll > 0.0:
                report["contention"]["collective_demand"] = coll
                report["contention"]["allreduce_busy_over_alone"] = ratio
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


def collective_share(curves) -> tuple[float, float]:
    """(b, c): the all-reduce's busy over alone time at its largest size, and the collective demand it gives
    on CPU ranks, 1 / (b - 1) (:func:`with_collectives`); (1, 0) without a busy all-reduce curve."""
    allreduce = next((c for c in curves if c.op == "allreduce" and c.busy_seconds), None)
    ratio = allreduce.busy_seconds[-1] / allreduce.seconds[-1] if allreduce and allreduce.seconds[-1] > 0 else 1.0
    return ratio, (min(1.0 / (ratio - 1.0), COLLECTIVE_SHARE_MAX) if ratio > COLLECTIVE_SHARE_MIN else 0.0)


def _running_max(values: list[float]) -> list[float]:
    out, top = [], 0.0
    for v in values:
        top = max(top, float(v))
        out.append(top)
    return out
