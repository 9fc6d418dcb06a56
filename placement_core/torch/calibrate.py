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
no CPU device there is nothing to fit. The links keep the ping-pong latency
and bandwidth. The report records the fit (``overhead_fit``).

Output: a ``placement-devices/1`` graph (the ``local`` preset) and a
``placement-timings/1`` table (:mod:`.timings`). Device and channel figures
are stored divided by the default efficiencies (η_comp 0.9, η_comm 0.25), so
the default profile reproduces the measured rates.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..cost import RooflineProfile
from ..devices import Channel, Device, DeviceGraph, devices_to_dict
from ..errors import InputError
from ..jsonio import write_json
from .devspec import LocalDevice, check_available, parse_devices
from .sources import parse_shape
from .timings import FORMAT as TIMINGS_FORMAT
from .timings import check_timings, user_timings_path

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
    seed: int = 0
    timeout: float = 1800.0


@dataclass
class Calibration:
    devices: DeviceGraph
    timings: dict  # placement-timings/1
    report: dict = field(default_factory=dict)  # per device and channel: what was measured


# -- parent side ----------------------------------------------------------------------------------

def calibrate(source: str, input_shape, devices, *, runner: str = "ranks", batch_size: int | None = None,
              name: str | None = None, settings: CalibrationSettings | None = None,
              progress: Callable[[str], None] | None = None) -> Calibration:
    """Measure ``source``'s ops on ``devices`` (``cpu:2``, ``cuda:0,cuda:1``) and the links between them."""
    import torch

    from .benchmark import RUNNERS
    from .fx_import import trace_model
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
    shape = parse_shape(input_shape)
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
                "comm_timeout": settings.timeout}
        measured: dict[str, list[dict]] = {}
        links = {}
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
            tail = job.log_tail()
    missing = [d.name for d in devs if d.name not in measured]
    if missing:
        raise InputError(f"calibration measured nothing for {', '.join(missing)}" + (f" ({tail})" if tail else ""),
                         field="calibrate")
    cal = build_calibration(graph, source, shape, devs, {k: fastest(v) for k, v in measured.items()}, links,
                            settings, shared)
    if settings.fit_placements > 0 and len(devs) > 1 and any(d.kind == "cpu" for d in devs):
        cal = fit_overhead(cal, graph, source, shape, devs, runner, settings, progress)
    return cal


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


def fit_overhead(cal: Calibration, graph, source, shape, devs, runner, settings: CalibrationSettings,
                 progress=None) -> Calibration:
    """Fit the CPU devices' message overhead so the simulator reproduces whole steps of a few calibration
    placements (the links keep their ping-pong latency and bandwidth)."""
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
    fitted, fit = fit_message_overhead(cal, graph, overhead_devices, runs)
    report = dict(cal.report, overhead_fit=fit)
    timings = dict(cal.timings, overhead_fit=fit)
    if progress:
        progress(f"message overhead {fit['message_overhead_s'] * 1e6:.0f} us per message sent or received on "
                 f"{', '.join(overhead_devices)} (link latency: the ping-pong's)")
    return Calibration(fitted, timings, report)


def fit_message_overhead(cal: Calibration, graph, overhead_devices: list[str], runs) -> tuple[DeviceGraph, dict]:
    """The device graph with ``message_overhead`` on ``overhead_devices`` set to the value that minimises
    the squared log error of simulated against measured step times (``runs``: (placement, measured seconds,
    messages per step)), and the fit's record. A grid over 0 and 1 us .. 100 ms, then golden-section search
    between the best grid point's neighbours; the result is never worse than the best grid point, and so
    never worse than no overhead at all."""
    import numpy as np

    from ..problem import Problem
    from .timings import timing_table

    table = timing_table(cal.timings, graph)

    def error(overhead: float) -> float:
        problem = Problem(graph, with_message_overhead(cal.devices, overhead_devices, overhead), timings=table)
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
    fitted = with_message_overhead(cal.devices, overhead_devices, overhead)
    before = Problem(graph, with_message_overhead(cal.devices, overhead_devices, 0.0), timings=table)
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
                                      for d in devices.devices], list(devices.channels), source=devices.source)


