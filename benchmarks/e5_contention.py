"""A/B on one E5 run's measurements: its calibration as stored, then with the collectives and the ranks'
contention measured now on two pinned gloo ranks (what `placement calibrate` adds, docs/torch.md), every
placement simulated each way; Pearson r, Kendall tau and MAPE against the measured medians, and the
data-parallel placement's simulated and measured step.

    python benchmarks/e5_contention.py docs/e5/resnet18-batchfit torchvision:resnet18 2,3,32,32 32
"""
import csv
import json
import os
import sys
from pathlib import Path

SIZES = [4096, 65536, 1 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20]


def rank_main(rank: int, store: str, out: str) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    from placement_core.torch.collective_probe import COLLECTIVES, collective_times, contention
    os.sched_setaffinity(0, {rank % os.cpu_count()})  # one core and one thread per rank, as E5's ranks
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=600))
    device = torch.device("cpu")
    alone, together = contention(device, rank, 2)
    events = [{"event": "contention", "device": f"cpu{rank}", "alone_s": alone, "together_s": together}]
    fn = COLLECTIVES["allreduce"]
    events.append({"event": "collective", "op": "allreduce", "device": f"cpu{rank}", "devices": ["cpu0", "cpu1"],
                   "sizes": SIZES, "seconds": collective_times(fn, SIZES, 2, device, busy=False),
                   "busy_seconds": collective_times(fn, SIZES, 2, device, busy=True)})
    Path(f"{out}.{rank}").write_text(json.dumps(events))
    dist.destroy_process_group()


def measure() -> tuple[list, list]:
    import tempfile

    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(rank_main, args=(f"{tmp}/store", f"{tmp}/events"), nprocs=2)
        events = [e for r in range(2) for e in json.loads(Path(f"{tmp}/events.{r}").read_text())]
    return ([e for e in events if e["event"] == "collective"], [e for e in events if e["event"] == "contention"])


def main() -> None:
    from placement_core import load_devices
    from placement_core.analysis.calibration_collectives import with_collectives
    from placement_core.analysis.calibration_fit import Calibration
    from placement_core.cost.timings import read_timings, timing_table
    from placement_core.experiments.e5 import metrics
    from placement_core.model.devices import DeviceGraph
    from placement_core.model.placement import placement_from_dict
    from placement_core.problem import Problem
    from placement_core.torch.model_import import trace_model
    from placement_core.torch.sources import load_model, parse_source

    run, source = Path(sys.argv[1]), sys.argv[2]
    shape, batch = tuple(int(s) for s in sys.argv[3].split(",")), int(sys.argv[4])
    src = parse_source(source)
    graph = trace_model(load_model(src, seed=0), shape, name=src.default_name).graph.with_batch_size(batch)
    stored = load_devices(str(run / "calibration/devices.json"))
    doc = read_timings(run / "calibration/timings.json")
    collectives, contention = measure()
    measured = with_collectives(Calibration(stored, doc, {}), collectives, contention)
    both = measured.devices
    only_ar = DeviceGraph(both.name, list(both.devices), list(both.channels), collectives=both.collectives)
    rows = {r["label"]: r for r in csv.DictReader(open(run / "results.csv")) if r["status"] == "ok"}
    places = [p for p in json.load(open(run / "placements.json"))["placements"] if p["label"] in rows]
    meas = [float(rows[p["label"]]["measured_median_s"]) for p in places]
    out = {"measured now": {"contention": measured.report.get("contention"),
                            "allreduce": measured.report.get("collectives")}}
    for name, devs in (("as stored", stored), ("+ measured all-reduce", only_ar),
                       ("+ all-reduce and shared cores", both)):
        splits = []
        genes = [placement_from_dict({"format": "placement/1", "assignment": p["assignment"]}, graph, devs,
                                     splits=splits) for p in places]
        prob = Problem(graph, devs, timings=timing_table(doc, graph)).with_splits(tuple(splits))
        sim = [prob.simulate(g).result.batch_time for g in genes]
        out[name] = metrics(sim, meas)
        out[name + ": data parallel and single devices (label, simulated ms, measured ms)"] = [
            (p["label"], round(s * 1e3, 1), round(m * 1e3, 1)) for p, s, m in zip(places, sim, meas)
            if p["label"].startswith(("data", "single"))]
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
