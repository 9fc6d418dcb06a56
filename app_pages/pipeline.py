"""Pipeline: GPipe, 1F1B, interleaved 1F1B, ZB-H1 and the thesis scheme side by side; the bubble's parts;
measured against simulated; the micro-batch sweep; a toy pipeline to teach with."""

import streamlit as st

from dashboard import pipelineview, state, ui
from dashboard.charts import pipeline_bars
from dashboard.lectureview import toy_section
from dashboard.pipelineview import NAMES, SHORT
from placement_core.analysis import fmt_bytes, fmt_seconds
from placement_core.analysis.bubble import stage_times
from placement_core.analysis.closed_forms import FORMULAS, bubble_fraction
from placement_core.analysis.pipeline import best_micro_batches, check_micro_batches, is_contiguous, stages_of

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

m, views, parts = None, [], []
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
        x_max = max(vw["run"].step_time for vw in views)
        capacity = {n: dv.memory_bytes for n, dv in zip(d.names, d.devices)}
        peak_max = max(max(vw["run"].stage_peak_memory()) for vw in views)
        cap_max = max(d.devices[i].memory_bytes for vw in views for i in vw["run"].stage_devices)
        mem_max = max(peak_max * 1.3, cap_max * 1.08) if cap_max <= 5 * peak_max else peak_max * 1.3
        st.markdown(f"##### {p} stage(s), {m} micro-batches of {g.batch_size // m}"
                    + (" · ideal pipeline (free transfers and weight updates)" if ideal else "")
                    + (f" · V = {v} chunks per device for interleaved 1F1B" if "interleaved-1f1b" in schedules else ""))
        if not ideal:  # the bubble's parts: here for the line on transfers, below as a chart
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
        compare, memory_rows = [], []
        for vw in views:
            run = vw["run"]
            devs = [d.names[i] for i in run.stage_devices]
            unit = "batch" if run.schedule == "thesis" else "micro-batch"
            t = stage_times(g, d, vw["placement"], run.stage_devices, schedule=run.schedule, micro_batches=m,
                            **state.cost_kw(g, sim))
            closed = bubble_fraction(run.schedule, len(devs), run.micro_batches, t["t_f"], t["t_b"],
                                     v=run.virtual_stages, t_w=t["t_w"])
            with st.container(border=True):
                if big:  # the timeline across the page; the numbers and the memory under it
                    left = st.container()
                    right, mem_col = st.columns([1, 2])
                else:
                    left, right = st.columns([4, 1.25])
                    mem_col = right
                title = f"{(SHORT if big else NAMES)[run.schedule]} · step {fmt_seconds(run.step_time)} · bubble {run.bubble_fraction:.1%}"
                fig = pipelineview.gantt_figure(vw, x_max, title, unit, run.chunk_of is not None and
                                                run.virtual_stages > 1, big)
                left.plotly_chart(fig, key=f"pipe_gantt_{run.schedule}", config=CONFIG)
                right.metric("Step time", fmt_seconds(run.step_time),
                             help="One batch (all its micro-batches), from the first forward to the last weight "
                                  "update.")
                right.metric("Bubble", f"{run.bubble_fraction:.1%}",
                             help="Share of the step a stage device is idle, averaged over the stages.")
                right.metric("Closed form", f"{closed:.1%}",
                             help=f"{FORMULAS[run.schedule]} over the step, for {len(devs)} equal stages with the "
                                  "stages' mean times (t_f, t_b, t_W per micro-batch) and free transfers.")
                peaks = run.stage_peak_memory()
                mem_col.plotly_chart(pipelineview.memory_figure(vw, devs, peaks, [capacity[n] for n in devs], mem_max,
                                                                big),
                                     key=f"pipe_memory_{run.schedule}", config=CONFIG)
                if not run.evaluation.feasible:
                    mem_col.warning("Exceeds a device's memory.", icon=":material/warning:")
            compare.append({"schedule": NAMES[run.schedule], "micro-batches": run.micro_batches,
                            "step time (ms)": run.step_time * 1e3, "bubble (%)": run.bubble_fraction * 100,
                            "closed-form bubble (%)": closed * 100,
                            "first-stage peak (GB)": peaks[0] / 1e9, "highest stage peak (GB)": max(peaks) / 1e9,
                            "fits in memory": run.evaluation.feasible})
            memory_rows += [{"schedule": run.schedule, "device": dev, "peak": pk} for dev, pk in zip(devs, peaks)]
        st.caption("Bars: **F k** = forward of micro-batch k in its colour, **B k** = its backward in a lighter "
                   "shade (under ZB-H1 only the input gradient), **W k** = ZB-H1's weight gradient, lightest and "
                   "hatched, **F k·c** = through chunk c (interleaved 1F1B), **U** = weight updates (grey); thin "
                   "bars on the link rows are transfers. Every chart has the same time axis.")
        st.dataframe(compare, hide_index=True, key="pipe_compare",
                     column_config={k: st.column_config.NumberColumn(format="%.4g") for k in (
                         "step time (ms)", "bubble (%)", "closed-form bubble (%)", "first-stage peak (GB)",
                         "highest stage peak (GB)")})
        st.plotly_chart(pipeline_bars.memory_by_schedule_figure(memory_rows, SHORT, capacity, big=big),
                        key="pipe_memory_all", config=CONFIG)

