"""Simulator speed: evaluations per second (placement -> objective, no trace), one core.

    python benchmarks/simulator.py [--json] [--evaluations N] [--curve-points K] [--cpu-time]
                                   [--schedule S --micro-batches M --virtual-stages V] [--sharding K]

Random placements of ResNet-50 and Inception-V3 on malvik-4gpu, one batch,
default profile, through Problem.evaluate (the path optimizers use), plus the
batched evaluate_many and the Python reference for comparison. ``--schedule``
measures a pipeline schedule instead of the thesis scheme (random placements,
so interleaved 1F1B gets a chunk per run of ops). ``--sharding K`` gives the problem a
split table (channel and batch over windows of 2..K devices of one kind, docs/sharding.md) and draws
the placements as the searches do (each gene a device or a split, half and half), and adds data
parallelism (every op split by batch over all the GPUs): what split ops cost.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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
    args = ap.parse_args()
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
