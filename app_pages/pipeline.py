"""Pipeline: GPipe, 1F1B, interleaved 1F1B, ZB-H1 and the thesis scheme side by side; the bubble's parts;
measured against simulated; the micro-batch sweep; a toy pipeline to teach with."""

import streamlit as st

from dashboard import pipelinesections, pipelineview, state, ui
from dashboard.lectureview import toy_section
from dashboard.pipelineview import NAMES, SHORT
from placement_core.analysis.pipeline import check_micro_batches, is_contiguous, stages_of

ui.header("Pipeline", "Pipeline parallelism, schedule by schedule: the network is cut into stages, one per device, "
          "and the batch into micro-batches that flow through them. GPipe runs every forward, then every "
          "backward; 1F1B alternates them to hold fewer activations; interleaved 1F1B gives every device V "
          "chunks to shrink the bubble V-fold; ZB-H1 splits each backward into B and W and lets W fill the "
          "bubble. Gaps in a row are the bubble.")


def _ideal_on() -> None:
    """The transfers line's button: the Ideal toggle on, before the rerun draws it."""
    st.session_state["pipe_ideal"] = True


s = state.session()
g, d = state.graph(), state.devices()
sim = s.sim
big = False

with ui.guarded("the presentation mode"):
    big = st.toggle("Presentation mode", key=ui.persist("pipe_big"),
                    help="Larger type and charts, for a projector: the page fits 1024 × 768 and 1280 × 720, "
                         "charts under each other, without Plotly's toolbar.")
    if big:
        ui.presentation_style()
CONFIG = ui.chart_config(big)

placement_of = None  # each schedule's placement, once the stages are made
with ui.guarded("the pipeline settings"):
    used = len(set(state.current_placement().tolist()))
    if big:  # two rows: every label and the Ideal toggle whole on a projector
        c1, c4 = st.columns([3, 2])
        c2, c3, c5 = st.columns([1, 1, 1.2])
    else:
        c1, c2, c3, c5 = st.columns([3, 2, 2, 2])
        c4 = c1
    sources = {"even": "Even split into p stages", "current": f"From the current placement ({ui.esc(s.placement_label)})"}
    source = c1.radio(
        "Stages", list(sources), index=0 if used < 2 else 1, horizontal=True, key=ui.persist("pipe_source"),
        format_func=sources.get,
        help="Even split: the network cut into p consecutive stages of equal compute, one per GPU (interleaved "
             "1F1B: p V chunks, chunk c on stage c mod p). Current placement: each device it uses is a stage, in "
             "the order of its first op; each run of a device's ops is a chunk for interleaved 1F1B.")
    n_gpus = sum(1 for dv in d.devices if dv.kind == "gpu") or len(d)
    top = max(1, min(len(d), len(g)))
    p_in = 1
    if source == "even":
        p_in = c4.number_input("Stages p", 1, top, min(n_gpus, 4, top), key=ui.persist("pipe_stages", bounds=(1, top)),
                               help="Stages on the p fastest GPUs (all devices when there are fewer GPUs).")
    m_default = sim.micro_batches if g.batch_size % sim.micro_batches == 0 else 1
    m_in = c2.number_input(
        "Micro-batches m", 1, 4096, m_default, key=ui.persist("pipe_micro_batches"),
        help=f"The batch of {g.batch_size} is split into m equal micro-batches (m must divide it). More "
             "micro-batches shrink the bubble (p − 1)/(m + p − 1) but make each op smaller and less efficient.")
    v_in = c3.number_input(
        "Virtual stages V", 1, 8, 2, key=ui.persist("pipe_virtual", bounds=(1, 8)),
        help="Interleaved 1F1B only: chunks per device. The bubble shrinks to (p − 1)(t_f + t_b)/V; every chunk "
             "boundary is one more transfer.")
    ideal = c5.toggle(
        "Ideal pipeline", key=ui.persist("pipe_ideal"),
        help="Free communication and weight updates: transfers and updates take no time, so only the schedule "
             "and the stages' imbalance are left. With p equal stages each schedule meets its closed form.")
    schedules = st.multiselect(  # a row of its own: four schedules' names fit side by side
        "Schedules", list(NAMES), default=["gpipe", "1f1b", "interleaved-1f1b", "zb-h1"], format_func=SHORT.get,
        key=ui.persist("pipe_schedules", list(NAMES)),
        help="GPipe: all forwards, then all backwards, one weight update. 1F1B: after a warm-up of p − s forwards, "
             "stage s alternates one forward and one backward. Interleaved 1F1B (Megatron-LM): V chunks per "
             "device, micro-batches in groups of p. ZB-H1 (zero bubble): W, the weight gradient, waits and fills "
             "the bubble. Thesis scheme: the whole batch at once (no micro-batches), for reference.")
    v = int(v_in)
    placement_of = pipelineview.placements(state.graph_key(), state.devices_key(), state.cost_key(), g, d,
                                           schedules or ["gpipe"], source, int(p_in), v, state.current_placement(),
                                           state.cost_kw(g, sim))
    placement = next(iter(placement_of.values()))
    stages = stages_of(placement, g, d)
    p = len(stages)
    c1, c2 = (st.container(), st.container()) if big else st.columns([4, 1])
    c1.dataframe([{"stage": st_.index + 1, "device": st_.device, "ops": st_.ops, "first op": st_.first_op,
                   "last op": st_.last_op} for st_ in stages], hide_index=True, key="pipe_stage_table")
    if source == "even":
        if c2.button("Use this split", key="pipe_use", icon=":material/check:",
                     help="Make this split the current placement, for the Trace, Optimize and Benchmark pages."):
            state.set_placement(placement, f"{p} pipeline stages")
            st.rerun()
    if p < 2:
        st.info("One stage: there is nothing to pipeline. Choose an even split into 2 or more stages, or a "
                "placement that uses several devices.", icon=":material/info:")
    elif not is_contiguous(placement):
        st.caption("The placement is not a clean pipeline split: some devices hold ops from several places in the "
                   "network, so micro-batches go back and forth between stages (interleaved 1F1B's chunks).")