def fastest(rounds: list[dict]) -> dict:
    """Several rounds of one device's measurements as one: each figure from its least disturbed round.

    Other processes only ever slow a measurement down, so on a shared machine the
    minimum over rounds is the estimate of the undisturbed time.
    """
    out = dict(rounds[0])
    out["ops"] = {op: {ph: min(r["ops"][op][ph] for r in rounds) for ph in rounds[0]["ops"][op]}
                  for op in rounds[0]["ops"]}
    out["step_s"] = min(r["step_s"] for r in rounds)
    out["steps_s"] = [s for r in rounds for s in r["steps_s"]]
    out["gemm_flops"] = max(r["gemm_flops"] for r in rounds)
    out["copy_bandwidth"] = max(r["copy_bandwidth"] for r in rounds)
    out["rounds"] = len(rounds)
    return out


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


def build_calibration(graph, source, shape, devs: list[LocalDevice], measured: dict, links: dict,
                      settings: CalibrationSettings, shared: bool = False) -> Calibration:
    """The device graph and timing table from the workers' measurements."""
    devices, ops_table, report = [], {}, {"devices": {}, "channels": {}, "shared_cores": shared}
    for d in devs:
        m = measured[d.name]
        sum_s = sum(t["fwd"] + t["bwd"] + t["update"] for t in m["ops"].values())
        scale = m["step_s"] / sum_s if settings.reconcile == "scale" and sum_s > 0 else 1.0
        for op in graph.ops:
            t = m["ops"].get(op.name, {"fwd": 0.0, "bwd": 0.0, "update": 0.0})
            ops_table.setdefault(op.name, {})[d.name] = {ph: t[ph] * scale for ph in ("fwd", "bwd", "update")}
        devices.append(Device(d.name, d.kind, peak_flops=m["gemm_flops"] / ETA_COMP, memory_bytes=m["memory_bytes"],
                              mem_bandwidth=m["copy_bandwidth"],
                              model=f"{m.get('model', d.torch)}, {m.get('threads') or 'default'} thread(s), calibrated"))
        report["devices"][d.name] = {"torch": d.torch, "threads": m.get("threads"), "cores": m.get("cores"),
                                     "step_s": m["step_s"], "ops_sum_s": sum_s, "scale": scale,
                                     "gemm_flops": m["gemm_flops"], "copy_bandwidth": m["copy_bandwidth"],
                                     "memory_bytes": m["memory_bytes"]}
    channels = []
    for (a, b), ev in sorted(links.items()):
        latency, bandwidth = fit_link(ev["sizes"], ev["seconds"])
        channels.append(Channel(f"{a}-{b}", bandwidth=bandwidth / ETA_COMM, latency=latency,
                                routes=((a, b), (b, a))))
        report["channels"][f"{a}-{b}"] = {"sizes": ev["sizes"], "seconds": ev["seconds"], "latency_s": latency,
                                          "bandwidth": bandwidth}
    device_graph = DeviceGraph("local", devices, channels)
    timings = check_timings({
        "format": TIMINGS_FORMAT, "network": graph.name, "source": source, "input_shape": list(shape),
        "batch_size": graph.batch_size, "devices": "local", "reconcile": settings.reconcile,
        "ops": ops_table, "measured": report["devices"], "channels": report["channels"],
        "efficiencies": {"comp": ETA_COMP, "comm": ETA_COMM}})
    return Calibration(device_graph, timings, report)


def save_calibration(cal: Calibration, out_dir: str | Path | None = None, preset: str | None = "local") -> list[Path]:
    """``out_dir``/devices.json + timings.json, and (unless ``preset`` is None) the user preset, which
    ``load_devices(preset)`` and ``load_timings(preset, graph)`` then find."""
    from ..catalog import user_dir
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
        write_json(tim_path, cal.timings)
        written += [dev_path, tim_path]
    return written


# -- worker side ----------------------------------------------------------------------------------

