"""Pipeline page (AppTest): interleaved 1F1B and ZB-H1 beside GPipe and 1F1B, their closed forms, V and the
B/W split on the charts, the bubble's parts, measured pipelines, the presentation mode and the lecture's
animation. Numbers are checked against the simulator and the closed forms computed here."""

import json

import numpy as np
import pytest
from apptest_util import assert_clean, figures, frame, goto, metrics, show_tab, start, text
from helpers import devices, op

from placement_core.analysis.bubble import bubble_breakdown
from placement_core.analysis.pipeline import even_stages
from placement_core.model.devices import devices_to_dict
from placement_core.model.graph import Graph
from placement_core.formats.network import network_hash, network_to_dict

T_F, T_B, P, CHUNKS, BATCH = 1.0, 2.0, 4, 8, 24


def equal_chunks_graph():
    """8 equal ops (t_f, t_b per batch for each, weights: a 1:1 B/W split), 1 MB between neighbours."""
    ops = [op(f"a{c}", [f"a{c - 1}"] if c else [], fwd=T_F, bwd=T_B, out=1e6, params=1e6) for c in range(CHUNKS)]
    return Graph("equal-chunks", ops, batch_size=BATCH)


def upload(at, graph=None, bandwidth=1e6):
    graph = graph or equal_chunks_graph()
    at.file_uploader(key="net_upload").upload("net.json", json.dumps(network_to_dict(graph)).encode(),
                                              "application/json").run()
    goto(at, "devices")
    at.file_uploader(key="dev_upload").upload("cpus.json", json.dumps(devices_to_dict(devices(P, bandwidth=bandwidth)))
                                              .encode(), "application/json").run()
    assert_clean(at)
    goto(at, "pipeline")
    assert_clean(at)
    return at


def show(at, label: str):
    """One of the page's tabs (only the chosen one is drawn)."""
    return show_tab(at, "pipe_view", label)


def gantts(at) -> dict[str, dict]:
    return {(f["layout"].get("title") or {}).get("text", "").split(" · ")[0]: f for f in figures(at)
            if "· step" in (f["layout"].get("title") or {}).get("text", "")}


def labels(fig) -> dict[str, list]:
    """Bar label -> [(colour, pattern shape)] of every labelled bar."""
    out: dict[str, list] = {}
    for t in fig["data"]:
        if t["type"] != "bar" or not t.get("text"):
            continue
        colours = t["marker"]["color"]
        shape = (t["marker"].get("pattern") or {}).get("shape", "")
        for label, colour in zip(t["text"], colours if isinstance(colours, list) else [colours] * len(t["text"])):
            if label:
                out.setdefault(label, []).append((colour, shape))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("m", [4, 8])
