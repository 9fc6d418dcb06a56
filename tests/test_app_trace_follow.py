"""Trace page, following the step (AppTest): follow an op (its events outlined, its tensors between devices as
arrows and a table), find ops by name, a time window's sums, names inside wide bars, capacity labels apart.
Expected figures come from the simulated trace read independently here. Clicking a bar and dragging a window
happen in a real browser: tests/test_browser_views.py."""

from __future__ import annotations

import numpy as np
import pytest
from apptest_util import assert_clean, decode, figures, frame, goto, start, text

from dashboard.charts import memory
from dashboard.charts.trace_overlay import PLOT_WIDTH_PX
from placement_core import load_devices, load_network
from placement_core.problem import ProblemSpec


def gantt(at):
    return next(f for f in figures(at) if f["layout"]["xaxis"]["title"]["text"] == "time (ms)"
                and "Memory" not in str(f["layout"].get("title", "")))


def trace_of(at):
    """The step the page shows, simulated here from the session's placement (shared default settings)."""
    g, d = load_network("resnet50"), load_devices("malvik-4gpu")
    placement = np.asarray(at.session_state["placement"])
    return placement, ProblemSpec().build(g, d).simulate(placement, trace=True).result, g


def two_stages():
    at = start()
    goto(at, "trace")
    at.number_input(key="trace_stages").set_value(2)
    at.button(key="trace_use_stages").click().run()
    assert_clean(at)
    return at


@pytest.mark.slow
def test_following_an_op_outlines_its_events_and_draws_its_flows():
    at = two_stages()
    placement, res, g = trace_of(at)
    # the producers whose outputs cross from the first stage to the second, and their consumers there
    crossing = [(a, b) for a, b, _ in g.edges() if placement[a] != placement[b]]
    producer = g.ops[crossing[0][0]].name
    consumers = sorted(g.ops[b].name for a, b in crossing if g.ops[a].name == producer)
    at.selectbox(key="trace_follow").set_value(producer).run()
    assert_clean(at)
    fig = gantt(at)
    [outline] = [t for t in fig["data"] if t.get("name") == "followed op"]
    mine = [e for e in res.trace if e.op == producer]
    assert len(outline["x"]) == 6 * len(mine)  # a closed rectangle (and a gap) per event of the op
    arrows = [a for a in fig["layout"]["annotations"] if a.get("showarrow") and a.get("axref") == "x"]
    assert len(arrows) == 2 * len(consumers)  # producer → transfer, transfer → consumer, per crossing tensor
    fwd = next(e for e in res.trace if e.op == producer and e.kind == "op" and e.phase == "fwd")
    assert arrows[0]["ax"] == pytest.approx(fwd.end * 1e3) and arrows[0]["ay"] == -list(at.session_state[
        "devices"].names).index(fwd.resource)
    flows = frame(at, "producer")
    assert sorted(flows["consumer"]) == consumers and set(flows["producer"]) == {producer}
    hop = next(e for e in res.trace if e.kind == "transfer" and e.op == producer and e.phase == "fwd")
    assert flows["arrived (ms)"].iloc[0] == pytest.approx(hop.end * 1e3)
    assert flows["size (MB)"].iloc[0] == pytest.approx(hop.bytes / 1e6)
    # an op whose producers and consumers share its device: no arrow, and the page says why
    local = next(o.name for k, o in enumerate(g.ops) if all(placement[j] == placement[k]
                                                             for j in g.parents[k] + g.children[k]))
    at.selectbox(key="trace_follow").set_value(local).run()
    assert not [a for a in gantt(at)["layout"].get("annotations", []) if a.get("axref") == "x"]
    assert "none of its tensors crosses devices" in text(at)


@pytest.mark.slow
def test_find_outlines_every_op_whose_name_matches():
    at = start()
    goto(at, "trace")
    at.text_input(key="trace_find").input("LAYER1.0.").run()
    assert_clean(at)
    placement, res, g = trace_of(at)
    names = [o.name for o in g.ops if "layer1.0." in o.name]
    assert f"{len(names)} op(s) match" in text(at)
    [found] = [t for t in gantt(at)["data"] if t.get("name") == "found"]
    assert len(found["x"]) == 6 * sum(1 for e in res.trace if e.kind == "op" and e.op in names)
    # the follow box now offers the matches only
    assert at.selectbox(key="trace_follow").options == names


