"""Pipeline page (AppTest) and the GPipe/1F1B schedules in the shared simulator settings.

The numbers on the page are checked against the simulator run independently here (``run_schedule``,
``sweep``, ``ProblemSpec.build`` on the same inputs) and, for the ideal pipeline of p equal stages, against
the closed forms: step (m + p - 1)(t_f + t_b), bubble (p - 1)/(m + p - 1).
"""

import json

import pytest
from apptest_util import (assert_clean, figures, frame, goto, metrics, show_tab, sidebar_text, start, text,
                          wait_for_runs)
from helpers import devices, op

from placement_core import load_devices, load_network
from placement_core.analysis import fmt_bytes, fmt_seconds
from placement_core.analysis.pipeline import even_stages, run_schedule, stages_of, sweep
from placement_core.model.devices import devices_to_dict
from placement_core.model.graph import Graph
from placement_core.formats.network import network_to_dict
from placement_core.problem import ProblemSpec

RESNET, MALVIK = load_network("resnet50"), load_devices("malvik-4gpu")


def pipeline_page(at=None, **widgets):
    at = at or start()
    goto(at, "pipeline")
    assert_clean(at)
    for key, value in widgets.items():
        w = at.number_input(key=key) if key in ("pipe_stages", "pipe_micro_batches") else None
        if key == "pipe_schedules":
            w = at.multiselect(key=key)
        elif key == "pipe_ideal":
            w = at.toggle(key=key)
        w.set_value(value)
    if widgets:
        at.run()
        assert_clean(at)
    return at


def show(at, label: str):
    """One of the page's tabs (only the chosen one is drawn): Timelines, Numbers and memory, ..."""
    return show_tab(at, "pipe_view", label)


def gantts(at) -> dict[str, dict]:
    """The schedule timelines by schedule name (their titles start with it)."""
    out = {}
    for f in figures(at):
        title = (f["layout"].get("title") or {}).get("text", "")
        if "· step" in title:
            out[title.split(" · ")[0]] = f
    return out


def memory_figures(at) -> list[dict]:
    """Each schedule's peak memory per stage (the Numbers and memory tab)."""
    return [f for f in figures(at) if (f["layout"].get("title") or {}).get("text") == "Peak memory per stage"]


def bars(fig):
    """(label, colour, device row, width in ms) of every labelled bar (F k / B k / W k / U)."""
    out = []
    for t in fig["data"]:
        if t["type"] != "bar" or not t.get("text"):
            continue
        colours = t["marker"]["color"]
        colours = colours if isinstance(colours, list) else [colours] * len(t["text"])
        for label, colour, y, x in zip(t["text"], colours, t["y"], t["x"]):
            if label:  # transfers on link rows carry no label
                out.append((label, colour, y, x))
    return out


ALL = {"GPipe", "1F1B (PipeDream-flush)", "Interleaved 1F1B", "ZB-H1 (zero bubble)"}


@pytest.mark.slow
def test_page_renders_cleanly_with_the_default_state():
    at = pipeline_page()
    # the default placement uses one device, so the page starts from an even split into 4 stages
    assert at.radio(key="pipe_source").value == "even"
    placement = even_stages(RESNET, MALVIK, 4)
    table = frame(at, "stage")
    assert list(table["device"]) == ["gpu0", "gpu1", "gpu2", "gpu3"]
    assert list(table["ops"]) == [s.ops for s in stages_of(placement, RESNET, MALVIK)]
    assert sum(table["ops"]) == len(RESNET)
    assert list(table["first op"])[0] == "x" and list(table["last op"])[-1] == "fc"
    assert set(gantts(at)) == ALL
    assert not memory_figures(at)  # the timelines alone: the other sections are tabs, drawn when chosen
    drawn = figures(at) + figures(show(at, "Numbers and memory"))
    assert len(memory_figures(at)) == 4 and not gantts(at)
    drawn += figures(show(at, "Choosing m")) + figures(show(at, "Where the bubble comes from"))
    for f in drawn:
        for axis in ("xaxis", "yaxis"):
            if f["layout"].get(axis, {}).get("type") != "category" and "title" in f["layout"].get(axis, {}):
                assert "(" in f["layout"][axis]["title"]["text"]  # a unit on every quantitative axis


