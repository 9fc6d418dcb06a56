"""Trace page, issue 31 item 6 (AppTest): the critical path of one chosen batch, clickable bars inside a time
window on a step too large to click whole, Perfetto's keys."""

import json

import pytest
from apptest_util import APP, assert_clean, decode, figures, frame, metrics, text
from streamlit.testing.v1 import AppTest

from dashboard.settings import SimChoices
from placement_core import Problem, load_devices, load_network
from placement_core.analysis.pipeline import even_stages
from placement_core.model.placement import single_device
from placement_core.simulate.model import SimSettings


def gantt(at):
    return next(f for f in figures(at) if f["layout"]["xaxis"]["title"]["text"] == "time (ms)"
                and "Memory" not in str(f["layout"].get("title", "")))


def trace_with(sim: SimChoices, placement, label: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.session_state["sim"] = sim
    at.session_state["placement"] = placement
    at.session_state["placement_label"] = label
    at.switch_page("app_pages/trace.py").run()
    assert_clean(at)
    return at


@pytest.mark.slow
def test_the_critical_path_of_one_chosen_batch():
    g, d = load_network("resnet50"), load_devices("malvik-4gpu")
    placement = even_stages(g, d, 4)
    at = trace_with(SimChoices(batches=10, in_flight=4), placement, "4 pipeline stages")
    trace = Problem(g, d, settings=SimSettings(units=10, units_in_flight=4)).simulate(placement, trace=True).result.trace
    at.toggle(key="trace_critical").set_value(True).run()
    assert_clean(at)
    pick = at.selectbox(key="trace_critical_batch")
    assert pick.options == [f"batch {b}" for b in range(1, 10)] + ["batch 10 (ends the step)"]
    assert pick.value == 9  # the batch that ends the step
    for b in (9, 1):
        if b != 9:
            at.selectbox(key="trace_critical_batch").set_value(b).run()
            assert_clean(at)
        table = frame(at, "event")
        assert set(table["batch"]) == {b + 1}  # only this batch's events
        # the chain ends when this batch's last event ends (worked out from the trace itself)
        last = max(e.end for e in trace if e.batch == b)
        ends = table["start (ms)"] + table["duration (ms)"]
        assert ends.max() == pytest.approx(last * 1e3, rel=1e-9)
        assert list(table["start (ms)"]) == sorted(table["start (ms)"])
        # a chain: no two of its events overlap on one resource
        for res, rows in table.groupby("device or channel"):
            s, e = list(rows["start (ms)"]), list(rows["start (ms)"] + rows["duration (ms)"])
            assert all(e[k] <= s[k + 1] + 1e-9 for k in range(len(s) - 1)), res
        # one batch's ops, forward and backward, at most: far fewer bars than the whole step's 4,680 events
        ops_of_batch = sum(1 for e in trace if e.batch == b)
        assert 0 < len(table) <= ops_of_batch < len(trace) / 9
        fig = gantt(at)
        [bars] = [t for t in fig["data"] if t.get("name") == "critical path" and t.get("fill") == "toself"]
        [line] = [t for t in fig["data"] if t.get("name") == "critical path" and t.get("mode") == "lines"]
        assert len(line["x"]) == 2 * len(table)
        assert f"Critical path of batch {b + 1}: {len(table)} events" in text(at)


@pytest.mark.slow
def test_a_step_too_large_to_click_has_clickable_bars_inside_a_time_window():
    g, d = load_network("resnet50"), load_devices("malvik-4gpu")
    placement = single_device(g, d, "gpu0")
    at = trace_with(SimChoices(batches=14), placement, "all on gpu0")
    trace = Problem(g, d, settings=SimSettings(units=14)).simulate(placement, trace=True).result.trace
    assert int(metrics(at)["Events"].replace(",", "")) == len(trace) == 14 * 459 > 6000
    fig = gantt(at)
    assert not [t for t in fig["data"] if t["type"] == "bar"]  # whole: outlines only, nothing to click
    assert "choose a time window of at most 6,000 events" in text(at)
    top = max(e.end for e in trace) * 1e3
    a, b = round(top * 0.40, 3), round(top * 0.45, 3)
    at.slider(key="trace_window").set_value((a, b)).run()
    assert_clean(at)
    inside = sorted(i for i, e in enumerate(trace) if e.end * 1e3 >= a and e.start * 1e3 <= b)
    assert 0 < len(inside) < 1000
    fig = gantt(at)
    clickable = sorted(k for t in fig["data"] if t["type"] == "bar" for k in decode(t["customdata"]))
    assert clickable == inside
    outlined = [t for t in fig["data"] if t.get("fill") == "toself" and t.get("name") != "critical path"]
    assert outlined  # the rest of the step stays drawn
    assert "the bars inside the time window are clickable" in text(at)


@pytest.mark.slow
def test_keyboard_zoom_and_pan_as_in_perfetto():
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("app_pages/trace.py").run()
    assert_clean(at)
    chart = at.get("plotly_chart")[0]
    config = json.loads(chart.proto.config)
    assert config["scrollZoom"] is True and config["doubleClick"] == "reset"
    fig = gantt(at)
    assert fig["layout"]["yaxis"]["fixedrange"] is True  # zoom and pan move the time axis only
    assert "**W**/**S** zoom in/out, **A**/**D** pan left/right" in text(at)
    frames = at.get("iframe")
    assert len(frames) == 1
