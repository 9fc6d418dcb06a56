"""Sharded placements along every path a user takes them: traced (events per shard, the ring, the critical path,
the Chrome export), exported and read back through the CLI, and the sharding experiment (docs/sharding.md)."""

import csv
import json

import numpy as np
import pytest

from placement_core.analysis.trace import critical_path, event_label
from placement_core.cli import main
from placement_core.model.graph import Graph, Op
from placement_core.problem import Problem
from placement_core.model.sharding import Split
from placement_core.simulate import SimSettings
from placement_core.simulate.chrome import chrome_trace

from helpers import devices

BATCH = 8


def layer(name, inputs=(), fwd=0.0, bwd=0.0, out=100.0, params=0.0, kind="linear"):
    return Op(name=name, kind=kind, inputs=tuple(inputs), output_bytes=out, param_bytes=params, shape=(BATCH, 8),
              times={"cpu": {"fwd": fwd, "bwd": bwd, "update": 0.0}})


def data_parallel_pair():
    """x -> fc1 -> fc2, every op split by batch over d0, d1; 100 B/s per direction, no latency. Shards:
    fc1 1 + 2 s, fc2 2 + 1 s (halves of 2/4 and 4/2). fc2's backward ends at 1 + 2 + 1 = 4: its ring sends
    its 300 B (2 (n - 1) / n = 1 of its weights) each way, 3 s, until 7; fc1's backward ends at 6 and its
    ring (200 B, 2 s) waits for the link until 7: the step ends at 9."""
    dp = Split("batch", (0, 1))
    ops = [layer("x", kind="input"), layer("fc1", ["x"], 2.0, 4.0, params=200.0),
           layer("fc2", ["fc1"], 4.0, 2.0, params=300.0)]
    p = Problem(Graph("g", ops, BATCH), devices(2, bandwidth=100.0, shared=False), settings=SimSettings(),
                comm_efficiency=1.0, comp_efficiency=1.0, splits=(dp,))
    return p, np.full(3, p.n_devices, dtype=np.int32)


def test_the_trace_shows_every_shard_and_the_ring_on_its_channels():
    p, x = data_parallel_pair()
    ev = p.simulate(x, trace=True)
    assert ev.result.makespan == pytest.approx(9.0, rel=1e-12)
    assert p.simulate(x).result.makespan == ev.result.makespan  # the kernel agrees with the traced reference
    trace = ev.result.trace
    shards = sorted((e.op, e.phase, e.resource, e.shard, e.shards, e.start, e.end) for e in trace if e.kind == "op")
    assert ("fc2", "bwd", "d1", 1, 2, 3.0, 4.0) in shards and ("fc1", "fwd", "d0", 0, 2, 0.0, 1.0) in shards
    ring = sorted((e.op, e.src, e.dst, e.start, e.end, e.bytes, e.shard) for e in trace if e.phase == "allreduce")
    assert ring == [("fc1", "d0", "d1", 7.0, 9.0, 200.0, 0), ("fc1", "d1", "d0", 7.0, 9.0, 200.0, 1),
                    ("fc2", "d0", "d1", 4.0, 7.0, 300.0, 0), ("fc2", "d1", "d0", 4.0, 7.0, 300.0, 1)]
    assert "shard 2/2" in event_label(next(e for e in trace if e.kind == "op" and e.shard == 1))
    # the critical path ends with fc1's ring, which waited for fc2's on the link
    path = [trace[i] for i in critical_path(trace, p.graph)]
    assert path[-1].phase == "allreduce" and path[-1].op == "fc1" and path[-1].end == 9.0
    assert any(e.phase == "allreduce" and e.op == "fc2" for e in path)


def test_the_chrome_export_names_shards_and_puts_the_ring_on_the_channels():
    p, x = data_parallel_pair()
    ev = p.simulate(x, trace=True)
    doc = chrome_trace(ev.result, p.devices.names, p.compiled.ch_names, graph=p.graph)
    slices = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    assert {e["name"] for e in slices if e["pid"] == 1} >= {"fc1 [1/2] (fwd)", "fc1 [2/2] (fwd)", "fc2 [2/2] (bwd)"}
    ring = [e for e in slices if e["pid"] == 2 and e["args"]["phase"] == "allreduce"]
    assert len(ring) == 4 and sorted(e["dur"] for e in ring) == pytest.approx([2e6, 2e6, 3e6, 3e6])
    json.dumps(doc)  # the file a user opens


