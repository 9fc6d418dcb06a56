"""Simulator speed: evaluations per second (placement -> objective, no trace), one core.

    python benchmarks/simulator.py [--json] [--evaluations N] [--curve-points K] [--cpu-time]
                                   [--schedule S --micro-batches M --virtual-stages V] [--sharding K]
    python benchmarks/simulator.py --floor [--cpu-time] [--rounds R] [--floor-graphs resnet50,...] [--json]

Random placements of ResNet-50 and Inception-V3 on malvik-4gpu, one batch,
default profile, through Problem.evaluate (the path optimizers use), plus the
batched evaluate_many and the Python reference for comparison. ``--schedule``
measures a pipeline schedule instead of the thesis scheme (random placements,
so interleaved 1F1B gets a chunk per run of ops). ``--sharding K`` gives the problem a
split table (channel and batch over windows of 2..K devices of one kind, docs/sharding.md) and draws
the placements as the searches do (each gene a device or a split, half and half), and adds data
parallelism (every op split by batch over all the GPUs): what split ops cost.

``--floor`` compares the kernel with the floor: a minimal list scheduler in C (benchmarks/floor.c, built here
with the system cc at -O2, as the kernel) over the same task graph, which does what any simulator of the step
must do and nothing more (message tables, FIFO queues, an event heap; no memory, statistics, units in flight,
priorities). Both run the same random placements, one batch under the thesis scheme, in C loops (the kernel
through ``run_many``); ``Problem.evaluate`` (one placement per call, checked, objective with the memory
penalty: the kernel's objective entry) and ``Problem.evaluate_valid`` (the whole batch in one call, for
placements an optimizer built itself) are timed on the same placements. Before timing, the floor's makespans
are checked equal to the kernel's on every placement (the semantics coincide there: no message overhead, no
transfer curves). Rounds alternate floor, kernel, evaluate and evaluate_valid, and the best round of each
counts; the ratios are printed, with the load average before and after. Graphs: ResNet-50 and Inception-V3
on malvik-4gpu, and synthetic graphs of 10,000 and 100,000 ops on nvlink-8gpu
(benchmarks/optimizer.py's generator), whose milliseconds per placement are printed too.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # optimizer.synthetic_graph for the floor's large graphs

import numpy as np  # noqa: E402

from placement_core import Problem, load_devices, load_network  # noqa: E402
from placement_core.problem import ProblemSpec  # noqa: E402
from placement_core.simulate import kernel_available  # noqa: E402


def with_curves(devices, points: int):
    """Every channel with a measured-style transfer curve of ``points`` sizes (4 B .. 256 MiB), on its own
    latency + bytes / (bandwidth * 0.25) line: what a curve lookup costs, at the same results."""
    from placement_core.model.devices import Channel, DeviceGraph
    sizes = np.geomspace(4, 2**28, points)
    chans = [Channel(c.name, c.bandwidth, c.latency, c.routes,
                     transfer_curve=tuple((float(b), c.latency + float(b) / (c.bandwidth * 0.25)) for b in sizes))
             for c in devices.channels]
    return DeviceGraph(devices.name, list(devices.devices), chans)


def measure(network: str, devices: str, evaluations: int, reference_evals: int, spec: ProblemSpec,
            curve_points: int = 0, clock=time.perf_counter, sharding: int = 0) -> dict:
    graph = load_devices(devices)
    if sharding:
        from placement_core.model.sharding import search_splits
        spec = spec.replace(splits=search_splits(graph, ["channel", "batch"], sharding))
    problem = spec.build(load_network(network), with_curves(graph, curve_points) if curve_points else graph)
    rng = np.random.default_rng(0)
    extra = {}
    if sharding:
        from placement_core.optimize import problem_for
        from placement_core.optimize.genes import gene_space
        from placement_core.optimize.seeding import initial_placements
        problem = problem_for(problem, "data-parallel")
        placements = gene_space(problem).draw(rng, np.broadcast_to(np.arange(problem.n_ops),
                                                                   (evaluations, problem.n_ops)))
        placements = np.ascontiguousarray(placements, dtype=np.int32)
        dp = initial_placements(problem, "data-parallel").placements[0]
        t = clock()
        for _ in range(max(evaluations // 10, 1)):
            problem.evaluate(dp)
        extra["data_parallel_evals_per_s"] = max(evaluations // 10, 1) / (clock() - t)
        extra["split_share"] = float(np.mean(placements >= problem.n_devices))
    else:
        placements = rng.integers(0, problem.n_devices, (evaluations, problem.n_ops)).astype(np.int32)
    problem.evaluate(placements[0])  # warm up
    t = clock()
    for p in placements:
        problem.evaluate(p)
    single = evaluations / (clock() - t)
    t = clock()
    problem.evaluate_many(placements)
    batched = evaluations / (clock() - t)
    slow = Problem(problem.graph, problem.devices, settings=problem.settings, fast=False, splits=problem.splits)
    t = clock()
    for p in placements[:reference_evals]:
        slow.evaluate(p)
    reference = reference_evals / (clock() - t)
    return {"ops": problem.n_ops, "evals_per_s": single, "batched_evals_per_s": batched,
            "reference_evals_per_s": reference, **extra}


FLOOR_SOURCE = Path(__file__).resolve().parent / "floor.c"
FLOOR_GRAPHS = {"resnet50": ("resnet50", "malvik-4gpu", 2000), "inception_v3": ("inception_v3", "malvik-4gpu", 1000),
                "synthetic10k": (10_000, "nvlink-8gpu", 20), "synthetic100k": (100_000, "nvlink-8gpu", 3)}


def floor_library():
    """benchmarks/floor.c built with the system cc into a temporary shared library, loaded with ctypes."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise SystemExit("--floor needs a C compiler (cc)")
    out = Path(tempfile.mkdtemp(prefix="placement-floor-")) / "floor.so"
    subprocess.run([cc, "-O2", "-std=c99", "-shared", "-fPIC", str(FLOOR_SOURCE), "-o", str(out)], check=True)
    lib = ctypes.CDLL(str(out))
    lib.floor_run.restype = ctypes.c_int
    return lib


