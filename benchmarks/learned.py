"""Learned placers' speed: a policy's zero-shot placement (the dashboard's one click), one core.

    python benchmarks/learned.py [--json] [--repeats N]

Times ``placement_core.torch.policies.place`` (features, HEFT start, one greedy
pass) for each shipped policy on Inception-V3 (315 ops, the "300 ops" of the
target: at most 1 s) and on a 160-node nmt test graph, the median of N runs
after a warm-up, and prints the machine's load average with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from placement_core import load_devices, load_network  # noqa: E402
from placement_core.families import family_graph  # noqa: E402
from placement_core.problem import ProblemSpec  # noqa: E402


def main() -> None:
    from placement_core.torch.policies import load_policy, place
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    devices = load_devices("malvik-4gpu")
    graphs = {"inception_v3": load_network("inception_v3"), "nmt-s0-001": family_graph("nmt", 0, 1).graph}
    policies = sorted((Path(__file__).resolve().parent.parent / "assets" / "policies").glob("*malvik-4gpu.json"))
    out = {}
    for path in policies:
        policy = load_policy(path)
        for name, graph in graphs.items():
            if policy.method == "gdp" and len(devices) != policy.config.get("devices"):
                continue
            problem = ProblemSpec().build(graph, devices)
            place(policy, problem)  # warm-up
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                place(policy, problem)
                times.append(time.perf_counter() - t)
            out[f"{path.stem} / {name} ({problem.n_ops} ops)"] = statistics.median(times)
    load = os.getloadavg()
    if args.json:
        print(json.dumps({"seconds": out, "load": load}))
        return
    for k, v in out.items():
        print(f"{k:70s} {v * 1e3:8.0f} ms")
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
