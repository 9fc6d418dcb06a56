"""Pipeline: GPipe, 1F1B and the thesis scheme side by side on the same stages; the micro-batch sweep."""

import streamlit as st

from dashboard import charts, pipelineview, state, ui
from placement_core.analysis import fmt_bytes, fmt_seconds
from placement_core.analysis.pipeline import (best_micro_batches, check_micro_batches, even_stages, is_contiguous,
                                              stages_of, textbook_bubble)

ui.header("Pipeline", "Pipeline parallelism, schedule by schedule: the network is cut into stages, one per device, "
          "and the batch into micro-batches that flow through them. GPipe runs every forward, then every "
          "backward; 1F1B alternates them to hold fewer activations. Gaps in a row are the bubble.")
s = state.ss()
g, d = state.graph(), state.devices()
sim = s.sim
NAMES = {"thesis": "Thesis scheme (whole batch)", "gpipe": "GPipe", "1f1b": "1F1B (PipeDream-flush)"}

placement = None  # the stages, once they are made
with ui.guarded("the pipeline settings"):
    used = len(set(state.current_placement().tolist()))
    c1, c2, c3, c4 = st.columns([3, 2, 3, 2])
    sources = {"even": "Even split into p stages", "current": f"From the current placement ({ui.esc(s.placement_label)})"}
    source = c1.radio(
        "Stages", list(sources), index=0 if used < 2 else 1, horizontal=True, key=ui.persist("pipe_source"),
        format_func=sources.get,
        help="Even split: the network cut into p consecutive stages of equal compute, one per GPU. "
             "Current placement: each device it uses is a stage, in the order of its first op.")
    n_gpus = sum(1 for dv in d.devices if dv.kind == "gpu") or len(d)
    top = max(1, min(len(d), len(g)))
    if source == "even":
        p_in = c1.number_input("Stages p", 1, top, min(n_gpus, 4, top),
                               key=ui.persist("pipe_stages", bounds=(1, top)),
                               help="Stages on the p fastest GPUs (all devices when there are fewer GPUs).")
    m_default = int(sim["micro_batches"]) if g.batch_size % int(sim["micro_batches"]) == 0 else 1
    m_in = c2.number_input(
        "Micro-batches m", 1, 4096, m_default, key=ui.persist("pipe_micro_batches"),
        help=f"The batch of {g.batch_size} is split into m equal micro-batches (m must divide it). More "
             "micro-batches shrink the bubble (p − 1)/(m + p − 1) but make each op smaller and less efficient.")
    schedules = c3.multiselect(
        "Schedules", list(NAMES), default=["gpipe", "1f1b"], format_func=state.SCHEDULE_NAMES.get,
        key=ui.persist("pipe_schedules"),
        help="GPipe: all forwards, then all backwards, one weight update. 1F1B: after a warm-up of p − s "
             "forwards, stage s alternates one forward and one backward. Thesis scheme: the whole batch at once "
             "(no micro-batches): plain model parallelism, for reference.")
    ideal = c4.toggle(
        "Ideal pipeline", key=ui.persist("pipe_ideal"),
        help="Free communication and weight updates: transfers and updates take no time, so only the schedule "
             "is left. With p equal stages the step is exactly (m + p − 1)(t_f + t_b) and the bubble "
             "(p − 1)/(m + p − 1).")

    placement = (even_stages(g, d, int(p_in), **state.cost_kw(g, sim)) if source == "even"
                 else state.current_placement())
    stages = stages_of(placement, g, d)
    p = len(stages)
    c1, c2 = st.columns([4, 1])
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
                   "network, so micro-batches go back and forth between stages.")

