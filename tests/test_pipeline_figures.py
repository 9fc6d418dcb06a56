"""The Pipeline page's figures, built without Plotly's validation (speed: the page builds them at every change
of m, and the lecture's animation has 40 frames), must be exactly what validation would build: each is compared
with ``go.Figure(its dict)``. Their content is checked against hand-worked schedules."""

import json
from dataclasses import replace

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest
from helpers import devices, op

from dashboard.charts import pipeline_bars, pipeline_gantt
from placement_core.analysis.pipeline import run_schedule, schedule_blocks, schedule_rows
from placement_core.analysis.toy_pipeline import Toy, run_toy, toy_network
from placement_core.model.devices import DeviceGraph
from placement_core.model.graph import Graph


def _same_as_validated(fig: go.Figure) -> dict:
    fast = json.loads(pio.to_json(fig, validate=False))
    checked = json.loads(pio.to_json(go.Figure(fig.to_dict()), validate=False))  # raises on an unknown property
    assert fast == checked
    return fast


def _two_stage_run(schedule: str, overhead: float = 0.0):
    d = devices(2)
    d = DeviceGraph(d.name, [replace(x, message_overhead=overhead) for x in d.devices], list(d.channels))
    graph = Graph("g", [op("a", fwd=1, bwd=2, params=1e6), op("b", ["a"], fwd=1, bwd=2, params=1e6)], batch_size=4)
    run = run_schedule(graph, d, [0, 1], schedule, 2, trace=True, comm_efficiency=1.0)
    rows = schedule_rows(run, d)
    return run, rows, schedule_blocks(run.evaluation.result.trace, rows, chunk_of=run.chunk_of)


@pytest.mark.parametrize("schedule, overhead, big", [("gpipe", 0.0, False), ("zb-h1", 0.0, True),
                                                     ("1f1b", 0.25, False)])
def test_schedule_gantt_is_what_validation_builds(schedule, overhead, big):
    run, rows, blocks = _two_stage_run(schedule, overhead)
    fig = _same_as_validated(pipeline_gantt.schedule_gantt(blocks, rows, 2, run.step_time, "a · step", big=big))
    # two micro-batches on two stages, 1 ms forward per op and batch: F1 and F2 on each stage, B1 and B2 too
    labels = sorted(label for t in fig["data"] if t["type"] == "bar" for label in t.get("text") or [] if label)
    backward = ["B1", "B2"] * 2
    assert labels == sorted(["F1", "F2"] * 2 + backward + (["W1", "W2"] * 2 if schedule == "zb-h1" else [])
                            + ["U", "U"])
    assert fig["layout"]["font"]["size"] == (20 if big else 13)
    assert fig["layout"]["title"]["text"] == "a · step"
    assert fig["layout"]["xaxis"]["range"] == pytest.approx([0, run.step_time * 1e3 * 1.01])


def test_a_timeline_without_its_legend_is_the_same_chart_with_less_drawn():
    """The page's later timelines leave the legend out (the first one's serves all): same bars, no legend
    entries, the message-overhead bars not named in a legend either, and the chart shorter by the legend's row."""
    run, rows, blocks = _two_stage_run("1f1b", 0.25)
    full = _same_as_validated(pipeline_gantt.schedule_gantt(blocks, rows, 2, run.step_time, "a · step"))
    bare = _same_as_validated(pipeline_gantt.schedule_gantt(blocks, rows, 2, run.step_time, "a · step", legend=False))
    assert bare["layout"]["showlegend"] is False and not any(t.get("showlegend") for t in bare["data"])
    drawn = [t for t in full["data"] if t.get("x") != [None]]
    assert [{**t, "showlegend": False} for t in drawn] == [{**t, "showlegend": False} for t in bare["data"]]
    entries = sum(1 for t in full["data"] if t.get("showlegend"))
    assert entries == 6 and full["layout"]["height"] - bare["layout"]["height"] == 22  # a legend row: six entries