m, views, parts, facts = None, [], [], []
with ui.guarded("the schedules"):
    m = check_micro_batches(g.batch_size, int(m_in)) if placement_of is not None else None
    if m is None:
        pass  # the stages could not be made: the message above says what to fix
    elif not schedules:
        st.info("Choose at least one schedule.", icon=":material/info:")
    else:
        views = pipelineview.schedule_runs(state.graph_key(), state.devices_key(), g, d,
                                           {k: placement_of[k] for k in schedules}, m, v, state.cost_key(),
                                           state.cost_kw(g, sim), sim.penalty, ideal)
        st.markdown(f"##### {p} stage(s), {m} micro-batches of {g.batch_size // m}"
                    + (" · ideal pipeline (free transfers and weight updates)" if ideal else "")
                    + (f" · V = {v} chunks per device for interleaved 1F1B" if "interleaved-1f1b" in schedules else ""))
        if not ideal:  # the bubble's parts: here for the line on transfers, in their tab as a chart
            parts = pipelineview.breakdowns(state.graph_key(), state.devices_key(), g, d,
                                            {vw["run"].schedule: vw["placement"] for vw in views}, m, v,
                                            state.cost_key(), state.cost_kw(g, sim), sim.penalty)
            note = pipelineview.transfers_note(views, parts)
            if note:
                a, b = (st.container(), st.container()) if big else st.columns([4, 1.2], vertical_alignment="center")
                a.warning(note, icon=":material/cable:")
                b.button("Free transfers (Ideal pipeline)", key="pipe_free_transfers", on_click=_ideal_on,
                         icon=":material/toggle_on:", help="Turns on *Ideal pipeline* above: transfers and weight "
                                                           "updates take no time.")
        facts = pipelinesections.compare_facts(views, g, d, m, state.cost_kw(g, sim))

# One section drawn at a time: every chart on the page is redrawn by the browser at each change of m (the
# page's slowest part), so the tabs rerun the page and only the chosen one is built and sent.
if views:
    with ui.guarded("the pipeline's sections"):
        labels = [lb for lb in pipelinesections.VIEWS if parts or lb != pipelinesections.BUBBLE]  # ideal: no parts
        shown = pipelinesections.Shown(views, parts, facts, m, v, big, CONFIG, ideal, stages,
                                       {k: placement_of[k] for k in schedules})
        for label, tab in zip(labels, st.tabs(labels, key=ui.persist("pipe_view", labels), on_change="rerun")):
            if tab.open:
                with tab:
                    pipelinesections.SECTIONS[label](shown)

with ui.guarded("the toy pipeline"):
    # runs only while open: its animation (40 frames) is the page's most expensive figure
    toy = st.expander("Teach it: p equal stages, no network", expanded=False, key="toy_section", on_change="rerun")
    if toy.open:
        with toy:
            toy_section(big, CONFIG)

if views:  # the next click on m finds its simulations done (after the page is drawn)
    pipelineview.prefetch(state.graph_key(), state.devices_key(), g, d, {k: placement_of[k] for k in schedules},
                          pipelineview.neighbours(g.batch_size, m), v, state.cost_key(), state.cost_kw(g, sim),
                          sim.penalty, ideal)