def worker_main(spec: dict, rank: int, events) -> None:
    import torch
    import torch.distributed as dist

    from .fx_import import trace_for_batch
    from .sources import load_model

    devs = [LocalDevice(**d) for d in spec["devices"]]
    shape = tuple(spec["input_shape"])
    model = load_model(spec["source"], seed=spec["seed"])
    model.load_state_dict(torch.load(spec["state_dict"], weights_only=True))
    traced = trace_for_batch(model, shape, spec["batch_size"])
    ranks = spec["runner"] == "ranks" and len(devs) > 1
    if ranks:
        import datetime
        backend = "nccl" if all(d.is_cuda for d in devs) else "gloo"
        if devs[rank].is_cuda:
            torch.cuda.set_device(torch.device(devs[rank].torch))
        dist.init_process_group(backend, store=dist.FileStore(spec["store"], len(devs)), rank=rank,
                                world_size=len(devs),
                                timeout=datetime.timedelta(seconds=float(spec.get("comm_timeout", 1800))))
    events.write({"event": "ready"})
    mine = [rank] if spec["runner"] == "ranks" else list(range(len(devs)))
    try:
        for rnd in range(int(spec.get("rounds", 1))):
            for r in range(len(devs)):  # one device at a time: the others wait, so nothing interferes
                if r in mine:
                    result = measure_device(traced, devs[r], spec)
                    events.write({"event": "device", "name": devs[r].name, "round": rnd, **result})
                if ranks:
                    dist.barrier()
        for a in range(len(devs)):
            for b in range(a + 1, len(devs)):
                if ranks:
                    if rank in (a, b):
                        seconds = ping_pong(spec["sizes"], a, b, rank, torch.device(devs[rank].torch), backend)
                        if rank == a:
                            events.write({"event": "channel", "src": devs[a].name, "dst": devs[b].name,
                                          "sizes": spec["sizes"], "seconds": seconds})
                    dist.barrier()
                else:
                    seconds = copy_times(spec["sizes"], devs[a].torch, devs[b].torch)
                    events.write({"event": "channel", "src": devs[a].name, "dst": devs[b].name,
                                  "sizes": spec["sizes"], "seconds": seconds})
    finally:
        if ranks:
            dist.destroy_process_group()


def _sync(device) -> None:
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _repeat(fn, prepare, device, min_time: float, min_reps: int, max_reps: int) -> float:
    """Median seconds of ``fn(prepare())`` over repeats (at least ``min_reps``, about ``min_time`` in all)."""
    times = []
    total = 0.0
    while len(times) < min_reps or (total < min_time and len(times) < max_reps):
        arg = prepare()
        _sync(device)
        t0 = time.perf_counter()
        fn(arg)
        _sync(device)
        dt = time.perf_counter() - t0
        times.append(dt)
        total += dt
    return statistics.median(times)


def measure_device(traced, dev: LocalDevice, spec: dict) -> dict:
    """Every op's fwd/bwd/update time on ``dev``, a whole step, a GEMM rate and a copy bandwidth."""
    import copy

    import torch

    from .executor import RankStep, dry_run

    device = torch.device(dev.torch)
    gm = copy.deepcopy(traced.gm).to(device)
    shape, batch, seed = tuple(spec["input_shape"]), int(spec["batch_size"]), spec["seed"]
    reps = (spec["min_time"], spec["min_reps"], spec["max_reps"])
    ops = op_times(gm, traced, device, shape, batch, seed, reps)
    update = update_time(gm, device, reps)
    params = {op.name: op.param_bytes for op in traced.graph.ops}
    total_params = sum(params.values()) or 1.0
    for op, t in ops.items():
        t["update"] = update * params.get(op, 0.0) / total_params
    # a whole single-device step, run by the benchmark's own executor (no messages, no barrier)
    node_rank = {n.name: 0 for n in gm.graph.nodes}
    # shapes from the CPU copy: fake tensors cannot mix a CPU example input with CUDA weights
    step = RankStep(gm, node_rank, 0, device, None, dry_run(traced.gm, shape, batch), shape, batch, seed,
                    barrier=False)
    for _ in range(2):
        step.step()
    steps = [step.step().seconds for _ in range(int(spec["steps"]))]
    return {"ops": ops, "step_s": statistics.median(steps), "steps_s": steps, "gemm_flops": gemm_rate(device),
            "copy_bandwidth": copy_bandwidth(device), "memory_bytes": memory_bytes(dev, spec),
            "model": device_model(device), "threads": torch.get_num_threads(),
            "cores": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None}