def floor_makespans(lib, compiled, placements: np.ndarray) -> np.ndarray:
    c = compiled
    placements = np.ascontiguousarray(placements, dtype=np.int32)
    out = np.empty(len(placements))
    ptr = lambda a: a.ctypes.data_as(ctypes.c_void_p)  # noqa: E731
    arrays = [np.ascontiguousarray(a) for a in (c.par_ptr, c.par_idx, c.par_grad, c.ch_ptr, c.ch_idx, c.ch_bytes,
                                                c.fwd, c.bwd, c.upd, c.has_update, c.route, c.ch_latency,
                                                c.ch_inv_rate, c.min_transfer, c.input_ops)]
    status = lib.floor_run(ctypes.c_int(c.n_ops), ctypes.c_int(c.n_dev), ctypes.c_int(c.n_ch),
                           *[ptr(a) for a in arrays[:-1]], ptr(arrays[-1]), ctypes.c_int(len(c.input_ops)),
                           ptr(placements), ctypes.c_int(len(placements)), ptr(out))
    if status:
        raise MemoryError("floor_run")
    return out


def floor_problem(name: str) -> Problem:
    graph, devices, _ = FLOOR_GRAPHS[name]
    if isinstance(graph, int):
        from optimizer import synthetic_graph
        net = synthetic_graph(graph)
    else:
        net = load_network(graph)
    return Problem(net, load_devices(devices))


def measure_floor(name: str, lib, rounds: int, clock, evaluations: int | None = None) -> dict:
    """Seconds per placement of the floor, the kernel (run_many) and Problem.evaluate, best of ``rounds``
    alternating rounds, after checking the floor's makespans equal the kernel's."""
    problem = floor_problem(name)
    count = evaluations or FLOOR_GRAPHS[name][2]
    placements = np.random.default_rng(0).integers(0, problem.n_devices, (count, problem.n_ops)).astype(np.int32)
    sim = problem.simulator
    out = np.empty((count, sim._out_len))
    sim._kernel.run_many(placements, out)
    floor = floor_makespans(lib, problem.compiled, placements)
    same = int(np.sum(floor == out[:, 0]))
    if same != count:
        raise SystemExit(f"{name}: the floor's makespans differ from the kernel's on {count - same} of {count} "
                         "placements")
    best = {"floor": float("inf"), "kernel": float("inf"), "evaluate": float("inf"), "evaluate_valid": float("inf")}
    evaluate = problem.evaluate
    for _ in range(rounds):
        t = clock()
        floor_makespans(lib, problem.compiled, placements)
        best["floor"] = min(best["floor"], (clock() - t) / count)
        t = clock()
        sim._kernel.run_many(placements, out)
        best["kernel"] = min(best["kernel"], (clock() - t) / count)
        t = clock()
        for p in placements:
            evaluate(p)
        best["evaluate"] = min(best["evaluate"], (clock() - t) / count)
        t = clock()
        problem.evaluate_valid(placements)
        best["evaluate_valid"] = min(best["evaluate_valid"], (clock() - t) / count)
    return {"ops": problem.n_ops, "devices": FLOOR_GRAPHS[name][1], "placements": count, "same_makespans": same,
            **{f"{k}_s": v for k, v in best.items()},
            "kernel_ratio": best["kernel"] / best["floor"], "evaluate_ratio": best["evaluate"] / best["floor"],
            "evaluate_valid_ratio": best["evaluate_valid"] / best["floor"]}