def test_ideal_equal_stages_meet_every_closed_form(m):
    """p = 4 stages of two equal ops (t = 0.25 ms per op and micro-batch at m = 4): GPipe and 1F1B
    (m + p − 1)(t_f + t_b); interleaved 1F1B on 8 chunks round-robin m(t_f + t_b) + (p − 1)(t_f + t_b)/2;
    ZB-H1 with t_B = t_W = t_f: m(t_f + t_b) + (p − 1)(t_f + t_B − t_W)."""
    at = upload(start())
    at.number_input(key="pipe_micro_batches").set_value(m)
    at.toggle(key="pipe_ideal").set_value(True).run()
    assert_clean(at)
    tf, tb = 2 * T_F / m, 2 * T_B / m  # a stage: two ops, the file's times are for the batch of m micro-batches
    bubble = {"GPipe": (P - 1) * (tf + tb), "1F1B (PipeDream-flush)": (P - 1) * (tf + tb),
              "Interleaved 1F1B": (P - 1) * (tf + tb) / 2, "ZB-H1 (zero bubble)": (P - 1) * tf}
    compare = frame(show(at, "Numbers and memory"), "schedule").set_index("schedule")
    for name, idle in bubble.items():
        step = m * (tf + tb) + idle
        assert compare.loc[name, "step time (ms)"] == pytest.approx(step * 1e3, rel=1e-9)
        assert compare.loc[name, "bubble (%)"] == pytest.approx(100 * idle / step, rel=1e-9)
        assert compare.loc[name, "closed-form bubble (%)"] == pytest.approx(100 * idle / step, rel=1e-9)
    figs = gantts(show(at, "Timelines"))
    # V on the chart: interleaved bars say their chunk; the placement holds 8 chunks, 2 per device
    inter = labels(figs["Interleaved 1F1B"])
    assert {f"F{k}·{c}" for k in range(1, m + 1) for c in (1, 2)} <= set(inter)
    assert list(frame(at, "stage")["ops"]) == [2, 2, 2, 2]
    # the B/W split on the chart: W bars hatched, in a lighter shade of the micro-batch's colour
    zb = labels(figs["ZB-H1 (zero bubble)"])
    for k in range(1, m + 1):
        (f_colour, f_shape), = set(zb[f"F{k}"])
        (w_colour, w_shape), = set(zb[f"W{k}"])
        (b_colour, _), = set(zb[f"B{k}"])
        assert w_shape == "/" and f_shape == "" and len({f_colour, b_colour, w_colour}) == 3
    assert not any(label.startswith("W") for label in labels(figs["1F1B (PipeDream-flush)"]))
    shown = [(x.label, x.value) for x in at.metric]
    assert ("Closed form", f"{bubble['Interleaved 1F1B'] / (m * (tf + tb) + bubble['Interleaved 1F1B']):.1%}") in shown


@pytest.mark.slow
def test_the_bubble_is_split_into_its_parts():
    """Slow links and real weight updates: the page's parts are bubble_breakdown's, and they add up."""
    at = upload(start(), bandwidth=2e6)
    at.number_input(key="pipe_micro_batches").set_value(4).run()
    assert_clean(at)
    show(at, "Where the bubble comes from")
    table = next(df.value for df in at.dataframe if "imbalance (ms)" in df.value.columns).set_index("schedule")
    graph, devs = equal_chunks_graph(), devices(P, bandwidth=2e6)
    for name, schedule in (("GPipe", "gpipe"), ("Interleaved 1F1B", "interleaved-1f1b"), ("ZB-H1", "zb-h1")):
        placement = even_stages(graph, devs, P, virtual_stages=2 if schedule == "interleaved-1f1b" else 1)
        want = bubble_breakdown(graph, devs, placement, schedule, 4, virtual_stages=2)
        row = table.loc[name]
        for col, key in (("idle, all stages (ms)", "idle_s"), ("schedule (ms)", "schedule_s"),
                         ("imbalance (ms)", "imbalance_s"), ("weight updates (ms)", "updates_s"),
                         ("transfers (ms)", "transfers_s")):
            assert row[col] == pytest.approx(want[key] * 1e3, rel=1e-9, abs=1e-9)
        parts = row[["schedule (ms)", "imbalance (ms)", "weight updates (ms)", "transfers (ms)"]].sum()
        assert parts == pytest.approx(row["idle, all stages (ms)"], rel=1e-9)
        assert row["transfers (ms)"] > 0  # 1 MB at 2 MB/s per hop: the transfers are a visible part
    assert any((f["layout"].get("title") or {}).get("text") == "Where the bubble comes from" for f in figures(at))
    # the ideal pipeline has no transfers or updates to split off: the section goes, the timelines are shown
    at.toggle(key="pipe_ideal").set_value(True).run()
    assert_clean(at)
    assert "Where the bubble comes from" not in [t.label for t in at.tabs] and "Where the bubble" not in text(at)
    assert not [f for f in figures(at) if (f["layout"].get("title") or {}).get("text") == "Where the bubble comes from"]
    assert len(gantts(at)) == 4


