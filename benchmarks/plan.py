"""How long `placement plan` takes: one plan, and a whole search.

    python benchmarks/plan.py [--json]

One plan of a GPT-3-sized model (96 layers, hidden 12,288, 96 heads, sequences of 2,048; 175 B parameters)
on 32 DGX A100 nodes (256 GPUs, the most a device graph holds today: docs/clusters.md), pipeline 16 × data
parallel 16; and the search over every pipeline × data-parallel × micro-batch plan of a 1.3 B model on 4 nodes.
CPU seconds of this process (the machine may be shared), with the load average.
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
from placement_core.optimize.plans import PlanRequest, gpus_of, plan, simulate_plan  # noqa: E402

BIG = "gpt:layers=96,hidden=12288,heads=96,seq=2048"
SMALL = "gpt:layers=24,hidden=2048,heads=16,seq=2048"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    out = {"load_average": os.getloadavg()}
    t = time.process_time()
    devices = load_devices("dgx-a100:nodes=32")
    graph = load_network(BIG)
    p, _ = simulate_plan(graph, devices, gpus_of(devices), 16, 16, 1, PlanRequest(global_batch=256))
    out["one_plan"] = {"network": BIG, "gpus": 256, "pp": 16, "dp": 16, "micro_batches": p.micro_batches,
                       "cpu_s": time.process_time() - t, "step_time_s": p.step_time_s, "fits": p.fits}
    t = time.process_time()
    plans = plan(load_network(SMALL), load_devices("dgx-a100:nodes=4"), PlanRequest(global_batch=128))
    out["search"] = {"network": SMALL, "gpus": 32, "plans": len(plans), "cpu_s": time.process_time() - t,
                     "best": {k: getattr(plans[0], k) for k in ("pp", "dp", "micro_batch", "step_time_s")}}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    o, s = out["one_plan"], out["search"]
    print(f"load average {out['load_average'][0]:.2f}")
    print(f"one plan: {BIG} on 256 GPUs (pp 16 x dp 16, {o['micro_batches']} micro-batches): {o['cpu_s']:.1f} CPU s, "
          f"step {o['step_time_s']:.2f} s, fits {o['fits']}")
    print(f"search: {SMALL} on 32 GPUs, {s['plans']} plans: {s['cpu_s']:.1f} CPU s; best pp {s['best']['pp']} x dp "
          f"{s['best']['dp']}, micro-batch {s['best']['micro_batch']}, step {s['best']['step_time_s']:.3f} s")


if __name__ == "__main__":
    main()
