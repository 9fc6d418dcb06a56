"""HEFT's speed on large networks: a training-step plan for 10,000 and 50,000 ops.

    python benchmarks/heft.py [--ops 10000 50000] [--devices malvik-4gpu] [--reference] [--json]

The network is a deep random DAG shaped like a residual network (each op reads the
previous one and, now and then, one a few ops back), with roofline costs, so every op
has a forward, a backward and (for ops with weights) an update task: 2-3 tasks per op.
Times the plan alone (``heft_schedule``), without the simulator's verdict, on one core: wall
time and the process's CPU time (steadier on a shared machine). ``--reference`` times the
former quadratic implementation kept in tests/heft_reference.py instead (the "before").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from placement_core import Problem, load_devices  # noqa: E402
from placement_core.model.graph import Graph, Op  # noqa: E402
from placement_core.optimize.heft import heft_schedule  # noqa: E402


def deep_network(n: int, seed: int = 0) -> Graph:
    """``n`` ops: a chain with skip connections (1 in 4 ops also reads an op 2-8 back), varied sizes."""
    rng = np.random.default_rng(seed)
    ops = []
    for i in range(n):
        inputs = []
        if i:
            inputs.append(f"op{i - 1}")
            if i > 8 and rng.random() < 0.25:
                inputs.append(f"op{i - int(rng.integers(2, 9))}")
        weights = float(rng.choice([0.0, rng.uniform(1e4, 4e6)]))
        ops.append(Op(f"op{i}", kind="conv" if weights else "relu", inputs=tuple(inputs),
                      fwd_flops=float(rng.uniform(1e6, 5e9)), bwd_flops=float(rng.uniform(2e6, 1e10)),
                      output_bytes=float(rng.uniform(1e4, 2e7)), param_bytes=weights,
                      mem_bytes=float(rng.uniform(1e4, 4e7))))
    return Graph(f"deep-{n}", ops)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, nargs="+", default=[10000, 50000])
    ap.add_argument("--devices", default="malvik-4gpu")
    ap.add_argument("--reference", action="store_true", help="time the former, quadratic implementation")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    schedule = heft_schedule
    if args.reference:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from heft_reference import reference_schedule as schedule
    devices = load_devices(args.devices)
    results = {}
    for n in args.ops:
        problem = Problem(deep_network(n), devices)
        t, cpu = time.perf_counter(), time.process_time()
        plan = schedule(problem)
        wall, cpu = time.perf_counter() - t, time.process_time() - cpu
        end = plan.end if hasattr(plan, "end") else plan[3]
        results[n] = {"tasks": len(end), "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                      "planned_makespan_s": float(end.max())}
        if not args.json:
            print(f"{n:>7,} ops ({len(end):,} tasks) on {args.devices}: {wall:7.2f} s wall, {cpu:7.2f} s CPU, "
                  f"planned makespan {end.max():.6g} s", flush=True)
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