def floor_main(args) -> None:
    lib = floor_library()
    clock = time.process_time if args.cpu_time else time.perf_counter
    names = args.floor_graphs.split(",")
    unknown = sorted(set(names) - set(FLOOR_GRAPHS))
    if unknown:
        raise SystemExit(f"unknown floor graph {unknown[0]!r}; known: {', '.join(FLOOR_GRAPHS)}")
    results = {"load_average": os.getloadavg(), "clock": "cpu" if args.cpu_time else "wall",
               **{name: measure_floor(name, lib, args.rounds, clock) for name in names}}
    results["load_average_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(results, indent=1))
        return
    print(f"kernel and Problem.evaluate against the floor (benchmarks/floor.c); best of {args.rounds} alternating "
          f"rounds per {results['clock']} second; load average {results['load_average'][0]:.2f} before, "
          f"{results['load_average_after'][0]:.2f} after")
    for name in names:
        r = results[name]
        print(f"{name:14s} {r['ops']:6d} ops on {r['devices']:12s} floor {r['floor_s'] * 1e6:10.1f} us  "
              f"kernel {r['kernel_s'] * 1e6:10.1f} us (x{r['kernel_ratio']:.2f})  "
              f"evaluate {r['evaluate_s'] * 1e6:10.1f} us (x{r['evaluate_ratio']:.2f})  "
              f"evaluate_valid {r['evaluate_valid_s'] * 1e6:10.1f} us (x{r['evaluate_valid_ratio']:.2f})  "
              f"[{r['same_makespans']}/{r['placements']} makespans equal]")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print {network: evaluations per second}")
    ap.add_argument("--evaluations", type=int, default=5000)
    ap.add_argument("--devices", default="malvik-4gpu")
    ap.add_argument("--schedule", default="thesis")
    ap.add_argument("--micro-batches", type=int, default=1)
    ap.add_argument("--virtual-stages", type=int, default=1)
    ap.add_argument("--curve-points", type=int, default=0,
                    help="give every channel a transfer curve of this many sizes (default 0: none)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="evaluations per CPU second of this process instead of per wall second (steadier on a "
                         "shared machine, where other work takes turns on the core)")
    ap.add_argument("--sharding", type=int, default=0, metavar="K",
                    help="split ops: a split table over 2..K devices, placements drawn half devices, half splits, "
                         "and data parallelism (default 0: whole ops only)")
    ap.add_argument("--floor", action="store_true",
                    help="compare the kernel and Problem.evaluate with a minimal list scheduler in C (the floor)")
    ap.add_argument("--floor-graphs", default=",".join(FLOOR_GRAPHS),
                    help="graphs for --floor (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=5, help="alternating rounds for --floor; the best counts")
    args = ap.parse_args()
    if args.floor:
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
        floor_main(args)
        return
    spec = ProblemSpec(schedule=args.schedule, micro_batches=args.micro_batches, virtual_stages=args.virtual_stages)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    clock = time.process_time if args.cpu_time else time.perf_counter
    results = {net: measure(net, args.devices, args.evaluations, 200 if args.schedule == "thesis" else 20, spec,
                            args.curve_points, clock, args.sharding)
               for net in ("resnet50", "inception_v3")}
    if args.json:
        print(json.dumps({net: round(r["evals_per_s"], 1) for net, r in results.items()}))
        return
    print(f"compiled kernel: {'yes' if kernel_available() else 'NO (pure Python fallback)'}; "
          f"devices {args.devices}"
          + (f" (every channel with a {args.curve_points}-point transfer curve)" if args.curve_points else "")
          + f"; schedule {args.schedule}; {args.evaluations} random placements; one core"
          + (f"; split table over 2..{args.sharding} devices" if args.sharding else "")
          + f"; per {'CPU' if args.cpu_time else 'wall'} second")
    for net, r in results.items():
        print(f"{net:13s} {r['ops']:4d} ops  {r['evals_per_s']:9.0f} evals/s  "
              f"(batched {r['batched_evals_per_s']:.0f}/s, Python reference {r['reference_evals_per_s']:.0f}/s)"
              + (f"; {r['split_share']:.0%} of genes split; data parallel {r['data_parallel_evals_per_s']:.0f} "
                 "evals/s" if "split_share" in r else ""))


if __name__ == "__main__":
    main()
