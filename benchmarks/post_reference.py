"""How far below one GPU can a placement go? The references for Post's comparison (docs/learned.md).

    python benchmarks/post_reference.py [--networks resnet50,inception_v3] [--devices malvik-4gpu]
                                        [--budget 200000] [--json]

For each network (a built-in name or a network file) at its own batch size on the device graph (a preset or a
file), with the default spec (thesis schedule, one batch):

- two lower bounds that ignore communication: the critical path of the training step (forward then backward
  along the longest chain, every op on its fastest device, transfers free) and the whole step's work spread evenly
  over the GPUs;
- the best placement found by searches much longer than Post's 20,000 evaluations: simulated annealing and hill
  climbing (``--budget`` evaluations each, starting from every op on one GPU), the GA and MAP-Elites (half that,
  with every single-device placement in their first population/archive), seed 0;

each as a multiple of the best single GPU's objective (Post's Table 1 "Single GPU").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from placement_core import load_devices, load_network  # noqa: E402
from placement_core.optimize import run  # noqa: E402
from placement_core.problem import ProblemSpec  # noqa: E402


def bounds(problem) -> tuple[float, float]:
    c = problem.costs
    step = np.asarray(c.fwd + c.bwd, dtype=float).min(axis=1)
    longest = np.zeros(problem.n_ops)
    for i, parents in enumerate(problem.graph.parents):
        longest[i] = step[i] + max((longest[j] for j in parents), default=0.0)
    gpus = [i for i, d in enumerate(problem.devices.devices) if d.kind == "gpu"] or list(range(problem.n_devices))
    work = float(np.asarray(c.fwd + c.bwd + c.update, dtype=float)[:, gpus].min(axis=1).sum()) / len(gpus)
    return float(longest.max()), work


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--networks", default="resnet50,inception_v3")
    ap.add_argument("--devices", default="malvik-4gpu")
    ap.add_argument("--budget", type=int, default=200_000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out = {"load_average": os.getloadavg(), "networks": {}}
    for net in args.networks.split(","):
        problem = ProblemSpec().build(load_network(net), load_devices(args.devices))
        gpus = [i for i, d in enumerate(problem.devices.devices) if d.kind == "gpu"] or [0]
        singles = problem.evaluate_many(np.repeat(np.array(gpus, dtype=np.int32)[:, None], problem.n_ops, axis=1))
        single = float(singles.min())
        one_gpu = np.full((1, problem.n_ops), gpus[int(np.argmin(singles))], dtype=np.int32)
        critical, work = bounds(problem)
        rows = {"single GPU": (single, 0, 0.0), "bound: critical path, free transfers": (critical, 0, 0.0),
                "bound: work spread over the GPUs": (work, 0, 0.0)}
        searches = [("annealing", args.budget, {}, one_gpu), ("hill-climbing", args.budget, {}, one_gpu),
                    ("ga", args.budget // 2, {"include_trivial": True}, None),
                    ("map-elites", args.budget // 2, {"include_trivial": True}, None)]
        for algorithm, budget, params, initial in searches:
            t = time.perf_counter()
            r = run(problem, algorithm, evaluations=budget, seed=0, params=params, initial=initial)
            rows[algorithm] = (r.best_objective, budget, time.perf_counter() - t)
            if not args.json:
                print(f"{net} {algorithm}: {r.best_objective / single:.4f} x one GPU", file=sys.stderr, flush=True)
        out["networks"][net] = {k: {"objective_s": v, "ratio": v / single, "evaluations": e, "wall_s": round(w, 1)}
                                for k, (v, e, w) in rows.items()}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"load average {' '.join(f'{x:.2f}' for x in out['load_average'])}")
    for net, rows in out["networks"].items():
        print(f"\n{net} on {args.devices}\n| reference | evaluations | s per batch | x one GPU |\n|---|---|---|---|")
        for k, v in rows.items():
            print(f"| {k} | {v['evaluations']:,} | {v['objective_s']:.4f} | {v['ratio']:.4f} |")


if __name__ == "__main__":
    main()
