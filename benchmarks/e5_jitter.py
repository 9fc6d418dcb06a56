"""How steady a stored E5 run's simulation is: the data-parallel placement and the best single device of each
run simulated with the run's own calibration, as the point, under a small jitter of every op time (each
forward and backward drawn with the same relative spread, ``--jitter``), and under the calibration's own
spread (the 90 % interval's draws). A simulation whose jittered range is wide is decided by ties in timing,
not by the hardware (docs/e5.md, "The three-run series"). Nothing is measured again.

    python benchmarks/e5_jitter.py docs/e5/resnet18-runs torchvision:resnet18 2,3,32,32 32 [--jitter 0.001]
"""
import argparse
import csv
import json
from dataclasses import replace
from pathlib import Path

import numpy as np


def jitter(series: Path, source: str, shape, batch: int, spread: float = 1e-3, samples: int = 64,
           runs=None) -> list[dict]:
    """Per run and placement (data parallel, the measured-best single device): milliseconds of the point
    simulation, the jittered minimum, median and maximum, the median of the calibration-spread draws, and the
    measured median."""
    from placement_core import load_devices
    from placement_core.analysis import uncertainty
    from placement_core.cost.timings import read_timings, timing_table
    from placement_core.model.placement import placement_from_dict
    from placement_core.problem import Problem
    from e5_resimulate import run_folders, traced

    graph = traced(source, shape, batch)
    out = []
    for run in run_folders(series, runs):
        devs = load_devices(str(run / "calibration/devices.json"))
        doc = read_timings(run / "calibration/timings.json")
        rows = {r["label"]: r for r in csv.DictReader(open(run / "results.csv")) if r["status"] == "ok"}
        singles = [lab for lab in rows if lab.startswith("single:")]
        best = min(singles, key=lambda lab: float(rows[lab]["measured_median_s"]))
        wanted = [lab for lab in ("data parallel", best) if lab in rows]
        places = {p["label"]: p for p in json.load(open(run / "placements.json"))["placements"]}
        splits: list = []
        genes = np.array([placement_from_dict({"format": "placement/1", "assignment": places[lab]["assignment"]},
                                              graph, devs, splits=splits) for lab in wanted])
        prob = Problem(graph, devs, timings=timing_table(doc, graph)).with_splits(tuple(splits))
        table = prob.profile.timings
        even = {op: {d: {**v, "fwd_spread": spread, "bwd_spread": spread} for d, v in per.items()}
                for op, per in table.items()}
        jittered = Problem(prob.graph, prob.devices, profile=replace(prob.profile, timings=even),
                           settings=prob.settings, penalty=prob.penalty, splits=prob.splits)
        point = prob.evaluate_valid(genes)
        lo, mid, hi = np.quantile(uncertainty.draws(jittered, genes, samples=samples), [0, 0.5, 1], axis=0)
        own = (np.median(uncertainty.draws(prob, genes, samples=samples), axis=0)
               if uncertainty.has_spread(prob) else [None] * len(wanted))
        for i, lab in enumerate(wanted):
            out.append({"run": run.name, "placement": lab, "point_ms": point[i] * 1e3,
                        "jitter_ms": [lo[i] * 1e3, mid[i] * 1e3, hi[i] * 1e3],
                        "calibration_draws_median_ms": None if own[i] is None else float(own[i]) * 1e3,
                        "measured_ms": float(rows[lab]["measured_median_s"]) * 1e3,
                        "shared": [(r.name, round(r.capacity, 3), round(r.collective_demand, 3)) for r in devs.shared]})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("series", type=Path)
    ap.add_argument("source")
    ap.add_argument("shape")
    ap.add_argument("batch", type=int)
    ap.add_argument("--jitter", type=float, default=1e-3, help="relative spread of every op time (default 0.001)")
    ap.add_argument("--samples", type=int, default=64)
    a = ap.parse_args()
    for r in jitter(a.series, a.source, tuple(int(s) for s in a.shape.split(",")), a.batch, a.jitter, a.samples):
        lo, mid, hi = r["jitter_ms"]
        own = r["calibration_draws_median_ms"]
        print(f"{r['run']:<5} {r['placement']:<14} point {r['point_ms']:7.1f} ms   jittered {lo:7.1f} / {mid:7.1f} / "
              f"{hi:7.1f} ms   calibration draws' median {'-' if own is None else f'{own:7.1f}'} ms   "
              f"measured {r['measured_ms']:7.1f} ms   shared {r['shared']}")


if __name__ == "__main__":
    main()