@pytest.mark.slow
def test_measured_pipelines_of_this_network_are_shown_beside_the_simulated():
    from placement_core.store import RunStore
    graph = equal_chunks_graph()
    at = start()
    with RunStore() as store:  # a pipelined benchmark of this network, as placement benchmark --schedule stores it
        bid = store.add_benchmark(
            network_name=graph.name, devices_spec="cpu:4", runner="ranks", placement={}, simulated_s=0.5,
            measured_median_s=0.8, label="stages:4 1f1b m=8", network_hash=network_hash(graph), batch_size=BATCH,
            result={"status": "ok", "steps_s": [0.8], "pipeline": {
                "schedule": "1f1b", "micro_batches": 8, "virtual_stages": 1, "stages": ["cpu0", "cpu1", "cpu2", "cpu3"],
                "bubble_fraction": 0.42, "simulated": {"devices": "local", "step_s": 0.5, "bubble_fraction": 0.3}}})
        store.add_benchmark(network_name=graph.name, devices_spec="cpu:2", runner="ranks", placement={},
                            simulated_s=None, measured_median_s=0.1, network_hash="another network", batch_size=BATCH,
                            result={"status": "ok", "pipeline": {"schedule": "gpipe", "micro_batches": 2,
                                                                 "bubble_fraction": 0.1}})
    at = show(upload(at), "Measured")
    table = frame(at, "benchmark")
    assert list(table["benchmark"]) == [bid]  # the other row is another network's
    row = table.iloc[0]
    assert (row["schedule"], row["micro-batches"], row["stages"]) == ("1F1B", 8, 4)
    assert row["measured bubble (%)"] == pytest.approx(42) and row["simulated bubble (%)"] == pytest.approx(30)
    assert row["measured step (ms)"] == pytest.approx(800) and row["simulated on"] == "local"
    [fig] = [f for f in figures(at) if (f["layout"].get("title") or {}).get("text") == "Bubble: measured and simulated"]
    assert [t["y"] for t in fig["data"]] == [[pytest.approx(42)], [pytest.approx(30)]]


@pytest.mark.slow
def test_presentation_mode_enlarges_the_charts_and_survives_navigation():
    at = upload(start())
    small = next(iter(gantts(at).values()))
    at.toggle(key="pipe_big").set_value(True).run()
    assert_clean(at)
    big = next(iter(gantts(at).values()))
    assert big["layout"]["font"]["size"] > small["layout"]["font"]["size"]
    assert big["layout"]["height"] > small["layout"]["height"]
    goto(at, "trace")
    goto(at, "pipeline")
    assert at.toggle(key="pipe_big").value is True


def toy_figure(at):
    return next(f for f in figures(at) if "equal stages" in str((f["layout"].get("title") or {}).get("text", "")))


@pytest.mark.slow
def test_the_lecture_animation_reveals_the_step_with_the_bubble_shaded():
    at = start()
    goto(at, "pipeline")
    at.session_state["toy_section"] = True  # the lecture, opened
    at.run()
    for key, value in (("toy_p", 3), ("toy_m", 6), ("toy_tw", 0.0)):
        at.number_input(key=key).set_value(value)
    at.radio(key="toy_schedule").set_value("1f1b").run()
    assert_clean(at)
    fig = toy_figure(at)
    frames = fig["frames"]
    steps = fig["layout"]["sliders"][0]["steps"]
    assert len(frames) == len(steps) == 40
    assert [b["label"] for b in fig["layout"]["updatemenus"][0]["buttons"]] == ["▶ Play", "❚❚ Pause"]
    step_ms = (6 + 3 - 1) * 3.0  # (m + p − 1)(t_f + t_b), 1 ms + 2 ms
    assert float(frames[-1]["name"]) == pytest.approx(step_ms)

    def shaded(frame_):
        bubble = next(t for t in frame_["data"] if t.get("name") == "bubble (idle)")
        return sum(bubble["x"])
    # the whole step: every stage idles (p − 1)(t_f + t_b); halfway, part of it
    assert shaded(frames[-1]) == pytest.approx(3 * 2 * 3.0)
    half = frames[19]
    assert 0 < shaded(half) < shaded(frames[-1])
    # what is drawn at an instant has begun by then, cut at the cursor
    t = float(half["name"])
    work = [t_ for t_ in half["data"] if t_["type"] == "bar" and t_.get("name", "").endswith("-op")]
    assert all(b + x <= t + 1e-9 for tr in work for b, x in zip(tr["base"], tr["x"]))
    assert metrics(at)["Step (simulated)"] == "24 ms"


