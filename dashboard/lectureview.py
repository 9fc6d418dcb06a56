"""The Pipeline page's lecture section: p equal stages and no network (the toy pipeline), every schedule's closed
form beside the simulation, and the step revealed frame by frame with the bubble shaded."""

from __future__ import annotations

import streamlit as st

from placement_core.analysis import fmt_seconds
from placement_core.analysis.closed_forms import FORMULAS, holds
from placement_core.analysis.pipeline import schedule_blocks, schedule_rows
from placement_core.analysis.toy_pipeline import (Toy, bubble_breakdown, closed_form_bubble, closed_form_step,
                                                  run_toy, toy_network)

from . import ui
from .charts import pipeline_gantt
from .pipelineview import NAMES

TOY_SCHEDULES = ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1"]


@st.cache_data(max_entries=16, show_spinner="Simulating the toy pipeline…")
def _toy(toy: Toy, schedule: str) -> dict:
    run = run_toy(toy, schedule)
    _, devices, _ = toy_network(toy, schedule)
    rows = schedule_rows(run, devices)
    return {"run": run, "rows": rows, "blocks": schedule_blocks(run.evaluation.result.trace, rows, chunk_of=run.chunk_of),
            "parts": bubble_breakdown(toy, run)}


@st.cache_resource(max_entries=16, show_spinner=False)
def _toy_figure(toy: Toy, schedule: str, title: str, chunks: bool, big: bool):
    """The animation (40 frames: seconds to build), once per toy, schedule and type size."""
    view = _toy(toy, schedule)
    return pipeline_gantt.animated_gantt(view["blocks"], view["rows"], toy.p, view["run"].step_time, title,
                                         chunks=chunks, big=big)


def toy_section(big: bool, config: dict | None = None) -> None:
    st.caption("A pipeline with nothing but the schedule in it: p stages that each take t_f forward and t_b "
               "backward per micro-batch (t_W of it the weight gradient, for ZB-H1), simulated by the same "
               "simulator as your placements. With free transfers the step is exactly the schedule's closed form; "
               "press ▶ to watch it fill, the bubble shaded grey.")
    c = st.columns(4) if not big else st.columns(2) + st.columns(2)
    toy_p = c[0].number_input("stages p", 1, 16, 4, key=ui.persist("toy_p", bounds=(1, 16)))
    toy_m = c[1].number_input("micro-batches m", 1, 64, 8, key=ui.persist("toy_m", bounds=(1, 64)))
    toy_v = c[2].number_input("virtual stages V", 1, 8, 2, key=ui.persist("toy_v", bounds=(1, 8)),
                              help="Interleaved 1F1B: each stage is V chunks, chunk c on stage c mod p.")
    hop = c[3].number_input("transfer per hop (ms)", 0.0, 1e4, 0.0, key=ui.persist("toy_hop", bounds=(0.0, 1e4)))
    c = st.columns(4) if not big else st.columns(2) + st.columns(2)
    t_f = c[0].number_input("t_f (ms)", 0.0, 1e4, 1.0, key=ui.persist("toy_tf", bounds=(0.0, 1e4)))
    t_b = c[1].number_input("t_b (ms)", 0.0, 1e4, 2.0, key=ui.persist("toy_tb", bounds=(0.0, 1e4)))
    t_w = c[2].number_input("of it t_W (ms)", 0.0, 1e4, 1.0, key=ui.persist("toy_tw", bounds=(0.0, 1e4)),
                            help="ZB-H1: the weight-gradient part W of the backward t_b; B, the input gradient, is "
                                 "the rest.")
    t_u = c[3].number_input("update t_u (ms)", 0.0, 1e4, 0.0, key=ui.persist("toy_tu", bounds=(0.0, 1e4)))
    schedule = st.radio("Schedule", TOY_SCHEDULES, horizontal=True, format_func=NAMES.get,
                        key=ui.persist("toy_schedule", TOY_SCHEDULES))
    toy = Toy(int(toy_p), int(toy_m), t_f / 1e3, t_b / 1e3, t_u / 1e3, hop / 1e3, int(toy_v), min(t_w, t_b) / 1e3)
    if t_w > t_b:
        st.caption(f"t_W is part of t_b: using t_W = {t_b:g} ms.")
    view = _toy(toy, schedule)
    run, parts = view["run"], view["parts"]
    v = toy.v if schedule == "interleaved-1f1b" else 1
    title = (f"{NAMES[schedule]} · {toy.p} equal stages" + (f" × {v} chunks" if v > 1 else "")
             + f" · {toy.m} micro-batches")
    fig = _toy_figure(toy, schedule, title, v > 1, big)
    st.plotly_chart(fig, key="toy_gantt", config=config or ui.chart_config(big))
    closed = closed_form_step(toy.p, toy.m, toy.t_f, toy.t_b, toy.t_u, schedule=schedule, v=v, t_w=toy.t_w)
    m1, m2, m3 = st.columns(3) if not big else (st.columns(2) + [st.container()])
    m1.metric("Step (simulated)", fmt_seconds(run.step_time),
              delta=None if hop == 0 else f"{(run.step_time - closed) * 1e3:+.4g} ms against the closed form",
              delta_color="inverse")
    label = "(m + p − 1)(t_f + t_b) + t_u" if schedule in ("gpipe", "1f1b") else \
        f"m(t_f + t_b) + {FORMULAS[schedule]} + t_u"
    m2.metric(f"Closed form {label}", fmt_seconds(closed))
    bubble = closed_form_bubble(toy.p, toy.m, schedule=schedule, t_f=toy.t_f, t_b=toy.t_b, v=v, t_w=toy.t_w)
    m3.metric("Bubble (p − 1)/(m + p − 1)" if schedule in ("gpipe", "1f1b") else f"Bubble {FORMULAS[schedule]}",
              f"{bubble:.1%}")
    caveat = holds(schedule, toy.p, toy.m, toy.t_f, toy.t_b, t_w=toy.t_w)
    if caveat:
        st.caption(f"Note: {caveat}; the simulation is what this schedule does.")
    if parts["idle_s"] > 0:
        st.caption(f"Idle time over all stages: {fmt_seconds(parts['idle_s'])}, of which the textbook bubble of "
                   f"equal stages is {fmt_seconds(parts['textbook_s'])} and transfers add "
                   f"{fmt_seconds(parts['transfers_s'])} ({parts['transfer_share']:.0%}).")
