"""How long `placement plan` takes: one plan, and a whole search, on materialised and folded clusters.

    python benchmarks/plan.py [--json] [--quick]

* one plan of a GPT-3-sized model (96 layers, hidden 12,288, 96 heads, sequences of 2,048; 175 B parameters)
  on 32 DGX A100 nodes (256 GPUs, the largest device graph materialised pair by pair: docs/clusters.md),
  pipeline 16 × data parallel 16, unfolded;
* the search over every pipeline × data-parallel × micro-batch plan of a 1.3 B model on 4 nodes (tp 1: the
  network is given without its gpt: configuration, as before);
* issue 28's targets, with the data-parallel replicas folded (optimize/plan_fold.py): one plan of Narayanan et
  al.'s (SC'21, Table 1) 1-trillion-parameter GPT (128 layers, hidden 25,600, 160 heads; 1,008 B parameters by
  the family's closed form) on 3,072 GPUs as their table runs it (tp 8 × pp 64 × dp 6, global batch 3,072,
  micro-batch 1, full recomputation), at most 5 s; and the search over every tensor × pipeline × data-parallel
  plan of their 145.6 B model (80 layers, hidden 12,288, 96 heads; global batch 2,304) on 1,536 GPUs with
  micro-batch 1 and full recomputation, at most 2 minutes. ``--quick`` leaves that search out.

CPU seconds of this process (the machine may be shared) and wall seconds, with the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from placement_core import load_devices, load_network  # noqa: E402
from placement_core.families import gpt  # noqa: E402
from placement_core.formats.clusters import Cluster  # noqa: E402
from placement_core.optimize.plans import PlanRequest, gpus_of, plan, simulate_plan  # noqa: E402

BIG = "gpt:layers=96,hidden=12288,heads=96,seq=2048"
SMALL = "gpt:layers=24,hidden=2048,heads=16,seq=2048"
TRILLION = "gpt:layers=128,hidden=25600,heads=160,seq=2048"
MEGATRON_1536 = "gpt:layers=80,hidden=12288,heads=96,seq=2048"


def _timed(fn):
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - cpu, time.perf_counter() - wall


def _pick(p) -> dict:
    return {k: getattr(p, k) for k in ("tp", "pp", "dp", "micro_batch", "step_time_s", "fits")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="leave out the 1,536-GPU search (about a minute)")
    args = ap.parse_args()
    out = {"load_average": os.getloadavg()}

    def one_plan():
        devices = load_devices("dgx-a100:nodes=32")
        return simulate_plan(load_network(BIG), devices, gpus_of(devices), 16, 16, 1, PlanRequest(global_batch=256))[0]
    p, cpu, wall = _timed(one_plan)
    out["one_plan"] = {"network": BIG, "gpus": 256, **_pick(p), "micro_batches": p.micro_batches, "cpu_s": cpu,
                       "wall_s": wall}
    plans, cpu, wall = _timed(lambda: plan(load_network(SMALL), load_devices("dgx-a100:nodes=4"),
                                           PlanRequest(global_batch=128)))
    out["search"] = {"network": SMALL, "gpus": 32, "plans": len(plans), "cpu_s": cpu, "wall_s": wall,
                     "best": _pick(plans[0])}

    def trillion():
        cluster = Cluster("dgx-a100", 384)
        req = PlanRequest(global_batch=3072, tp=8, micro_batch=1, recompute="full")
        return simulate_plan(load_network(TRILLION), cluster, gpus_of(cluster), 64, 6, 1, req,
                             gpt.parse(TRILLION))[0]
    p, cpu, wall = _timed(trillion)
    out["trillion_plan"] = {"network": TRILLION, "parameters": gpt.parse(TRILLION).parameters(), "gpus": 3072,
                            **_pick(p), "micro_batches": p.micro_batches, "cpu_s": cpu, "wall_s": wall,
                            "data_parallel_comm_s": p.breakdown["data_parallel_comm_s"]}
    if not args.quick:
        req = PlanRequest(global_batch=2304, micro_batch=1, recompute="full")
        plans, cpu, wall = _timed(lambda: plan(load_network(MEGATRON_1536), Cluster("dgx-a100", 192), req,
                                               gpt.parse(MEGATRON_1536)))
        out["search_1536"] = {"network": MEGATRON_1536, "gpus": 1536, "plans": len(plans), "cpu_s": cpu,
                              "wall_s": wall, "best": _pick(plans[0])}
    out["load_average_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"load average {out['load_average'][0]:.2f} before, {out['load_average_after'][0]:.2f} after")
    o, s, t = out["one_plan"], out["search"], out["trillion_plan"]
    print(f"one plan: {BIG} on 256 GPUs (pp 16 x dp 16, {o['micro_batches']} micro-batches, unfolded): "
          f"{o['cpu_s']:.1f} CPU s, {o['wall_s']:.1f} s wall, step {o['step_time_s']:.2f} s, fits {o['fits']}")
    print(f"search: {SMALL} on 32 GPUs, {s['plans']} plans: {s['cpu_s']:.1f} CPU s, {s['wall_s']:.1f} s wall; best "
          f"tp {s['best']['tp']} x pp {s['best']['pp']} x dp {s['best']['dp']}, micro-batch "
          f"{s['best']['micro_batch']}, step {s['best']['step_time_s']:.3f} s")
    print(f"one plan: {TRILLION} ({t['parameters'] / 1e9:,.1f} B parameters) on 3,072 GPUs (tp 8 x pp 64 x dp 6, "
          f"{t['micro_batches']} micro-batches, full recomputation, folded): {t['cpu_s']:.1f} CPU s, "
          f"{t['wall_s']:.1f} s wall (target 5 s); step {t['step_time_s']:.2f} s, data-parallel all-reduce "
          f"{t['data_parallel_comm_s']:.2f} s, fits {t['fits']}")
    if "search_1536" in out:
        s = out["search_1536"]
        print(f"search: {MEGATRON_1536} on 1,536 GPUs (global batch 2,304, micro-batch 1, full recomputation, "
              f"folded), {s['plans']} plans: {s['cpu_s']:.1f} CPU s, {s['wall_s']:.1f} s wall (target 120 s); best "
              f"tp {s['best']['tp']} x pp {s['best']['pp']} x dp {s['best']['dp']}, step "
              f"{s['best']['step_time_s']:.2f} s")


if __name__ == "__main__":
    main()