@pytest.mark.slow
@pytest.mark.parametrize("schedule, want", [("interleaved-1f1b", 8 * 3.0 + 3 * 3.0 / 2),
                                            ("zb-h1", 8 * 3.0 + 3 * (1.0 + 1.0 - 1.0))])
def test_the_lecture_shows_each_schedules_closed_form(schedule, want):
    """The toy's defaults, p = 4, m = 8, t_f = 1 ms, t_b = 2 ms of which t_W = 1 ms, V = 2: interleaved
    8·3 + 3·3/2 = 28.5 ms, ZB-H1 8·3 + 3·(1 + 1 − 1) = 27 ms."""
    at = start()
    goto(at, "pipeline")
    at.session_state["toy_section"] = True  # the lecture, opened
    at.run()
    at.radio(key="toy_schedule").set_value(schedule).run()
    assert_clean(at)
    shown = metrics(at)
    assert shown["Step (simulated)"] == f"{want:g} ms"
    closed_label = next(k for k in shown if k.startswith("Closed form") and "t_u" in k)
    assert shown[closed_label] == f"{want:g} ms"
    assert ("(p − 1)(t_f + t_b) / V" if schedule == "interleaved-1f1b" else "(p − 1)(t_f + t_B − t_W)") in closed_label


@pytest.mark.slow
def test_sixteen_micro_batches_get_sixteen_colours_that_stay_apart():
    from dashboard.charts.pipeline_gantt import UNIT_PALETTE, unit_color

    def lab(h):
        rgb = np.array([int(h[i:i + 2], 16) for i in (1, 3, 5)]) / 255
        rgb = np.where(rgb > 0.04045, ((rgb + 0.055) / 1.055) ** 2.4, rgb / 12.92)
        xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ rgb
        f = np.cbrt(xyz / np.array([0.95047, 1.0, 1.08883]))
        return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])
    colours = [unit_color(k) for k in range(24)]
    assert len(set(colours)) == 24 == len(UNIT_PALETTE)
    gaps = [np.linalg.norm(lab(a) - lab(b)) for i, a in enumerate(colours) for b in colours[i + 1:]]
    assert min(gaps) > 20  # CIE76: clearly different colours, not shades of one
    at = start()
    goto(at, "pipeline")
    at.session_state["toy_section"] = True  # the lecture, opened
    at.run()
    at.number_input(key="toy_m").set_value(16)
    at.radio(key="toy_schedule").set_value("gpipe").run()
    forward = {label: c for label, cs in labels(toy_figure(at)).items() for c, _ in cs if label.startswith("F")}
    assert len(forward) == 16 and len(set(forward.values())) == 16


@pytest.mark.slow
def test_the_shades_legend_is_not_drawn_in_a_micro_batchs_colour():
    """'F k: forward (full colour)' once had micro-batch 1's swatch, so a reader took it for that micro-batch."""
    from dashboard.charts.pipeline_gantt import UNIT_PALETTE
    at = start()
    goto(at, "pipeline")
    at.session_state["toy_section"] = True  # the lecture, opened
    at.run()
    at.number_input(key="toy_m").set_value(4)
    at.radio(key="toy_schedule").set_value("gpipe").run()
    fig = toy_figure(at)
    entries = {t["name"]: t["marker"]["color"] for t in fig["data"] if t.get("showlegend") and t.get("marker")}
    shades = {name: c for name, c in entries.items() if name.startswith(("F k", "B k", "W k"))}
    batches = {name: c for name, c in entries.items() if name.startswith("micro-batch")}
    assert len(shades) == 2 and len(batches) == 4
    assert not {c.lower() for c in shades.values()} & {c.lower() for c in UNIT_PALETTE + list(batches.values())}