@pytest.mark.slow
def test_a_time_window_sums_busy_time_and_bytes_inside_it():
    at = two_stages()
    placement, res, g = trace_of(at)
    a, b = 0.3 * res.makespan, 0.7 * res.makespan
    at.slider(key="trace_window").set_value((a * 1e3, b * 1e3)).run()
    assert_clean(at)
    table = frame(at, "device or channel").set_index("device or channel")
    d = load_devices("malvik-4gpu")
    for name in d.names:  # by hand: each device's events clipped to the window
        busy = sum(max(0.0, min(e.end, b) - max(e.start, a)) for e in res.trace
                   if e.resource == name and e.kind == "op")
        assert table.loc[name, "busy (ms)"] == pytest.approx(busy * 1e3, abs=1e-6)
    for ch in d.channels:
        moved = sum(e.bytes * max(0.0, min(e.end, b) - max(e.start, a)) / (e.end - e.start) for e in res.trace
                    if e.resource == ch.name and e.end > e.start)
        assert table.loc[f"{ch.name} (link)", "moved (MB)"] == pytest.approx(moved / 1e6, abs=1e-9)
    assert table["busy (ms)"].max() > 0
    [shade] = [s for s in gantt(at)["layout"]["shapes"] if s.get("type") == "rect"]
    assert (shade["x0"], shade["x1"]) == pytest.approx((a * 1e3, b * 1e3))
    goto(at, "network")
    goto(at, "trace")
    assert at.slider(key="trace_window").value == pytest.approx((a * 1e3, b * 1e3))  # kept across pages


def test_every_bar_is_clickable_and_carries_its_name():
    at = start()
    goto(at, "trace")
    placement, res, _ = trace_of(at)
    fig = gantt(at)
    bars = [t for t in fig["data"] if t.get("type") == "bar"]
    assert {t["legendgroup"] for t in bars} == {"b0-fwd", "b0-bwd", "b0-update"}
    assert fig["layout"]["uniformtext"] == {"mode": "hide", "minsize": 9}  # Plotly hides a name that cannot fit
    index = [int(i) for t in bars for i in decode(t["customdata"])]
    assert sorted(index) == list(range(len(res.trace)))  # a click on a bar names its event
    for t in bars:
        assert t["textposition"] == "inside" and t["constraintext"] == "inside"
        assert t["text"] == [res.trace[int(i)].op for i in decode(t["customdata"])]
        starts = decode(t["base"])
        assert [round(x, 9) for x in starts] == [round(res.trace[int(i)].start * 1e3, 9) for i in decode(t["customdata"])]


@pytest.mark.slow
def test_on_a_step_too_large_to_click_the_names_that_fit_are_written_once(monkeypatch):
    from dashboard.charts import trace_overlay
    monkeypatch.setattr(trace_overlay, "CLICKABLE_EVENTS", 10)
    at = start()
    at.selectbox(key="net_builtin").set_value("alexnet").run()
    goto(at, "trace")
    assert_clean(at)
    g, d = load_network("alexnet"), load_devices("malvik-4gpu")
    res = ProblemSpec().build(g, d).simulate(np.asarray(at.session_state["placement"]), trace=True).result
    fig = gantt(at)
    assert not [t for t in fig["data"] if t.get("name") == "events"]
    [names] = [t for t in fig["data"] if t.get("name") == "names"]
    px_per_s = PLOT_WIDTH_PX / (res.makespan * 1.01)
    fits = [e for e in res.trace if e.kind in ("op", "transfer") and (e.end - e.start) * px_per_s >= 6.2 * len(e.op) + 8]
    assert len(fits) >= 3  # AlexNet's convolutions are long enough
    assert sorted(names["text"]) == sorted(e.op for e in fits)
    assert sorted(decode(names["x"])) == pytest.approx(sorted((e.start + e.end) / 2 * 1e3 for e in fits))


def test_capacity_labels_of_nearby_capacities_do_not_overlap_and_sit_outside_the_plot():
    t = np.array([0.0, 1.0, 2.0])
    series = [(t, np.array([0, 15e9, 15e9])), (t, np.array([0, 14e9, 14e9]))]
    fig, off = memory.memory_figure(series, ["gpu0", "gpu1"], [16e9, 16.5e9])
    notes = fig.layout.annotations
    assert off == [] and [n.text for n in notes] == ["gpu0: 16 GB", "gpu1: 16.5 GB"]
    top = fig.layout.yaxis.range[1]
    gap = top * memory.MEMORY_LABEL_PX / (320 - 60 - 70)
    assert notes[1].y - notes[0].y >= gap - 1e-9  # 0.5 GB apart would be a few pixels: moved apart
    assert all(n.xref == "paper" and n.x >= 1 and n.xanchor == "left" for n in notes)
