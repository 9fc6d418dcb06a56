"""A/B on one E5 run's measurements: the calibration's timings with their fixed parts (what a half batch keeps of
an op's time) and without them (the proportional model), every placement simulated both ways; Pearson r, Kendall
tau and MAPE against the measured medians, overall and over the placements that split ops.

    python benchmarks/e5_batch_fit.py docs/e5/resnet18-batchfit torchvision:resnet18 2,3,32,32 32
"""
import csv, json, sys
from pathlib import Path
from placement_core import load_devices
from placement_core.experiments.e5 import metrics
from placement_core.model.placement import placement_from_dict
from placement_core.problem import Problem
from placement_core.cost.timings import read_timings, timing_table, FIXED
from placement_core.torch.model_import import trace_model
from placement_core.torch.sources import load_model, parse_source

run = Path(sys.argv[1]); source = sys.argv[2]; shape = tuple(int(s) for s in sys.argv[3].split(",")); batch = int(sys.argv[4])
src = parse_source(source)
graph = trace_model(load_model(src, seed=0), shape, name=src.default_name).graph.with_batch_size(batch)
devs = load_devices(str(run / "calibration/devices.json"))
doc = read_timings(run / "calibration/timings.json")
plain = json.loads(json.dumps(doc))
for op in plain["ops"].values():
    for t in op.values():
        for k in FIXED.values():
            t.pop(k, None)
rows = {r["label"]: r for r in csv.DictReader(open(run / "results.csv")) if r["status"] == "ok"}
places = json.load(open(run / "placements.json"))["placements"]
out = {}
for name, d in (("fixed parts", doc), ("proportional", plain)):
    splits = []
    genes = [placement_from_dict({"format": "placement/1", "assignment": p["assignment"]}, graph, devs, splits=splits)
             for p in places if p["label"] in rows]
    prob = Problem(graph, devs, timings=timing_table(d, graph)).with_splits(tuple(splits))
    sim = [prob.simulate(g).result.batch_time for g in genes]
    meas = [float(rows[p["label"]]["measured_median_s"]) for p in places if p["label"] in rows]
    kinds = [p["kind"] for p in places if p["label"] in rows]
    out[name] = metrics(sim, meas)
    sh = [(s, m) for s, m, k in zip(sim, meas, kinds) if k == "sharded"]
    out[name + ", split placements"] = metrics([s for s, _ in sh], [m for _, m in sh]) if len(sh) > 2 else None
    dp = [(p["label"], s, m) for p, s, m in zip([p for p in places if p["label"] in rows], sim, meas) if p["label"].startswith("data")]
    out[name + ", data parallel (sim, measured)"] = [(l, round(s * 1e3, 1), round(m * 1e3, 1)) for l, s, m in dp]
print(json.dumps(out, indent=1))