m = None  # the micro-batch count, once it is valid
with ui.guarded("the schedules"):
    m = check_micro_batches(g.batch_size, int(m_in)) if placement is not None else None
    if m is None:
        pass  # the stages could not be made: the message above says what to fix
    elif not schedules:
        st.info("Choose at least one schedule.", icon=":material/info:")
    else:
        views = pipelineview.schedule_runs(state.graph_key(), state.devices_key(), g, d, placement, schedules, m,
                                           state.cost_key(), state.cost_kw(g, sim), sim["penalty"], ideal)
        x_max = max(v["run"].step_time for v in views)
        capacity = {n: dv.memory_bytes for n, dv in zip(d.names, d.devices)}
        # one memory scale for every schedule, wide enough to show the capacities unless they are far above
        peak_max = max(max(v["run"].stage_peak_memory()) for v in views)
        cap_max = max(d.devices[i].memory_bytes for v in views for i in v["run"].stage_devices)
        mem_max = max(peak_max * 1.3, cap_max * 1.08) if cap_max <= 5 * peak_max else peak_max * 1.3
        st.markdown(f"##### {p} stage(s), {m} micro-batches of {g.batch_size // m}"
                    + (" · ideal pipeline (free transfers and weight updates)" if ideal else ""))
        for v in views:
            run = v["run"]
            devs = [d.names[i] for i in run.stage_devices]
            with st.container(border=True):
                left, right = st.columns([4, 1.25])
                unit = "batch" if run.schedule == "thesis" else "micro-batch"
                title = (f"{NAMES[run.schedule]} · step {fmt_seconds(run.step_time)} · "
                         f"bubble {run.bubble_fraction:.1%}")
                fig = charts.schedule_gantt_figure(v["blocks"], v["rows"], len(devs), x_max, title, unit)
                left.plotly_chart(fig, key=f"pipe_gantt_{run.schedule}", config={"displaylogo": False})
                right.metric("Step time", fmt_seconds(run.step_time),
                             help="One batch (all its micro-batches), from the first forward to the last weight "
                                  "update.")
                right.metric("Bubble", f"{run.bubble_fraction:.1%}",
                             help="Share of the step a stage device is idle, averaged over the stages. "
                                  f"Textbook value for {p} equal stages and {run.micro_batches} micro-batch(es): "
                                  f"{textbook_bubble(p, run.micro_batches):.1%}.")
                peaks = run.stage_peak_memory()
                right.plotly_chart(charts.stage_memory_figure(devs, peaks, [capacity[n] for n in devs], mem_max),
                                   key=f"pipe_memory_{run.schedule}", config={"displaylogo": False})
                if not run.evaluation.feasible:
                    right.warning("Exceeds a device's memory.", icon=":material/warning:")
        st.caption("Bars: **F k** = forward of micro-batch k in its colour, **B k** = its backward in a lighter "
                   "shade, **U** = weight updates (grey); thin bars on the link rows are transfers. Every chart has "
                   "the same time axis. Hover a bar for its times.")
        st.dataframe([{"schedule": NAMES[v["run"].schedule], "micro-batches": v["run"].micro_batches,
                       "step time (ms)": v["run"].step_time * 1e3, "bubble (%)": v["run"].bubble_fraction * 100,
                       "textbook bubble (%)": textbook_bubble(p, v["run"].micro_batches) * 100,
                       "first-stage peak (GB)": v["run"].stage_peak_memory()[0] / 1e9,
                       "highest stage peak (GB)": max(v["run"].stage_peak_memory()) / 1e9,
                       "fits in memory": v["run"].evaluation.feasible} for v in views],
                     hide_index=True, key="pipe_compare",
                     column_config={k: st.column_config.NumberColumn(format="%.4g") for k in (
                         "step time (ms)", "bubble (%)", "textbook bubble (%)", "first-stage peak (GB)",
                         "highest stage peak (GB)")})

if m is not None and schedules:
    with ui.guarded("the micro-batch sweep"):
        st.markdown("##### Choosing m: step time and memory against the number of micro-batches")
        counts = pipelineview.sweep_counts(g.batch_size, m)
        rows = pipelineview.sweep_rows(state.graph_key(), state.devices_key(), g, d, placement, schedules, counts,
                                       state.cost_key(), state.cost_kw(g, sim), sim["penalty"], ideal)
        first = stages[0].device
        fig = charts.sweep_figure(rows, m, d.devices[d.index[first]].memory_bytes, NAMES)
        st.plotly_chart(fig, key="pipe_sweep", config={"displaylogo": False})
        best = best_micro_batches(rows)
        notes = [f"{NAMES[k]}: m = {r['micro_batches']} ({fmt_seconds(r['step_time_s'])} per batch, first stage "
                 f"{fmt_bytes(r['first_stage_peak_bytes'])})" if r else f"{NAMES[k]}: no m fits in memory"
                 for k, r in best.items() if k != "thesis"]
        if notes:
            st.caption("Fastest m that fits in memory — " + "; ".join(notes) + f". Dotted line: the chosen m = {m}; "
                       f"the memory line is the first stage's ({first}).")
        st.caption(pipelineview.peak_stage_note(views, d.names, m) + " GPipe keeps all m micro-batches' "
                   "activations until their backward passes, 1F1B at most about p per stage.")

