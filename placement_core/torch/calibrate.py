"""Calibrate the simulator on this machine: per-op times per device and channel latency/bandwidth.

Per device (one at a time, pinned exactly like a benchmark rank, so the
numbers hold for the same conditions; ``rounds`` times, devices taking turns,
keeping each figure's fastest round): every op's forward and backward time,
run alone on inputs captured from a real forward pass at the batch size
(median of repeats, backward timed from a fresh forward each time); the
weight update, measured for the whole model and shared among ops by parameter
bytes; a whole single-device training step; and a GEMM rate and a copy
bandwidth for the roofline of ops that were not measured.

Ops timed alone miss what a whole step has on top (the loss, Python and
autograd overhead, cache effects), so by default (``reconcile="scale"``) each
device's op times are scaled so that they add up to its measured
single-device step; then the simulator reproduces single-device steps by
construction and the measured per-op shares decide everything else.

Per pair of devices (thesis E1): one-way time of a tensor of 10^3..10^8
bytes (ping-pong, halved; median of repeats), fitted as
``latency + bytes / bandwidth`` by least squares on relative error.

A message inside a training step costs more than a ping-pong between idle
ranks says, and on CPU ranks much of that cost is CPU time on both ends
(serialisation, the gloo transport thread running on the cores that compute,
waking the receiver): time the rank cannot spend computing, which a link
latency (overlapping compute) cannot express. So, by default
(``fit_placements`` > 0), calibration then benchmarks a few placements of its
own (random contiguous zones and random mixes, never the ones an experiment
evaluates) and fits the devices' ``message_overhead`` (LogP's o: device time
per message sent and per message received, which the simulator runs as send
and receive tasks) to the value that makes the simulator best reproduce those
whole steps (least squares on log time: a grid, then golden-section search).
One value is shared by all CPU devices; CUDA devices keep 0 (their transfers
are driven asynchronously, and a shared value would blur the two kinds); with
no CPU device there is nothing to fit. The overhead is fitted twice, once with
the links' measured transfer curves and once with latency + bytes /
bandwidth, and the device graph keeps the model that reproduces the steps
better (``link_model``: "auto"; or force one): on CPU ranks a step's streamed
sends do not pay the ping-pong's delayed-ack hump at 256 kB - 3 MB (docs/e5.md).
The report records the fit (``overhead_fit``).

Output: a ``placement-devices/1`` graph (the ``local`` preset) and a
``placement-timings/1`` table (:mod:`placement_core.cost.timings`); the fitting is
:mod:`placement_core.analysis.calibration_fit` (no torch), the measuring :mod:`.calibrate_worker`. Device and channel figures
are stored divided by the default efficiencies (η_comp 0.9, η_comm 0.25), so
the default profile reproduces the measured rates.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from ..model.devices import devices_to_dict
from ..base.errors import InputError
from ..analysis.calibration_collectives import with_collectives
from ..analysis.calibration_fit import (Calibration, CalibrationSettings, build_calibration, fastest, fit_message_overhead, fit_placements)
from ..base.jsonio import write_json
from ..cost.timings import user_timings_path, write_timings
from .devspec import check_available, parse_devices
from .sources import parse_input_shape

# -- parent side ----------------------------------------------------------------------------------

def fit_batches(batch: int) -> list[int]:
    """The smaller batches every op is measured at besides ``batch``: its half, quarter and eighth (the
    micro-batches and batch shards placements use most), each at least 1 and distinct."""
    return sorted({batch // k for k in (2, 4, 8) if batch // k >= 1} - {batch}, reverse=True)


def calibrate(source: str, input_shape, devices, *, runner: str = "ranks", batch_size: int | None = None,
              name: str | None = None, settings: CalibrationSettings | None = None,
              progress: Callable[[str], None] | None = None) -> Calibration:
    """Measure ``source``'s ops on ``devices`` (``cpu:2``, ``cuda:0,cuda:1``) and the links between them."""
    import torch

    from .benchmark import RUNNERS
    from .model_import import trace_model
    from .launcher import WorkerJob, assign_cores
    from .sources import load_model, parse_source

    settings = settings or CalibrationSettings()
    if settings.reconcile not in ("scale", "none"):
        raise InputError(f"unknown reconcile mode {settings.reconcile!r}", field="--reconcile",
                         fix="Use scale or none")
    if not settings.sizes or any(int(s) < 4 for s in settings.sizes):
        raise InputError("transfer sizes must be at least 4 bytes", field="sizes")
    devs = parse_devices(devices) if isinstance(devices, str) else list(devices)
    check_available(devs)
    if runner not in RUNNERS:
        raise InputError(f"unknown runner {runner!r}", field="--runner", fix="Use ranks or inprocess")
    if runner == "inprocess" and len({d.torch for d in devs}) < len(devs):
        raise InputError("the in-process runner cannot measure a link between two devices that are the same "
                         "torch device", field="--runner", fix="Use --runner ranks for cpu:N")
    shape = parse_input_shape(input_shape)
    batch = int(batch_size or shape[0])
    src = parse_source(source)
    model = load_model(src, seed=settings.seed)
    graph = trace_model(model, shape, name=name or src.default_name).graph.with_batch_size(batch)
    import tempfile
    with tempfile.TemporaryDirectory(prefix="placement-state-") as tmp:
        state = Path(tmp) / "state.pt"
        torch.save(model.state_dict(), state)
        world = len(devs) if runner == "ranks" else 1
        affinity, threads, shared = assign_cores(devs) if runner == "ranks" else (None, None, False)
        spec = {"mode": "calibrate", "runner": runner, "source": source, "seed": settings.seed,
                "input_shape": list(shape), "batch_size": batch, "state_dict": str(state),
                "devices": [vars(d) for d in devs], "affinity": affinity, "threads": threads,
                "sizes": [int(s) for s in settings.sizes], "steps": settings.steps, "min_time": settings.min_time,
                "min_reps": settings.min_reps, "max_reps": settings.max_reps, "rounds": settings.rounds,
                "half_batch": batch // 2 if settings.batch_fit and batch >= 2 else 0,
                "fit_batches": fit_batches(batch) if settings.batch_fit else [],
                "comm_timeout": settings.timeout,
                "collective_sizes": sorted({int(x) for x in settings.collective_sizes if int(x) >= 4 * len(devs)})}
        measured: dict[str, list[dict]] = {}
        links = {}
        collectives: list[dict] = []
        contention: list[dict] = []
        deadline = time.monotonic() + settings.timeout
        with WorkerJob(spec, world) as job:
            while True:
                for _, ev in job.events():
                    kind = ev.get("event")
                    if kind == "device":
                        measured.setdefault(ev["name"], []).append(ev)
                        if progress:
                            progress(f"{ev['name']} (round {ev['round'] + 1}/{settings.rounds}): {len(ev['ops'])} ops, "
                                     f"step {ev['step_s'] * 1e3:.1f} ms")
                    elif kind == "channel":
                        links[(ev["src"], ev["dst"])] = ev
                        if progress:
                            progress(f"{ev['src']} <-> {ev['dst']}: {len(ev['seconds'])} sizes")
                    elif kind == "collective":
                        collectives.append(ev)
                        if progress and "error" not in ev:
                            progress(f"{ev['op']} over {len(ev['devices'])} ranks ({ev['device']}): "
                                     f"{ev['seconds'][-1] * 1e3:.1f} ms alone, {ev['busy_seconds'][-1] * 1e3:.1f} ms "
                                     f"busy at {ev['sizes'][-1] / 2 ** 20:.0f} MiB")
                    elif kind == "contention":
                        contention.append(ev)
                        if progress:
                            progress(f"{ev['device']}: {ev.get('work', 'a step')} {ev['together_s'] / ev['alone_s']:.2f}x "
                                     "slower with every rank computing")
                    elif kind == "fatal":
                        if ev.get("kind") == "input":
                            raise InputError(ev["message"])
                        raise InputError(f"calibration failed: {ev['message']}", field="calibrate",
                                         fix="Check that the model trains on these devices (placement benchmark "
                                             "with a single-device placement)")
                if not job.running():
                    break
                if time.monotonic() > deadline:
                    raise InputError(f"calibration did not finish within {settings.timeout:.0f} s", field="calibrate",
                                     fix="Use a smaller model, batch or fewer transfer sizes")
                time.sleep(0.05)
            for _, ev in job.events():
                if ev.get("event") == "device":
                    measured.setdefault(ev["name"], []).append(ev)
                elif ev.get("event") == "channel":
                    links[(ev["src"], ev["dst"])] = ev
                elif ev.get("event") == "collective":
                    collectives.append(ev)
                elif ev.get("event") == "contention":
                    contention.append(ev)
            tail = job.log_tail()
    missing = [d.name for d in devs if d.name not in measured]
    if missing:
        raise InputError(f"calibration measured nothing for {', '.join(missing)}" + (f" ({tail})" if tail else ""),
                         field="calibrate")
    cal = build_calibration(graph, source, shape, devs, {k: fastest(v) for k, v in measured.items()}, links,
                            settings, shared)
    # before the overhead fit: its whole-step runs are simulated with the ranks' contention
    cal = with_collectives(cal, collectives, contention)
    if settings.fit_placements > 0 and len(devs) > 1 and any(d.kind == "cpu" for d in devs):
        cal = fit_overhead(cal, graph, source, shape, devs, runner, settings, progress)
    return cal


