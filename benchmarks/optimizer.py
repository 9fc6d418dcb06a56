"""Optimizer speed: a 20,000-evaluation GA on ResNet-50 / malvik-4gpu-limited-resnet50.

    python benchmarks/optimizer.py [--json] [--budget N]

Runs once on one core (serial backend) and once with 2 worker processes. The
target is <= 10 s on one core.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from placement_core import Problem, load_devices, load_network  # noqa: E402
from placement_core.optimize import run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=20000)
    ap.add_argument("--algorithm", default="ga")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    problem = Problem(load_network("resnet50"), load_devices("malvik-4gpu-limited-resnet50"))
    results = {}
    for label, workers in (("one core", 1), ("2 workers", 2)):
        t = time.perf_counter()
        r = run(problem, args.algorithm, evaluations=args.budget, seed=0, workers=workers)
        results[label] = {"wall_s": time.perf_counter() - t, "best_objective_s": r.best_objective,
                          "evals_per_s": r.evaluations / (time.perf_counter() - t)}
    if args.json:
        print(json.dumps(results))
        return
    print(f"{args.algorithm}, {args.budget} evaluations, resnet50 on malvik-4gpu-limited-resnet50 "
          f"({os.cpu_count()} cores on this machine)")
    for label, r in results.items():
        print(f"{label:10s} {r['wall_s']:6.2f} s  ({r['evals_per_s']:,.0f} evals/s), best {r['best_objective_s']:.4f} s")


if __name__ == "__main__":
    main()
