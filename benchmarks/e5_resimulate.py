"""A stored E5 series re-simulated: each run's placements with the run's own calibration files, as stored and
with what `placement calibrate` now derives from the same measured curves (the all-reduce's share of the CPU
ranks' cores, docs/e5.md), against the run's measured medians. Nothing is measured again.

    python benchmarks/e5_resimulate.py docs/e5/resnet18-runs-2026-11-28 torchvision:resnet18 2,3,32,32 32
"""
import csv
import json
import sys
from pathlib import Path


def traced(source: str, shape, batch: int):
    """The E5 model's graph as the series simulated it (traced with seed 0, at the run's batch)."""
    from placement_core.torch.model_import import trace_model
    from placement_core.torch.sources import load_model, parse_source
    src = parse_source(source)
    return trace_model(load_model(src, seed=0), shape, name=src.default_name).graph.with_batch_size(batch)


def run_folders(series: Path, runs=None) -> list[Path]:
    """The series' run folders in order, only those named in ``runs`` when given."""
    return [p for p in sorted(series.glob("run*")) if p.is_dir() and (runs is None or p.name in runs)]


def resimulate(series: Path, source: str, shape, batch: int, runs=None) -> list[dict]:
    """Per run: Kendall tau, Pearson r and MAPE each way, the data-parallel step and the measured-best single
    device (simulated and measured seconds), and whether the simulator orders them as measured."""
    from placement_core import load_devices
    from placement_core.analysis.calibration_collectives import collective_share
    from placement_core.cost.timings import read_timings, timing_table
    from placement_core.experiments.e5 import metrics
    from placement_core.model.devices import DeviceGraph, SharedResource
    from placement_core.model.placement import placement_from_dict
    from placement_core.problem import Problem
    graph = traced(source, shape, batch)
    out = []
    for run in run_folders(series, runs):
        stored = load_devices(str(run / "calibration/devices.json"))
        ratio, coll = collective_share(stored.collectives)
        capacity = stored.shared[0].capacity if stored.shared else float(len(stored.devices))
        now = DeviceGraph(stored.name, list(stored.devices), list(stored.channels), collectives=stored.collectives,
                          shared=[SharedResource("cpu-cores", tuple(stored.names), capacity, collective_demand=coll)]
                          if coll > 0 or stored.shared else [])
        doc = read_timings(run / "calibration/timings.json")
        rows = {r["label"]: r for r in csv.DictReader(open(run / "results.csv")) if r["status"] == "ok"}
        places = [p for p in json.load(open(run / "placements.json"))["placements"] if p["label"] in rows]
        meas = [float(rows[p["label"]]["measured_median_s"]) for p in places]
        labels = [p["label"] for p in places]
        dp = labels.index("data parallel") if "data parallel" in labels else None
        best = min((i for i, lab in enumerate(labels) if lab.startswith("single:")), key=lambda i: meas[i])
        entry = {"run": run.name, "allreduce_busy_over_alone": ratio, "collective_demand": coll}
        for name, devs in (("as stored", stored), ("with the all-reduce's share of the cores", now)):
            splits: list = []
            genes = [placement_from_dict({"format": "placement/1", "assignment": p["assignment"]}, graph, devs,
                                         splits=splits) for p in places]
            prob = Problem(graph, devs, timings=timing_table(doc, graph)).with_splits(tuple(splits))
            sim = [prob.simulate(g).result.batch_time for g in genes]
            got = metrics(sim, meas)
            if dp is not None:
                got["data_parallel_s"] = (sim[dp], meas[dp])
                got["best_single"] = (labels[best], sim[best], meas[best])
                got["ordered_as_measured"] = (sim[dp] < sim[best]) == (meas[dp] < meas[best])
            entry[name] = got
        out.append(entry)
    return out


def main() -> None:
    series, source = Path(sys.argv[1]), sys.argv[2]
    shape, batch = tuple(int(s) for s in sys.argv[3].split(",")), int(sys.argv[4])
    print(json.dumps(resimulate(series, source, shape, batch), indent=1))


if __name__ == "__main__":
    main()