def test_a_sharded_search_result_is_exported_and_read_back(tmp_path, capsys):
    """optimize --sharding writes a placement file with split entries; simulate reads it and gets the same time."""
    out = tmp_path / "best.json"
    assert main(["optimize", "--network", "alexnet", "--devices", "nvlink-8gpu", "--algorithm", "ga", "--budget",
                 "300", "--sharding", "channel,batch", "--max-shards", "8", "--init", "data-parallel",
                 "--no-store", "--out", str(out), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    entries = json.loads(out.read_text())["placement"]["assignment"]
    assert any(isinstance(v, dict) for v in entries.values())
    path = tmp_path / "placement.json"
    path.write_text(json.dumps(json.loads(out.read_text())["placement"]))
    assert main(["simulate", "--network", "alexnet", "--devices", "nvlink-8gpu", "--placement", str(path),
                 "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["batch_time_s"] == pytest.approx(found["batch_time_s"], rel=1e-12)
    assert sim["split_ops"] == {k: v for k, v in entries.items() if isinstance(v, dict)}


def test_the_sharding_experiment_writes_its_table(tmp_path, capsys):
    """A short run of `placement experiment sharding`: one GPU and data parallel are the numbers the simulator
    gives those placements; the seeded search is never worse than data parallel; the written placement
    reproduces the best sharded time."""
    out, md = tmp_path / "res", tmp_path / "report.md"
    assert main(["experiment", "sharding", "--networks", "alexnet", "--budget", "200", "--out", str(out),
                 "--markdown", str(md)]) == 0
    rows = {r["column"]: r for r in csv.DictReader((out / "results.csv").open())}
    assert set(rows) == {"single", "unsharded", "data-parallel", "hybrid", "sharded", "sharded-unseeded"}
    t = {k: float(r["batch_time_s"]) for k, r in rows.items()}
    capsys.readouterr()
    assert main(["simulate", "--network", "alexnet", "--devices", "nvlink-8gpu", "--placement", "single:gpu0",
                 "--json"]) == 0
    assert t["single"] == pytest.approx(json.loads(capsys.readouterr().out)["batch_time_s"], rel=1e-5)
    assert main(["optimize", "--network", "alexnet", "--devices", "nvlink-8gpu", "--algorithm", "data-parallel",
                 "--no-store", "--json"]) == 0
    assert t["data-parallel"] == pytest.approx(json.loads(capsys.readouterr().out)["batch_time_s"], rel=1e-5)
    assert t["sharded"] <= t["data-parallel"] and t["hybrid"] <= t["data-parallel"]
    assert float(rows["sharded"]["speedup_vs_single"]) == pytest.approx(t["single"] / t["sharded"], rel=1e-4)
    best = min(t["sharded"], t["sharded-unseeded"])
    assert main(["simulate", "--network", "alexnet", "--devices", "nvlink-8gpu", "--placement",
                 str(out / "alexnet-best-sharded.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["batch_time_s"] == pytest.approx(best, rel=1e-5)
    report = md.read_text()
    assert "| alexnet (" in report and "placement experiment sharding" in report


def test_the_sharding_experiment_refuses_an_unknown_network(tmp_path, capsys):
    assert main(["experiment", "sharding", "--networks", "nosuchnet", "--out", str(tmp_path / "o")]) != 0
    assert "nosuchnet" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_e5_candidates_include_data_parallel_and_random_splits():
    """E5's scatter (placement experiment e5 --sharded N): data parallel over every rank first, then random
    placements of whole and split ops, all valid on the problem with E5's split table."""
    from placement_core.experiments.e5 import E5Settings, sharded_placements, sharded_table
    ops = [layer("x", kind="input"), layer("fc1", ["x"], 1.0, 2.0, params=200.0),
           layer("relu", ["fc1"], 0.5, 0.5, kind="activation"), layer("fc2", ["relu"], 1.0, 1.0, params=100.0)]
    p = Problem(Graph("g", ops, BATCH), devices(3), settings=SimSettings())
    cands = sharded_placements(p, E5Settings(sharded=4), np.random.default_rng(0))
    wide = p.with_splits(sharded_table(p))
    assert [c.kind for c in cands] == ["sharded"] * 4 and cands[0].label == "data parallel"
    every = wide.n_devices + wide.splits.index(Split("batch", (0, 1, 2)))
    assert cands[0].placement.tolist() == [every] * 4  # every op here has a batch dimension
    assert any((c.placement >= wide.n_devices).any() and (c.placement < wide.n_devices).any() for c in cands[1:])
    for c in cands:
        assert wide.simulate(c.placement).result.makespan > 0  # checked genes, simulated
    assert sharded_placements(p, E5Settings(sharded=0), np.random.default_rng(0)) == []