@pytest.mark.slow
def test_numbers_shown_are_the_simulators():
    p, m = 3, 8
    at = pipeline_page(pipe_stages=p, pipe_micro_batches=m)
    placement = even_stages(RESNET, MALVIK, p)
    runs = {s: run_schedule(RESNET, MALVIK, placement, s, m) for s in ("gpipe", "1f1b")}
    shown = [(m_.label, m_.value) for m_ in at.metric]  # beside the timelines
    compare = frame(show(at, "Numbers and memory"), "schedule").set_index("schedule")
    for name, s in (("GPipe", "gpipe"), ("1F1B (PipeDream-flush)", "1f1b")):
        run = runs[s]
        assert compare.loc[name, "step time (ms)"] == pytest.approx(run.step_time * 1e3, rel=1e-12)
        assert compare.loc[name, "bubble (%)"] == pytest.approx(run.bubble_fraction * 100, rel=1e-12)
        assert compare.loc[name, "closed-form bubble (%)"] == pytest.approx(100 * (p - 1) / (m + p - 1))
        assert compare.loc[name, "first-stage peak (GB)"] == pytest.approx(run.stage_peak_memory()[0] / 1e9)
        assert ("Step time", fmt_seconds(run.step_time)) in shown
        assert ("Bubble", f"{run.bubble_fraction:.1%}") in shown
        assert ("Peak memory", fmt_bytes(max(run.stage_peak_memory()))) in shown
    # the bubble is the stage devices' mean idle share of the step: check it from busy times too
    r = runs["gpipe"].evaluation.result
    stage_devs = [MALVIK.index[s.device] for s in stages_of(placement, RESNET, MALVIK)]
    assert runs["gpipe"].bubble_fraction == pytest.approx(1 - r.busy[stage_devs].mean() / r.makespan)
    # peak memory per stage, a chart per schedule, in stage order
    for fig, s in zip(memory_figures(at), ("gpipe", "1f1b")):  # the first two of the four
        bar = fig["data"][0]
        assert bar["y"] == ["gpu0", "gpu1", "gpu2"]
        assert bar["x"] == pytest.approx([b / 1e9 for b in runs[s].stage_peak_memory()])
    # GPipe holds all m micro-batches' activations on the first stage, 1F1B at most p of them
    assert runs["1f1b"].stage_peak_memory()[0] < runs["gpipe"].stage_peak_memory()[0]