def fit_overhead(cal: Calibration, graph, source, shape, devs, runner, settings: CalibrationSettings,
                 progress=None) -> Calibration:
    """Fit the CPU devices' message overhead so the simulator reproduces whole steps of a few calibration
    placements, and choose the link model (the measured transfer curve or latency + bytes / bandwidth) that
    reproduces them better (``settings.link_model``)."""
    from .benchmark import BenchmarkSettings, benchmark

    xs = fit_placements(len(graph), len(devs), settings.fit_placements, settings.seed)
    names = [d.name for d in devs]
    if progress:
        progress(f"fitting the per-message overhead of the CPU devices to {len(xs)} whole-step runs ...")
    results = benchmark(source, shape, [{op.name: names[int(i)] for op, i in zip(graph.ops, x)} for x in xs], devs,
                        runner=runner, batch_size=graph.batch_size, name=graph.name,
                        settings=BenchmarkSettings(steps=settings.fit_steps, warmup=1, rounds=settings.fit_rounds,
                                                   seed=settings.seed, timeout=settings.timeout))
    runs = [(x, min(r.steps_s), r.messages_per_step)  # the least disturbed step
            for x, r in zip(xs, results) if r.ok and r.steps_s]
    if len(runs) < 2:
        return cal
    overhead_devices = [d.name for d in devs if d.kind == "cpu"]
    fitted, fit = fit_message_overhead(cal, graph, overhead_devices, runs, settings.link_model)
    report = dict(cal.report, overhead_fit=fit)
    timings = dict(cal.timings, overhead_fit=fit)
    if progress:
        progress(f"message overhead {fit['message_overhead_s'] * 1e6:.0f} us per message sent or received on "
                 f"{', '.join(overhead_devices)}; links: "
                 + ("the measured transfer curve" if fit["link_model"] == "curve" else
                    "the ping-pong's latency + bytes / bandwidth"))
    return Calibration(fitted, timings, report)


def save_calibration(cal: Calibration, out_dir: str | Path | None = None, preset: str | None = "local") -> list[Path]:
    """``out_dir``/devices.json + timings.json, and (unless ``preset`` is None) the user preset, which
    ``load_devices(preset)`` and ``load_timings(preset, graph)`` then find."""
    from ..formats.catalog import user_dir
    targets = []
    if out_dir is not None:
        out = Path(out_dir)
        targets.append((out / "devices.json", out / "timings.json"))
    if preset is not None:
        t = cal.timings
        targets.append((user_dir() / "devices" / f"{preset}.json",
                        user_timings_path(t["network"], t["input_shape"], t["batch_size"], preset)))
    written = []
    for dev_path, tim_path in targets:
        dev_path.parent.mkdir(parents=True, exist_ok=True)
        tim_path.parent.mkdir(parents=True, exist_ok=True)
        write_json(dev_path, devices_to_dict(cal.devices))
        write_timings(tim_path, cal.timings)  # checked against the format before it is written
        written += [dev_path, tim_path]
    return written
