"""Simulator speed: evaluations per second (placement -> objective, no trace), one core.

    python benchmarks/simulator.py [--json] [--evaluations N] [--schedule S --micro-batches M --virtual-stages V]

Random placements of ResNet-50 and Inception-V3 on malvik-4gpu, one batch,
default profile, through Problem.evaluate (the path optimizers use), plus the
batched evaluate_many and the Python reference for comparison. ``--schedule``
measures a pipeline schedule instead of the thesis scheme (random placements,
so interleaved 1F1B gets a chunk per run of ops).
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


def measure(network: str, devices: str, evaluations: int, reference_evals: int, spec: ProblemSpec) -> dict:
    problem = spec.build(load_network(network), load_devices(devices))
    rng = np.random.default_rng(0)
    placements = rng.integers(0, problem.n_devices, (evaluations, problem.n_ops)).astype(np.int32)
    problem.evaluate(placements[0])  # warm up
    t = time.perf_counter()
    for p in placements:
        problem.evaluate(p)
    single = evaluations / (time.perf_counter() - t)
    t = time.perf_counter()
    problem.evaluate_many(placements)
    batched = evaluations / (time.perf_counter() - t)
    slow = Problem(problem.graph, problem.devices, settings=problem.settings, fast=False)
    t = time.perf_counter()
    for p in placements[:reference_evals]:
        slow.evaluate(p)
    reference = reference_evals / (time.perf_counter() - t)
    return {"ops": problem.n_ops, "evals_per_s": single, "batched_evals_per_s": batched,
            "reference_evals_per_s": reference}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="print {network: evaluations per second}")
    ap.add_argument("--evaluations", type=int, default=5000)
    ap.add_argument("--devices", default="malvik-4gpu")
    ap.add_argument("--schedule", default="thesis")
    ap.add_argument("--micro-batches", type=int, default=1)
    ap.add_argument("--virtual-stages", type=int, default=1)
    args = ap.parse_args()
    spec = ProblemSpec(schedule=args.schedule, micro_batches=args.micro_batches, virtual_stages=args.virtual_stages)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    results = {net: measure(net, args.devices, args.evaluations, 200 if args.schedule == "thesis" else 20, spec)
               for net in ("resnet50", "inception_v3")}
    if args.json:
        print(json.dumps({net: round(r["evals_per_s"], 1) for net, r in results.items()}))
        return
    print(f"compiled kernel: {'yes' if kernel_available() else 'NO (pure Python fallback)'}; "
          f"devices {args.devices}; schedule {args.schedule}; {args.evaluations} random placements; one core")
    for net, r in results.items():
        print(f"{net:13s} {r['ops']:4d} ops  {r['evals_per_s']:9.0f} evals/s  "
              f"(batched {r['batched_evals_per_s']:.0f}/s, Python reference {r['reference_evals_per_s']:.0f}/s)")


if __name__ == "__main__":
    main()