with ui.guarded("the toy pipeline"), st.expander("Teach it: p equal stages, no network", expanded=False,
                                                 key="toy_section"):
    from placement_core.analysis.pipeline import schedule_blocks, schedule_rows
    from placement_core.analysis.toy_pipeline import (Toy, bubble_breakdown, closed_form_bubble, closed_form_step,
                                                      run_toy, toy_network)

    st.caption("A pipeline with nothing but the schedule in it: p stages that each take t_f forward and t_b "
               "backward per micro-batch, simulated by the same simulator as your placements. With free "
               "transfers the step is exactly (m + p − 1)(t_f + t_b) + t_u.")
    c = st.columns(6)
    toy_p = c[0].number_input("stages p", 1, 16, 4, key=ui.persist("toy_p", bounds=(1, 16)))
    toy_m = c[1].number_input("micro-batches m", 1, 64, 8, key=ui.persist("toy_m", bounds=(1, 64)))
    t_f = c[2].number_input("t_f (ms)", 0.0, 1e4, 1.0, key=ui.persist("toy_tf", bounds=(0.0, 1e4)))
    t_b = c[3].number_input("t_b (ms)", 0.0, 1e4, 2.0, key=ui.persist("toy_tb", bounds=(0.0, 1e4)))
    t_u = c[4].number_input("update t_u (ms)", 0.0, 1e4, 0.0, key=ui.persist("toy_tu", bounds=(0.0, 1e4)))
    hop = c[5].number_input("transfer per hop (ms)", 0.0, 1e4, 0.0, key=ui.persist("toy_hop", bounds=(0.0, 1e4)))
    toy_schedule = st.radio("Schedule", ["gpipe", "1f1b"], horizontal=True, format_func=NAMES.get,
                            key=ui.persist("toy_schedule", ["gpipe", "1f1b"]))
    toy = Toy(int(toy_p), int(toy_m), t_f / 1e3, t_b / 1e3, t_u / 1e3, hop / 1e3)
    run = run_toy(toy, toy_schedule)
    _, toy_devices, _ = toy_network(toy)
    rows = schedule_rows(run, toy_devices)
    fig = charts.schedule_gantt_figure(schedule_blocks(run.evaluation.result.trace, rows), rows, toy.p,
                                       run.step_time, f"{NAMES[toy_schedule]} · {toy.p} equal stages · "
                                       f"{toy.m} micro-batches", "micro-batch")
    st.plotly_chart(fig, key="toy_gantt", config={"displaylogo": False})
    closed = closed_form_step(toy.p, toy.m, toy.t_f, toy.t_b, toy.t_u)
    parts = bubble_breakdown(toy, run)
    m1, m2, m3 = st.columns(3)
    m1.metric("Step (simulated)", fmt_seconds(run.step_time),
              delta=None if hop == 0 else f"{(run.step_time - closed) * 1e3:+.4g} ms against the closed form",
              delta_color="inverse")
    m2.metric("Closed form (m + p − 1)(t_f + t_b) + t_u", fmt_seconds(closed))
    m3.metric("Bubble (p − 1)/(m + p − 1)", f"{closed_form_bubble(toy.p, toy.m):.1%}")
    if parts["idle_s"] > 0:
        st.caption(f"Idle time over all stages: {fmt_seconds(parts['idle_s'])}, of which the textbook bubble of "
                   f"equal stages is {fmt_seconds(parts['textbook_s'])} and transfers add "
                   f"{fmt_seconds(parts['transfers_s'])} ({parts['transfer_share']:.0%}).")