if views and parts:
    with ui.guarded("the bubble's parts"):
        st.markdown("##### Where the bubble comes from")
        named = [(SHORT[vw["run"].schedule], pt) for vw, pt in zip(views, parts)]
        st.plotly_chart(pipeline_bars.breakdown_figure(named, big=big), key="pipe_breakdown",
                        config=CONFIG)
        st.dataframe([{"schedule": name, "idle, all stages (ms)": pt["idle_s"] * 1e3,
                       "schedule (ms)": pt["schedule_s"] * 1e3, "imbalance (ms)": pt["imbalance_s"] * 1e3,
                       "weight updates (ms)": pt["updates_s"] * 1e3, "transfers (ms)": pt["transfers_s"] * 1e3,
                       "transfers (%)": pt["transfers_share"] * 100, "imbalance (%)": pt["imbalance_share"] * 100}
                      for name, pt in named], hide_index=True, key="pipe_breakdown_table",
                     column_config={k: st.column_config.NumberColumn(format="%.4g") for k in (
                         "idle, all stages (ms)", "schedule (ms)", "imbalance (ms)", "weight updates (ms)",
                         "transfers (ms)", "transfers (%)", "imbalance (%)")})
        st.caption("The stages' idle time in one step, summed over them, split by simulating the same placement "
                   "again: with free transfers (what is left over is the **transfers**' part), then also free weight "
                   "updates (the **updates**' part). What the ideal run still idles beyond the closed form for equal "
                   "stages of the stages' mean times is the **imbalance** between stages.")

if views:
    with ui.guarded("the measured pipelines"):
        measured = pipelineview.measured_pipelines(g)
        st.markdown("##### Measured: pipelined runs of this network")
        if not measured:
            st.caption("No pipelined benchmark of this network is stored yet. Run one with torch.distributed."
                       "pipelining on CPU ranks, e.g. `placement benchmark --model ... --devices cpu:4 --placement "
                       "stages:4 --schedule 1f1b --micro-batches 8 --simulate local --timings local` (after "
                       "`placement calibrate`); see docs/pipeline.md.")
        else:
            st.plotly_chart(pipeline_bars.measured_figure(measured, SHORT, big=big), key="pipe_measured",
                            config=CONFIG)
            st.dataframe([{"benchmark": r["id"], "schedule": SHORT.get(r["schedule"], r["schedule"]),
                           "stages": r["stages"], "V": r["virtual_stages"], "micro-batches": r["micro_batches"],
                           "batch": r["batch_size"], "measured step (ms)": (r["measured_step_s"] or 0) * 1e3,
                           "measured bubble (%)": r["measured_bubble"] * 100,
                           "simulated step (ms)": None if r["simulated_step_s"] is None else r["simulated_step_s"] * 1e3,
                           "simulated bubble (%)": None if r["simulated_bubble"] is None else r["simulated_bubble"] * 100,
                           "simulated on": r["simulated_on"] or "–"} for r in measured],
                         hide_index=True, key="pipe_measured_table",
                         column_config={k: st.column_config.NumberColumn(format="%.4g") for k in (
                             "measured step (ms)", "measured bubble (%)", "simulated step (ms)",
                             "simulated bubble (%)")})
            st.caption("Measured bubble: per step, the mean over the ranks of the share of the step a rank waits "
                       "outside its stages' forward, backward and weight-gradient work. Simulated: the same "
                       "pipeline on the devices the run was given with --simulate (a calibrated preset).")

if m is not None and schedules:
    with ui.guarded("the micro-batch sweep"):
        st.markdown("##### Choosing m: step time and memory against the number of micro-batches")
        counts = pipelineview.sweep_counts(g.batch_size, m)
        rows = pipelineview.sweep_rows(state.graph_key(), state.devices_key(), g, d,
                                       {k: placement_of[k] for k in schedules}, counts, v, state.cost_key(),
                                       state.cost_kw(g, sim), sim.penalty, ideal)
        first = stages[0].device
        fig = pipelineview.sweep_figure(state.graph_key(), state.devices_key(), g, d,
                                        {k: placement_of[k] for k in schedules}, counts, v, state.cost_key(),
                                        state.cost_kw(g, sim), sim.penalty, ideal, m,
                                        d.devices[d.index[first]].memory_bytes)
        st.plotly_chart(fig, key="pipe_sweep", config=CONFIG)
        best = best_micro_batches(rows)
        notes = [f"{SHORT[k]}: m = {r['micro_batches']} ({fmt_seconds(r['step_time_s'])} per batch, first stage "
                 f"{fmt_bytes(r['first_stage_peak_bytes'])})" if r else f"{SHORT[k]}: no m fits in memory"
                 for k, r in best.items() if k != "thesis"]
        if notes:
            st.caption("Fastest m that fits in memory — " + "; ".join(notes) + f". Dotted line: the chosen m = {m}; "
                       f"the memory line is the first stage's ({first}).")
        if views:
            st.caption(pipelineview.peak_stage_note(views, d.names, m) + " GPipe keeps all m micro-batches' "
                       "activations until their backward passes, 1F1B at most about p per stage.")

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
