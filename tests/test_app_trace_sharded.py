"""Trace page with a placement that splits ops (AppTest): the upload brings its splits into the session's table,
a split op runs on several device rows with its shard in the hover, the ring's messages run on the links,
and the Chrome download names the shards (docs/sharding.md)."""

import json

import pytest
from apptest_util import assert_clean, figures, goto, start

from placement_core import load_network


def gantt(at):
    return next(f for f in figures(at) if f["layout"]["xaxis"]["title"]["text"] == "time (ms)"
                and "Memory" not in str(f["layout"].get("title", "")))


def hovers(fig):
    return [h for t in fig["data"] if t.get("hoverinfo") != "skip" for h in t.get("hovertext", t.get("text", [])) if h]


def test_a_sharded_placement_file_shows_its_shards_and_its_rings():
    at = start()
    goto(at, "trace")
    g = load_network("resnet50")
    dp = {"devices": ["gpu0", "gpu1"], "split": "batch"}
    entries = {op.name: "gpu0" for op in g.ops} | {"fc": dp, "avgpool": dp, "flatten": dp}
    data = {"format": "placement/1", "assignment": entries}
    at.file_uploader(key="trace_upload").upload("dp.json", json.dumps(data).encode(), "application/json").run()
    assert_clean(at)
    assert at.session_state["placement_label"] == "dp.json"
    assert at.session_state["sim"].splits_extra  # the file's split joined the session's table
    labels = hovers(gantt(at))
    fc = [h for h in labels if h.startswith("<b>fc</b>") and "fwd" in h]
    assert len(fc) == 2 and {"shard 1/2" in h for h in fc} == {True, False}
    assert any("shard 2/2" in h for h in fc) and any("gpu1" in h for h in fc)
    # fc's weights (2048 x 1000 + 1000 floats, 8.2 MB) summed over a two-GPU ring: all of it each way (2 (k - 1) / k = 1)
    ring = [h for h in labels if "ring all-reduce" in h]
    assert len(ring) == 2 and all(h.startswith("<b>fc</b>") and "8.2 MB" in h for h in ring)
    assert {h.split("<br>")[1] for h in ring} == {"gpu0 → gpu1 on pcie0", "gpu1 → gpu0 on pcie1"}
    assert "batch 1 · all-reduce" in [t.get("name") for t in gantt(at)["data"]]
    downloads = {b.proto.label: b for b in at.get("download_button")}
    assert "Download the trace (Chrome trace JSON)" in downloads


@pytest.mark.slow
def test_the_benchmark_page_runs_a_sharded_current_placement_on_every_device_of_its_splits(monkeypatch):
    """The current placement splits fc over gpu0 and gpu1: the page maps both to local devices, simulates it with
    the session's split table and hands the runner the split entry with local names."""
    from dashboard import benchjob
    from test_app_benchmark import fake_result, run_jobs
    calls = []

    def fake(source, shape, placements, devices, runner, batch_size, settings, progress):
        calls.append(placements)
        return [fake_result(0.05) for _ in placements]

    monkeypatch.setattr(benchjob, "run_benchmark", fake)
    at = start()
    goto(at, "trace")
    g = load_network("resnet50")
    entries = {op.name: "gpu0" for op in g.ops} | {"fc": {"devices": ["gpu0", "gpu1"], "split": "channel"}}
    at.file_uploader(key="trace_upload").upload("ch.json", json.dumps({"format": "placement/1", "assignment": entries})
                                                .encode(), "application/json").run()
    goto(at, "benchmark")
    assert_clean(at)
    assert [s.label for s in at.selectbox if s.key.startswith("bench_map_")] == ["gpu0", "gpu1"]
    at.multiselect(key="bench_chosen").set_value(["current: ch.json"]).run()
    run_jobs(at)
    assert_clean(at)
    [[assignment]] = calls
    assert assignment["fc"] == {"devices": ["cpu0", "cpu1"], "split": "channel"}  # gpu0 -> cpu0, gpu1 -> cpu1
    assert assignment["conv1"] == "cpu0"