def test_lecture_animation_is_what_validation_builds():
    toy = Toy(3, 4, 1e-3, 2e-3, 0.0, 0.0, 1, 0.0)
    run = run_toy(toy, "gpipe")
    _, d, _ = toy_network(toy, "gpipe")
    rows = schedule_rows(run, d)
    blocks = schedule_blocks(run.evaluation.result.trace, rows)
    fig = _same_as_validated(pipeline_gantt.animated_gantt(blocks, rows, 3, run.step_time, "toy", frames=6))
    assert len(fig["frames"]) == 6 and float(fig["frames"][-1]["name"]) == pytest.approx(18)  # (4 + 3 − 1) · 3 ms
    last = next(t for t in fig["frames"][-1]["data"] if t.get("name") == "bubble (idle)")
    assert sum(last["x"]) == pytest.approx(3 * 2 * 3.0)  # every stage idles (p − 1)(t_f + t_b)


def test_memory_and_breakdown_bars_are_what_validation_builds():
    fig = _same_as_validated(pipeline_bars.stage_memory_figure(["gpu0", "gpu1"], [2e9, 9e9], [8e9, 8e9], 10e9))
    assert fig["data"][0]["marker"]["color"] == ["#5B7FA6", "#E45756"]  # the second is past its capacity
    assert fig["data"][0]["text"] == ["2 GB · 25%", "9 GB · 112%"]
    rows = [{"schedule": s, "device": dev, "peak": pk} for s in ("gpipe", "1f1b")
            for dev, pk in (("gpu0", 3e9), ("gpu1", 1e9))]
    _same_as_validated(pipeline_bars.memory_by_schedule_figure(rows, {"gpipe": "GPipe"}, {"gpu0": 4e9, "gpu1": 4e9},
                                                               big=True))
    parts = {"schedule_s": 0.003, "imbalance_s": 0.001, "updates_s": 0.0, "transfers_s": 0.006, "idle_s": 0.01}
    fig = _same_as_validated(pipeline_bars.breakdown_figure([("GPipe", parts)]))
    assert [t["x"] for t in fig["data"]] == [[pytest.approx(3)], [pytest.approx(1)], [0.0], [pytest.approx(6)]]


def test_the_neighbours_of_m_are_the_next_divisors_of_the_batch_larger_first():
    from dashboard.pipelineview import neighbours
    assert neighbours(128, 8) == [16, 4]
    assert neighbours(128, 64) == [32]  # the sweep's largest: nothing above
    assert neighbours(96, 1) == [2]
    assert neighbours(96, 12) == [16, 8]


def test_a_prefetched_run_is_the_one_the_page_gets_and_a_page_stops_a_prefetch():
    import time

    from dashboard import pipelineview as pv
    d = devices(2)
    graph = Graph("prefetch-g", [op("a", fwd=1, bwd=2), op("b", ["a"], fwd=1, bwd=2)], batch_size=4)
    placements = {"gpipe": [0, 1], "1f1b": [0, 1]}
    cost = {"profile": "default"}
    pv.prefetch("pg", "pd", graph, d, placements, [2], 1, "c", cost, "thesis", False, delay_s=0.0)
    deadline = time.time() + 30
    while not all(pv._is_cached("pg", "pd", s, arr, 2, 1, "c", "thesis", False)
                  for s, arr in ((s, np.asarray(p, dtype="int32"))
                                          for s, p in placements.items())):
        assert time.time() < deadline, "the prefetch did not simulate m = 2"
        time.sleep(0.05)
    key = ("pg", "pd", "gpipe", np.asarray([0, 1], dtype="int32").tobytes(), 2, 1, "c", "thesis",
           False)
    before = pv._RUNS[key].result()
    [view, _] = pv.schedule_runs("pg", "pd", graph, d, placements, 2, 1, "c", cost, "thesis", False)
    assert view is before  # not simulated again
    assert view["run"].step_time == run_schedule(graph, d, [0, 1], "gpipe", 2).step_time
    # a page asking for runs before the prefetch starts: it simulates nothing
    pv.prefetch("pg", "pd", graph, d, placements, [4], 1, "c", cost, "thesis", False, delay_s=0.5)
    pv.schedule_runs("pg", "pd", graph, d, placements, 2, 1, "c", cost, "thesis", False)
    time.sleep(1.5)
    assert not pv._is_cached("pg", "pd", "gpipe", np.asarray([0, 1], dtype="int32"), 4, 1, "c",
                             "thesis", False)