def op_times(gm, traced, device, shape, batch, seed, reps) -> dict[str, dict[str, float]]:
    """Forward and backward time of each op, alone, on inputs captured from a real forward pass."""
    import torch
    from torch.fx.node import map_arg
    from torch.utils._pytree import tree_leaves

    from .apply import mutates_input
    from .executor import make_input

    env: dict[str, object] = {}

    class Capture(torch.fx.Interpreter):
        def run_node(self, node):
            env[node.name] = value = super().run_node(node)
            return value

    Capture(gm).run(make_input(shape, batch, seed).to(device))
    members: dict[str, list] = {}
    for node in gm.graph.nodes:
        op = traced.node_op.get(node.name)
        if op is not None:
            members.setdefault(op, []).append(node)
    out: dict[str, dict[str, float]] = {}
    for op in traced.graph.ops:
        nodes = members.get(op.name, [])
        if op.kind == "input" or not nodes or all(n.op == "placeholder" for n in nodes):
            out[op.name] = {"fwd": 0.0, "bwd": 0.0}
            continue
        inside = {n.name for n in nodes}
        mutates = any(mutates_input(n, gm) for n in nodes)
        external = {a.name for n in nodes for a in n.all_input_nodes if a.name not in inside}
        results = [n for n in nodes if any(u.name not in inside for u in n.users) or not n.users]
        params = [p for n in nodes if n.op == "call_module" for p in gm.get_submodule(n.target).parameters()]

        def forward(values):
            local = dict(values)
            for n in nodes:
                args = map_arg(n.args, lambda a: local[a.name])
                kwargs = map_arg(n.kwargs, lambda a: local[a.name])
                local[n.name] = _run_node(gm, n, args, kwargs)
            return [t for n in results for t in tree_leaves(local[n.name])
                    if isinstance(t, torch.Tensor) and t.requires_grad]

        fwd = _repeat(forward, lambda: _inputs(env, external, mutates), device, *reps)
        grads_like = forward(_inputs(env, external, mutates))
        if grads_like:
            g = torch.Generator(device="cpu").manual_seed(seed)
            grads = [torch.randn(t.shape, generator=g, dtype=t.dtype).to(device) for t in grads_like]

            def prepare_bwd():
                for p in params:
                    p.grad = None
                return forward(_inputs(env, external, mutates))
            bwd = _repeat(lambda outs: torch.autograd.backward(outs, grads), prepare_bwd, device, *reps)
        else:
            bwd = 0.0
        out[op.name] = {"fwd": fwd, "bwd": bwd}
    for p in gm.parameters():
        p.grad = None
    return out


def _inputs(env, external, mutates: bool) -> dict:
    """The op's inputs as new leaves: gradients stop at the op, as in a cut; copies if it writes in place."""
    import torch
    from torch.utils._pytree import tree_map

    def leaf(t):
        if not isinstance(t, torch.Tensor):
            return t
        grad = t.requires_grad and t.is_floating_point() and not isinstance(t, torch.nn.Parameter)
        if isinstance(t, torch.nn.Parameter):
            return t  # a parameter read through get_attr: gradients go to it as in training
        t = t.detach().requires_grad_(grad)
        return t.clone() if mutates else t  # an in-place op writes into a copy, never into a leaf
    return {name: tree_map(leaf, env[name]) for name in external}


def _run_node(gm, node, args, kwargs):
    if node.op == "get_attr":
        obj = gm
        for part in node.target.split("."):
            obj = getattr(obj, part)
        return obj
    if node.op == "call_module":
        return gm.get_submodule(node.target)(*args, **kwargs)
    if node.op == "call_function":
        return node.target(*args, **kwargs)
    if node.op == "call_method":
        obj, *rest = args
        return getattr(obj, node.target)(*rest, **kwargs)
    raise RuntimeError(f"cannot time a {node.op} node")