@pytest.mark.slow
def test_gantts_have_a_row_per_stage_and_one_colour_per_micro_batch():
    p, m = 4, 4
    at = pipeline_page(pipe_stages=p, pipe_micro_batches=m)
    placement = even_stages(RESNET, MALVIK, p)
    figs = gantts(at)
    colours = {}
    for name, s in (("GPipe", "gpipe"), ("1F1B (PipeDream-flush)", "1f1b")):
        fig = figs[name]
        run = run_schedule(RESNET, MALVIK, placement, s, m)
        res = run.evaluation.result
        links = [f"{c.name} (link)" for c, busy in zip(MALVIK.channels, res.channel_busy) if busy > 0]
        assert fig["layout"]["yaxis"]["categoryarray"] == ["gpu0", "gpu1", "gpu2", "gpu3"] + links
        assert fig["layout"]["xaxis"]["title"]["text"] == "time (ms)"
        # every device's bars add up to its busy time in the simulator
        for dev in ("gpu0", "gpu1", "gpu2", "gpu3"):
            width = sum(x for t in fig["data"] if t["type"] == "bar" and t.get("text")
                        for y, x, label in zip(t["y"], t["x"], t["text"]) if y == dev and label)
            assert width == pytest.approx(res.busy[MALVIK.index[dev]] * 1e3, rel=1e-9)
        labels = {}
        for label, colour, _, _ in bars(fig):
            assert labels.setdefault(label, colour) == colour  # one colour per micro-batch and phase
        assert {f"F{k}" for k in range(1, m + 1)} | {f"B{k}" for k in range(1, m + 1)} <= set(labels)
        colours[name] = labels
    gpipe, ofob = colours.values()
    assert {k: v for k, v in gpipe.items() if k != "U"} == {k: v for k, v in ofob.items() if k != "U"}
    assert len({gpipe[f"F{k}"] for k in range(1, m + 1)}) == m  # micro-batches tell apart
    assert all(gpipe[f"F{k}"] != gpipe[f"B{k}"] for k in range(1, m + 1))  # backward is another shade
    # the same time axis on every chart, wide enough for the slowest
    xr = [figs[n]["layout"]["xaxis"]["range"] for n in figs]
    assert all(x == xr[0] for x in xr)
    slowest = max(run_schedule(RESNET, MALVIK, even_stages(RESNET, MALVIK, p, virtual_stages=2 if s ==
                                                          "interleaved-1f1b" else 1), s, m, virtual_stages=2).step_time
                  for s in ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1"))
    assert slowest * 1e3 <= xr[0][1] <= slowest * 1e3 * 1.02
    # the legend names micro-batches, grouped into forward and backward
    legend = {t["name"] for f in figs.values() for t in f["data"] if t.get("showlegend")}
    assert {f"micro-batch {k}" for k in range(1, m + 1)} <= legend
    # one legend, under the first timeline: the colours are the same on every chart
    assert [any(t.get("showlegend") for t in f["data"]) for f in figs.values()] == [True, False, False, False]


@pytest.mark.slow
def test_sweep_chart_is_the_sweep():
    at = show(pipeline_page(), "Choosing m")
    sweep_fig = next(f for f in figures(at) if "micro-batches per batch (m)" in str(f["layout"].get("xaxis")))
    counts = [k for k in range(1, 65) if 128 % k == 0]
    assert counts == [1, 2, 4, 8, 16, 32, 64]
    rows = sweep(RESNET, MALVIK, even_stages(RESNET, MALVIK, 4), ("gpipe", "1f1b"), counts)
    for s, name in (("gpipe", "GPipe"), ("1f1b", "1F1B (PipeDream-flush)")):
        mine = [r for r in rows if r["schedule"] == s]
        step, memory = [t for t in sweep_fig["data"] if t["name"] == name]
        assert list(step["x"]) == counts and list(memory["x"]) == counts
        assert step["y"] == pytest.approx([r["step_time_s"] * 1e3 for r in mine], rel=1e-12)
        assert memory["y"] == pytest.approx([r["first_stage_peak_bytes"] / 1e9 for r in mine], rel=1e-12)
    layout = sweep_fig["layout"]
    assert layout["yaxis"]["title"]["text"] == "step time (ms)" and layout["yaxis2"]["title"]["text"] == \
        "peak memory (GB)"
    best_gpipe = min((r for r in rows if r["schedule"] == "gpipe" and r["feasible"]), key=lambda r: r["step_time_s"])
    assert f"GPipe: m = {best_gpipe['micro_batches']} ({fmt_seconds(best_gpipe['step_time_s'])} per batch" in text(at)


@pytest.mark.slow
def test_micro_batches_that_do_not_divide_the_batch_are_an_error_message():
    at = pipeline_page()
    at.number_input(key="pipe_micro_batches").set_value(3).run()
    assert not at.exception
    [err] = at.error
    assert "3 micro-batches do not split the batch of 128 evenly" in err.value
    assert "1, 2, 4, 8, 16, 32, 64, 128" in err.value
    assert not gantts(at)
    at.number_input(key="pipe_micro_batches").set_value(16).run()
    assert_clean(at)
    assert len(gantts(at)) == 4


@pytest.mark.slow
def test_the_thesis_scheme_can_join_the_comparison():
    at = pipeline_page(pipe_schedules=["gpipe", "1f1b", "thesis"])
    assert len(gantts(at)) == 3
    compare = frame(show(at, "Numbers and memory"), "schedule").set_index("schedule")
    run = run_schedule(RESNET, MALVIK, even_stages(RESNET, MALVIK, 4), "thesis", 1)
    assert compare.loc["Thesis scheme (whole batch)", "step time (ms)"] == pytest.approx(run.step_time * 1e3)
    assert compare.loc["Thesis scheme (whole batch)", "micro-batches"] == 1


T_F, T_B, P, BATCH = 1.0, 2.0, 4, 24


def upload_equal_stages(at):
    """P equal stages a0 -> a1 -> ... (t_f, t_b per batch), each sending 1 MB on a slow link and holding
    weights (so transfers and updates take time unless the pipeline is ideal), on P cpu devices."""
    ops = [op(f"a{s}", [f"a{s - 1}"] if s else [], fwd=T_F, bwd=T_B, out=1e6, params=1e6) for s in range(P)]
    graph = Graph("equal-stages", ops, batch_size=BATCH)
    at.file_uploader(key="net_upload").upload("stages.json", json.dumps(network_to_dict(graph)).encode(),
                                              "application/json").run()
    assert_clean(at)
    goto(at, "devices")
    at.file_uploader(key="dev_upload").upload("cpus.json", json.dumps(devices_to_dict(devices(P, bandwidth=1e6)))
                                              .encode(), "application/json").run()
    assert_clean(at)
    return at


@pytest.mark.slow
@pytest.mark.parametrize("m", [1, 4, 6, 24])
def test_ideal_pipeline_of_equal_stages_has_the_textbook_bubble(m):
    at = upload_equal_stages(start())
    at = pipeline_page(at, pipe_stages=P, pipe_micro_batches=m, pipe_schedules=["gpipe", "1f1b"])
    compare = frame(show(at, "Numbers and memory"), "schedule").set_index("schedule")
    real = compare.loc["GPipe", "step time (ms)"]
    at.toggle(key="pipe_ideal").set_value(True).run()
    assert_clean(at)
    assert list(frame(at, "stage")["device"]) == [f"d{s}" for s in range(P)]
    compare = frame(at, "schedule").set_index("schedule")  # the tab chosen stays
    bubble = (P - 1) / (m + P - 1)
    step = (m + P - 1) * (T_F + T_B) / m  # times are per batch: a micro-batch takes 1/m of them
    for name in ("GPipe", "1F1B (PipeDream-flush)"):
        assert compare.loc[name, "bubble (%)"] == pytest.approx(100 * bubble, rel=1e-9)
        assert compare.loc[name, "step time (ms)"] == pytest.approx(step * 1e3, rel=1e-9)
    show(at, "Timelines")
    assert [v for k, v in [(x.label, x.value) for x in at.metric] if k == "Bubble"] == [f"{bubble:.1%}"] * 2
    assert real > step * 1e3  # with transfers and weight updates the same pipeline is slower
    figs = gantts(at)
    assert all(f["layout"]["yaxis"]["categoryarray"] == [f"d{s}" for s in range(P)] for f in figs.values())


@pytest.mark.slow
def test_gpipe_in_the_shared_settings_reaches_the_sidebar_and_the_trace():
    at = start()
    goto(at, "trace")
    at.number_input(key="trace_stages").set_value(4)
    at.button(key="trace_use_stages").click().run()
    assert_clean(at)
    thesis_time = metrics(at)["Time per batch"]
    assert at.number_input(key="trace_micro_batches").disabled
    at.selectbox(key="trace_schedule").set_value("gpipe").run()
    at.number_input(key="trace_micro_batches").set_value(8).run()
    assert_clean(at)
    # on the Trace page it is a what-if: the shared settings move only when the user applies it
    assert at.session_state["trace_what_if"].schedule == "gpipe"
    assert at.session_state["sim"].schedule == "thesis"
    assert "Simulator: thesis scheme" in sidebar_text(at)
    at.button(key="trace_apply").click().run()
    assert_clean(at)
    assert at.session_state["sim"].schedule == "gpipe" and at.session_state["sim"].micro_batches == 8
    assert at.number_input(key="trace_batches").disabled and at.number_input(key="trace_in_flight").disabled
    assert "Simulator: GPipe schedule, 8 micro-batches per batch" in sidebar_text(at)
    # the settings' expander says so in the same run (its label is drawn above the controls)
    assert at.expander[0].label.endswith("· GPipe schedule, 8 micro-batches per batch — change")
    placement = even_stages(RESNET, MALVIK, 4)
    ev = ProblemSpec(schedule="gpipe", micro_batches=8, profile="default", penalty="thesis").build(RESNET, MALVIK).simulate(placement,
                                                                                                   trace=True)
    assert metrics(at)["Time per batch"] == fmt_seconds(ev.result.batch_time) != thesis_time
    assert int(metrics(at)["Events"].replace(",", "")) == len(ev.result.trace)
    gantt = next(f for f in figures(at) if f["layout"]["xaxis"]["title"]["text"] == "time (ms)"
                 and "Memory" not in str(f["layout"].get("title", "")))
    legend = [t["name"] for t in gantt["data"] if t.get("showlegend")]
    assert legend == [f"micro-batch {k}" for k in range(1, 9)]  # micro-batches are the trace's batches
    at.toggle(key="trace_critical").set_value(True).run()
    assert_clean(at)
    # a count that does not divide the batch is refused with the divisors; the last valid one stays
    at.number_input(key="trace_micro_batches").set_value(3).run()
    assert not at.exception
    [err] = at.error
    assert "3 micro-batches do not split the batch of 128 evenly; still simulating with 8" in err.value
    assert ui_sim(at).micro_batches == 8
    # the Optimize page shows the same settings
    goto(at, "optimize")
    assert_clean(at)
    assert at.selectbox(key="opt_schedule").value == "gpipe" and at.number_input(key="opt_micro_batches").value == 8


def ui_sim(at):
    """The settings the Trace page simulates with: its what-if, else the shared ones."""
    return at.session_state["trace_what_if"] or at.session_state["sim"] if "trace_what_if" in at.session_state \
        else at.session_state["sim"]


@pytest.mark.slow
def test_optimize_searches_under_the_schedule():
    at = start()
    goto(at, "optimize")
    at.selectbox(key="opt_schedule").set_value("1f1b").run()
    at.number_input(key="opt_micro_batches").set_value(4).run()
    at.multiselect(key="opt_algorithms").set_value(["random"])
    at.number_input(key="opt_evaluations").set_value(50)
    at.button(key="opt_start").click().run()
    wait_for_runs(at)
    assert_clean(at)
    from dashboard.background_runs import REGISTRY
    [r] = REGISTRY.runs(at.session_state["session_key"])
    assert r.spec.sim.schedule == "1f1b" and r.problem.settings.schedule == "1f1b"
    expect = ProblemSpec(schedule="1f1b", micro_batches=4, profile="default", penalty="thesis").build(RESNET, MALVIK)
    assert r.result.best_objective == pytest.approx(expect.evaluate(r.result.best_placement), rel=1e-12)
    assert "1F1B schedule, 4 micro-batches per batch" in text(at)


@pytest.mark.slow
def test_settings_from_before_schedules_still_load():
    """Settings a session kept as a dict (before schedules existed, and before they were a SimChoices) load, with
    the defaults for what they do not say."""
    from dashboard.settings import SimChoices
    at = start()
    at.session_state["sim"] = {"batches": 2, "in_flight": 2, "penalty": "thesis", "profile": "default"}
    goto(at, "trace")
    assert_clean(at)
    assert at.session_state["sim"] == SimChoices(batches=2, in_flight=2)
    assert at.session_state["sim"].schedule == "thesis" and at.session_state["sim"].micro_batches == 4
    assert "thesis scheme, 2 batch(es), 2 in flight" in sidebar_text(at)


def test_pipeline_gantt_draws_message_overhead_as_thin_grey_bars_over_the_stage_work():
    from dataclasses import replace

    from dashboard.charts.pipeline_gantt import schedule_gantt
    from dashboard.charts.style import OVERHEAD_COLOR, OVERHEAD_NAME
    from placement_core.analysis.pipeline import schedule_blocks
    from placement_core.model.devices import DeviceGraph
    d = devices(2)
    d = DeviceGraph(d.name, [replace(x, message_overhead=0.25) for x in d.devices], list(d.channels))
    graph = Graph("g", [op("a", fwd=1, bwd=2), op("b", ["a"], fwd=1, bwd=2)], batch_size=4)
    run = run_schedule(graph, d, [0, 1], "gpipe", 2, trace=True, comm_efficiency=1.0)
    res = run.evaluation.result
    blocks = schedule_blocks(res.trace, ["d0", "d1", "bus"])
    fig = schedule_gantt(blocks, ["d0", "d1", "bus"], 2, res.makespan, "GPipe").to_plotly_json()
    [grey] = [t for t in fig["data"] if t.get("name") == OVERHEAD_NAME]
    assert grey["marker"]["color"] == OVERHEAD_COLOR and grey["width"] == 0.25
    assert sum(grey["x"]) == pytest.approx(0.25e3 * sum(1 for e in res.trace if e.kind in ("send", "recv")))
    for dev in ("d0", "d1"):  # the labelled stage bars still add up to the busy time, overhead included
        width = sum(x for t in fig["data"] if t["type"] == "bar" and t.get("text") is not None
                    for y, x, label in zip(t["y"], t["x"], t["text"]) if y == dev and label)
        assert width == pytest.approx(res.busy[d.index[dev]] * 1e3)


def test_peak_stage_note_names_the_stage_with_the_highest_peak():
    """The caption names the stage the simulation found, not the first one: weights can put it elsewhere."""
    from types import SimpleNamespace

    from dashboard.pipelineview import peak_stage_note

    def run(schedule, peaks, devices):
        return {"run": SimpleNamespace(schedule=schedule, stage_devices=devices,
                                       stage_peak_memory=lambda: list(peaks))}

    views = [run("gpipe", [1e9, 3e9, 2e9], [1, 2, 3]), run("1f1b", [2.5e9, 1e9, 1.5e9], [1, 2, 3])]
    note = peak_stage_note(views, ["cpu0", "gpu0", "gpu1", "gpu2"], 8)
    assert note == ("Highest peak memory at m = 8: GPipe stage 2 (gpu1, 3 GB); "
                    "1F1B stage 1 (gpu0, 2.5 GB).")


@pytest.mark.slow
def test_kept_settings_that_no_longer_fit_fall_back_to_defaults():
    """5 stages kept from the 4-GPU server (5 devices) cannot exist on malvik (3 devices): the page falls back
    to its default instead of failing; the Trace's kept single device does the same."""
    at = start()
    goto(at, "pipeline")
    at.number_input(key="pipe_stages").set_value(5).run()
    assert_clean(at)
    goto(at, "trace")
    at.selectbox(key="trace_single").set_value("gpu3").run()
    goto(at, "devices")
    at.selectbox(key="dev_preset").set_value("malvik").run()
    goto(at, "pipeline")
    assert_clean(at)
    assert at.number_input(key="pipe_stages").value == 2  # min(2 GPUs, 4, 3 devices)
    goto(at, "trace")
    assert_clean(at)
    assert at.selectbox(key="trace_single").value == "gpu0"
