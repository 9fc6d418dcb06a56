"""Simulated times with their 90 % intervals from a calibration's spread, for E5's kinds of placement.

    python benchmarks/e5_intervals.py --calibration DIR [--model torchvision:resnet18] [--input-shape 2,3,32,32]
                                      [--batch-size 32] [--samples 64]

DIR is what `placement calibrate --out DIR` wrote (devices.json, timings.json with fwd_spread/bwd_spread).
Ranks one device per rank, two even pipeline stages and data parallelism by simulated time, each with its
interval and whether the simulator can tell it from the placement above (docs/e5.md, "Uncertainty").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from placement_core import Problem, load_devices  # noqa: E402
from placement_core.analysis import uncertainty  # noqa: E402
from placement_core.analysis.pipeline import even_stages  # noqa: E402


def candidates(problem: Problem) -> dict[str, np.ndarray]:
    """One placement per device, two even stages, and every op that can be batch-split on all devices."""
    n, g, d = problem.n_ops, problem.graph, problem.devices
    out = {f"single:{name}": np.full(n, j, dtype=np.int32) for j, name in enumerate(d.names)}
    out["two stages"] = np.asarray(even_stages(g, d, 2), dtype=np.int32)
    batch = [k for k, s in enumerate(problem.splits) if s.dim == "batch" and len(s.devices) == len(d.names)]
    if batch:
        k = batch[0]
        out["data parallel"] = np.where(problem.allowed[:, k], problem.n_devices + k, 0).astype(np.int32)
    return out


def table(problem: Problem, samples: int = uncertainty.SAMPLES) -> list[dict]:
    chosen = candidates(problem)
    return uncertainty.ranking(problem, list(chosen.values()), labels=list(chosen), samples=samples) or []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calibration", required=True)
    ap.add_argument("--model", default="torchvision:resnet18")
    ap.add_argument("--input-shape", default="2,3,32,32")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--samples", type=int, default=uncertainty.SAMPLES)
    args = ap.parse_args()
    from placement_core.cost.timings import read_timings, timing_table
    from placement_core.experiments.e5 import sharded_table
    from placement_core.torch.model_import import trace_model
    from placement_core.torch.sources import load_model, parse_input_shape, parse_source

    src = parse_source(args.model)
    shape = parse_input_shape(args.input_shape)
    g = trace_model(load_model(src, seed=0), shape, name=src.default_name).graph.with_batch_size(args.batch_size)
    cal = Path(args.calibration)
    doc = read_timings(cal / "timings.json")
    p = Problem(g, load_devices(str(cal / "devices.json")), timings=timing_table(doc, g))
    p = p.with_splits(sharded_table(p))
    spreads = [v.get("fwd_spread", 0.0) for per in p.profile.timings.values() for v in per.values()]
    print(f"{sum(s > 0 for s in spreads)} of {len(spreads)} op entries carry a spread; median forward spread "
          f"{np.median(spreads):.1%}")
    t = time.perf_counter()
    rows = table(p, args.samples)
    print(f"{args.samples} draws in {time.perf_counter() - t:.1f} s\n")
    print("| placement | simulated (ms) | 90 % interval (ms) | told apart from the one above |")
    print("|---|---|---|---|")
    for r in rows:
        told = "" if r["faster_share"] is None else ("no" if r["tied_with_above"] else "yes") + \
            f" (faster in {r['faster_share']:.0%} of draws)"
        print(f"| {r['placement']} | {r['simulated_s'] * 1e3:.1f} | {r['low_s'] * 1e3:.1f} – "
              f"{r['high_s'] * 1e3:.1f} | {told} |")


if __name__ == "__main__":
    main()
