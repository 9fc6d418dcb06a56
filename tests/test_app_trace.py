"""Trace page (AppTest): Gantt rows, critical path, memory, bottlenecks, placement picker, large traces."""

import json
import re

import pytest
from apptest_util import APP, assert_clean, decode, figures, frame, goto, metrics, start, text
from streamlit.testing.v1 import AppTest

from dashboard.settings import SimChoices
from placement_core import load_devices, load_network, placement_to_dict, random_placement


def trace_page(at=None):
    at = at or start()
    goto(at, "trace")
    assert_clean(at)
    return at


def gantt(at):
    return next(f for f in figures(at) if f["layout"]["xaxis"]["title"]["text"] == "time (ms)"
                and "Memory" not in str(f["layout"].get("title", "")))


def line_rows(fig):
    """The rows (as y = -row) that have bars: bar traces at y = -row, or (a step too large to click) filled
    outlines of bars centred on y = -row."""
    ys = set()
    for t in fig["data"]:
        if t.get("fill") == "toself" or t.get("type") == "bar":
            ys |= {round(v) for v in decode(t["y"])}
    return ys


def hover_labels(fig, traces=None):
    """The events' hover labels: the transparent clickable bars' (one per event), or on a step too large to click
    the outlines' (one per bar, at its top middle; the outline's other vertices have none)."""
    return [h for t in (traces if traces is not None else fig["data"]) if t.get("hoverinfo") != "skip"
            for h in t.get("hovertext", t.get("text", [])) if h]


@pytest.mark.slow
def test_gantt_has_one_row_per_device_and_channel():
    at = trace_page()
    fig = gantt(at)
    d = load_devices("malvik-4gpu")
    assert fig["layout"]["yaxis"]["ticktext"] == d.names + [f"{c.name} (link)" for c in d.channels]
    assert len(fig["layout"]["yaxis"]["tickvals"]) == 5 + 4
    assert line_rows(fig) == {-1}  # everything on gpu0 (row 1): no transfers
    assert len(hover_labels(fig)) == int(metrics(at)["Events"]) == 2 * 176 + 107
    assert hover_labels(fig)[1].startswith("<b>conv1</b> · fwd · batch 1<br>gpu0: ")  # batches count from 1
    assert fig["layout"]["xaxis"]["title"]["text"] == "time (ms)"


@pytest.mark.slow
def test_random_placement_uses_links_and_fills_the_bottleneck_panel():
    at = trace_page()
    at.number_input(key="trace_seed").set_value(3)
    at.button(key="trace_use_random").click().run()
    assert_clean(at)
    assert at.session_state["placement_label"] == "random (seed 3)"
    rows = line_rows(gantt(at))
    assert rows <= {-i for i in range(9)} and rows & {-5, -6, -7, -8}  # some transfers on channel rows
    channels = frame(at, "channel")
    assert list(channels["channel"]) == ["pcie0", "pcie1", "pcie2", "pcie3"]
    assert (channels["utilisation (%)"] > 0).all()
    largest = frame(at, "tensor")
    assert list(largest["size (MB)"]) == sorted(largest["size (MB)"], reverse=True) and len(largest) == 15
    devices = frame(at, "device")
    assert list(devices["device"]) == ["cpu0", "gpu0", "gpu1", "gpu2", "gpu3"]
    assert (devices["busy (ms)"] + devices["idle (ms)"]).round(6).nunique() == 1  # = the makespan


@pytest.mark.slow
def test_critical_path_on_demand():
    at = trace_page()
    assert "critical path" not in [t.get("name") for t in gantt(at)["data"]]
    at.toggle(key="trace_critical").set_value(True).run()
    assert_clean(at)
    assert "critical path" in [t.get("name") for t in gantt(at)["data"]]
    # one device, never idle: the path runs through every forward and backward (and the weight updates
    # between them; a zero-length op may be passed by a data dependency ending at the same instant)
    m = re.search(r"Critical path: (\d+) events, 0 of them transfers taking 0 s of the 348 ms makespan", text(at))
    assert m and 352 < int(m.group(1)) <= 459


@pytest.mark.slow
def test_memory_chart_has_capacity_lines():
    at = trace_page()
    mem = next(f for f in figures(at) if "Memory" in str(f["layout"].get("title", "")))
    assert mem["layout"]["yaxis"]["title"]["text"] == "memory (GB)"
    assert [s["y0"] for s in mem["layout"]["shapes"]] == [32]  # the four 32 GB GPUs share one line
    [note] = mem["layout"]["annotations"]
    assert note["text"] == "gpu0, gpu1, gpu2, gpu3: 32 GB" and note["y"] == 32
    # named in the right margin, outside the plotting area where the memory lines run: never over a line
    assert note["xref"] == "paper" and note["x"] >= 1 and note["xanchor"] == "left"
    assert mem["layout"]["margin"]["r"] >= 6 * len(note["text"])
    assert "Capacity far above the chart (not drawn): cpu0 755 GB" in text(at)


@pytest.mark.slow
def test_placement_files_good_and_bad():
    at = trace_page()
    g, d = load_network("resnet50"), load_devices("malvik-4gpu")
    good = placement_to_dict(random_placement(g, d, 5), g, d)
    at.file_uploader(key="trace_upload").upload("p.json", json.dumps(good).encode(), "application/json").run()
    assert_clean(at)
    assert at.session_state["placement_label"] == "p.json"
    assert (at.session_state["placement"] == random_placement(g, d, 5)).all()
    good["assignment"]["conv1"] = "tpu9"
    at.file_uploader(key="trace_upload").upload("q.json", json.dumps(good).encode(), "application/json").run()
    assert not at.exception
    [err] = at.error
    assert "q.json: assignment.conv1: unknown device 'tpu9'" in err.value
    assert at.session_state["placement_label"] == "p.json"
    assert [b.proto.label for b in at.get("download_button")] == ["Download the trace (Chrome trace JSON)",
                                                                  "Download the placement (JSON)"]