def update_time(gm, device, reps) -> float:
    """One SGD step over all parameters (as in a benchmark step), gradients random."""
    import torch

    from .executor import LR
    params = list(gm.parameters())
    if not params:
        return 0.0
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    opt = torch.optim.SGD(params, lr=LR)
    t = _repeat(lambda _: opt.step(), lambda: None, device, *reps)
    for p in params:
        p.grad = None
    return t


def gemm_rate(device) -> float:
    """FLOP/s of a square float32 matrix product (2 n^3 FLOPs), the best the device reaches."""
    import torch
    n = 4096 if device.type == "cuda" else 1024
    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    a @ b
    t = _repeat(lambda _: a @ b, lambda: None, device, 0.2, 3, 20)
    return 2.0 * n ** 3 / t


def copy_bandwidth(device) -> float:
    """Bytes/s read + written by a large copy (the memory term of the roofline)."""
    import torch
    n = (256 if device.type == "cuda" else 64) * 2 ** 20 // 4
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    t = _repeat(lambda _: dst.copy_(src), lambda: None, device, 0.2, 3, 20)
    return 2.0 * 4 * n / t


def memory_bytes(dev: LocalDevice, spec: dict) -> float:
    """A GPU's memory; for CPU devices, the machine's RAM shared among the CPU devices."""
    import torch
    if dev.is_cuda:
        return float(torch.cuda.get_device_properties(torch.device(dev.torch)).total_memory)
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 16e9
    n_cpu = sum(1 for d in spec["devices"] if d["kind"] == "cpu")
    return float(total) / max(n_cpu, 1)


def device_model(device) -> str:
    import torch
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU"


def ping_pong(sizes, a: int, b: int, rank: int, device, backend: str) -> list[float]:
    """One-way seconds per size between ranks a and b: round trips halved, median of repeats."""
    import torch
    import torch.distributed as dist
    stage = backend == "gloo" and device.type == "cuda"
    out = []
    for size in sizes:
        n = max(1, int(size) // 4)
        t = torch.randn(n, device="cpu" if stage else device)
        reps = max(5, min(40, int(3e8 / max(size, 1))))
        times = []
        for i in range(reps + 1):
            dist.barrier()
            _sync(device)
            t0 = time.perf_counter()
            if rank == a:
                dist.send(t, b)
                dist.recv(t, b)
            else:
                dist.recv(t, a)
                dist.send(t, a)
            _sync(device)
            if i:  # the first exchange sets the connection up
                times.append((time.perf_counter() - t0) / 2)
        out.append(statistics.median(times))
    return out


def copy_times(sizes, src: str, dst: str) -> list[float]:
    """One-way seconds per size for ``tensor.to(dst)`` in one process (in-process runner)."""
    import torch
    out = []
    for size in sizes:
        n = max(1, int(size) // 4)
        t = torch.randn(n, device=src)
        reps = max(5, min(40, int(3e8 / max(size, 1))))
        t.to(dst)
        out.append(_repeat(lambda _: t.to(dst), lambda: None, torch.device(dst), 0.0, reps, reps))
    return out


def summary_rows(cal: Calibration) -> list[list[str]]:
    """For printing: one row per device and per channel."""
    rows = []
    for name, d in cal.report["devices"].items():
        rows.append([name, f"{d['torch']} ({d['threads']} thread(s))", f"{d['gemm_flops'] / 1e9:.1f} GFLOP/s",
                     f"{d['copy_bandwidth'] / 1e9:.2f} GB/s", f"step {d['step_s'] * 1e3:.1f} ms",
                     f"ops sum {d['ops_sum_s'] * 1e3:.1f} ms (x{d['scale']:.2f})"])
    fit = cal.report.get("overhead_fit")
    if fit:
        rows.append([", ".join(fit["devices"]), "per message",
                     f"overhead {fit['message_overhead_s'] * 1e6:.0f} us", "", "",
                     f"fitted to {fit['placements']} steps"])
    for name, c in cal.report["channels"].items():
        fitted = f" (ping-pong {c['ping_pong_latency_s'] * 1e6:.0f} us)" if "ping_pong_latency_s" in c else ""
        rows.append([name, "link", f"latency {c['latency_s'] * 1e6:.0f} us{fitted}",
                     f"{c['bandwidth'] / 1e9:.3f} GB/s", "", ""])
    return rows