@pytest.mark.slow
def test_an_exprimo_placement_file_with_block_names_loads_with_a_note():
    at = trace_page()
    g = load_network("resnet50")
    # Exprimo's own files name every layer, plus Blocks and stale layers; indices are devices (gpu0 = 1)
    exprimo = {**{op.name: 1 for op in g.ops}, "layer1": 0, "Logits": 0}
    exprimo["fc"] = 2
    at.file_uploader(key="trace_upload").upload("ex.json", json.dumps(exprimo).encode(), "application/json").run()
    assert_clean(at)
    assert at.session_state["placement_label"] == "ex.json"
    assert at.session_state["placement"].tolist() == [1] * (len(g) - 1) + [2]
    notes = [c.value for c in at.sidebar.caption]
    assert any("2 key(s) of the placement file are not ops of the network" in n for n in notes), notes


@pytest.mark.slow
def test_ten_batch_inception_trace_renders_within_the_default_timeout():
    at = AppTest.from_file(APP)  # default timeout (3 s) for every run below
    at.run()
    at.selectbox(key="net_builtin").set_value("inception_v3").run()
    g, d = load_network("inception_v3"), load_devices("malvik-4gpu")
    at.session_state["sim"] = SimChoices(batches=10, in_flight=4)
    at.session_state["placement"] = random_placement(g, d, 1)
    at.session_state["placement_label"] = "random (seed 1)"
    at.switch_page("app_pages/trace.py").run()
    assert_clean(at)
    events = int(metrics(at)["Events"].replace(",", ""))
    assert events > 10_000
    fig = gantt(at)
    # one filled outline (one SVG path) per colour: 10 batches x forward, backward, update
    bars = [t for t in fig["data"] if t.get("name") != "time grid"]  # invisible points Box Select can select
    assert len(bars) == 30 and all(t["type"] == "scatter" and t["fill"] == "toself" for t in bars)
    assert len(hover_labels(fig)) == events
    assert len([t for t in fig["data"] if t.get("showlegend")]) == 10  # one legend entry per batch
    assert len(json.dumps(fig)) < 300 * events  # compact: binary coordinates, one label per event
    at.toggle(key="trace_critical").set_value(True).run()
    assert_clean(at)


@pytest.mark.slow
def test_pipeline_stages_with_batches_in_flight_keep_several_gpus_busy():
    at = trace_page()
    at.number_input(key="trace_batches").set_value(8)
    at.number_input(key="trace_in_flight").set_value(4)
    at.number_input(key="trace_stages").set_value(4)
    at.button(key="trace_use_stages").click().run()
    assert_clean(at)
    assert at.session_state["placement_label"] == "4 pipeline stages"
    assert set(at.session_state["placement"].tolist()) == {1, 2, 3, 4}  # the four GPUs
    fig = gantt(at)
    assert len([t for t in fig["data"] if t.get("showlegend")]) == 8  # one legend entry per batch
    assert line_rows(fig) >= {-1, -2, -3, -4}
    devices = frame(at, "device")
    assert (devices.set_index("device").loc[["gpu0", "gpu1", "gpu2", "gpu3"], "busy (ms)"] > 0).all()


@pytest.mark.slow
def test_message_overhead_is_drawn_as_thin_grey_bars_on_the_device_rows():
    at = start()
    goto(at, "devices")
    key = at.data_editor[0].key
    at.session_state[key] = {"edited_rows": {i: {"µs per message": 50} for i in range(5)}, "added_rows": [],
                             "deleted_rows": []}
    at.run()
    assert_clean(at)
    assert [d.message_overhead for d in at.session_state["devices"].devices] == [5e-5] * 5
    trace_page(at)
    at.number_input(key="trace_seed").set_value(3)
    at.button(key="trace_use_random").click().run()
    assert_clean(at)
    fig = gantt(at)
    [grey] = [t for t in fig["data"] if t.get("legendgroup") == "overhead"]
    assert grey["marker"]["color"] == "#707070" and grey["name"] == "send / receive (message overhead)"
    assert set(decode(grey["y"])) <= {-i for i in range(5)}  # device rows only
    assert grey["width"] == 0.24  # thin bars (ops: 0.3 either side)
    hover = hover_labels(fig)  # the clickable bars over every event carry the hover
    assert any(re.match(r"<b>send to (gpu|cpu)\d</b> \(op .+, .+B\)", h) for h in hover)
    assert any(h.startswith("<b>receive from ") for h in hover)
    assert len(hover_labels(fig)) == int(metrics(at)["Events"].replace(",", ""))


def test_a_trace_too_large_to_draw_is_refused_with_the_batches_that_fit():
    """1,000 batches of ResNet-50 all on gpu0: 176 + 176 + 107 ops' tasks and their memory counters per batch
    (2 × 459 events) plus a few metadata rows: about 918,000 events, far more than the page draws."""
    from apptest_util import goto, start
    at = goto(start(), "trace")
    at.number_input(key="trace_batches").set_value(1000).run()
    [w] = [w.value for w in at.warning if "too many to draw" in w.value]
    assert "about 918,0" in w and "at most 217 to see it" in w
    assert not at.exception
    assert not [f for f in at.get("plotly_chart")]
