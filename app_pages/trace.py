"""Trace: the simulated step of the current placement as a Gantt chart, memory over time, bottlenecks."""

import json

import streamlit as st

from dashboard import state, traceview, ui
from dashboard.settings import SimChoices
from dashboard.charts import gantt, memory, trace_overlay
from dashboard.traceview import placement_picker, trace_view
from placement_core import placement_to_dict
from placement_core.analysis import fmt_bytes, fmt_seconds
from placement_core.analysis.trace_follow import matching_ops, op_events, op_flows, window_stats
from placement_core.simulate.chrome import chrome_trace
from placement_core.simulate.tracesize import estimate_trace_events

ui.header("Trace", "What the simulator did with the current placement: every op on its device and every "
          "tensor on its link, over time. Forward passes are drawn in a batch's colour, backward passes lighter; "
          "thin grey bars on a device row are its time on messages it sends or receives (the devices' message "
          "overhead, if set); gaps are idle time (pipeline bubbles).")
s = state.session()

with ui.guarded("the settings"):
    sim = ui.local_sim("trace")
    what_if = s.get("trace_what_if") is not None
    with st.expander(f"Placement: **{ui.esc(s.placement_label)}** · {sim.summary()}"
                     + (" (what-if on this page)" if what_if else "") + " — change", key="trace_settings"):
        st.caption("These settings apply to this page only (a what-if): the other pages and new optimization runs "
                   "keep the shared settings until you apply them everywhere.")
        ui.sim_controls("trace", local=True)
        sim = ui.local_sim("trace")
        st.caption("Pipelining: several batches in flight let devices work on different batches at once. "
                   "Try 10 batches with 4 in flight on a placement that uses several GPUs, or the GPipe and "
                   "1F1B schedules (the Pipeline page compares them).")
        placement_picker()
    if s.get("trace_what_if") is not None:
        c1, c2, c3 = st.columns([4, 1.2, 1.2])
        c1.info(f"What-if on this page: {sim.summary()}, {sim.penalty} penalty. The other pages and new "
                f"optimization runs use {s.sim.summary()}, {s.sim.penalty} penalty.",
                icon=":material/science:")

        def _apply():
            state.set_sim(s.trace_what_if)

        def _drop():
            s.trace_what_if = None
            for name in SimChoices.names():
                s.pop(f"trace_{name}", None)

        c2.button("Apply to every page", key="trace_apply", on_click=_apply, icon=":material/done_all:",
                  help="Make these the shared settings: the sidebar, Optimize, Archive, Pipeline and Benchmark "
                       "use them, and so do new optimization runs.")
        c3.button("Back to the shared settings", key="trace_drop", on_click=_drop, icon=":material/undo:")

DRAWABLE_EVENTS = 200_000  # a Gantt chart beyond this takes the browser minutes to draw (and GBs to hold)

with ui.guarded("the trace"):
    problem = state.problem_for(sim)
    quick = state.simulate(problem, state.current_placement())  # the fast kernel: how big the trace would be
    events = estimate_trace_events(problem, quick.result)
    if events > DRAWABLE_EVENTS:
        per_batch = max(events // max(sim.batches, 1), 1)
        st.warning(f"This step would be a trace of about {events:,} events, too many to draw here (at most "
                   f"{DRAWABLE_EVENTS:,}): it takes {fmt_seconds(quick.result.batch_time)} per batch "
                   f"({fmt_seconds(quick.result.makespan)} for {sim.batches} batches). Lower the batches to "
                   f"at most {max(DRAWABLE_EVENTS // per_batch, 1):,} to see it, or write the trace to a file "
                   "with `placement simulate --trace`.", icon=":material/warning:")
        st.stop()
    view = trace_view(problem, state.current_placement(), sim)
    ev, res = view["evaluation"], view["evaluation"].result
    m = st.columns(5)
    pipelined = sim.pipelined
    m[0].metric("Time per batch", fmt_seconds(res.batch_time), help=f"makespan {fmt_seconds(res.makespan)} "
                f"over {res.batches} batch(es)" + (f" of {sim.micro_batches} micro-batches" if pipelined else ""))
    m[1].metric("Objective", fmt_seconds(ev.objective), help="time per batch + memory penalty")
    m[2].metric("Transfers", f"{res.transfers:,}", help=f"{fmt_bytes(float(res.channel_bytes.sum()))} moved")
    m[3].metric("Fits in memory", "yes" if ev.feasible else "no",
                help=None if ev.feasible else f"{fmt_bytes(float(ev.overflow.sum()))} over capacity")
    m[4].metric("Events", f"{len(res.trace):,}", help="ops and transfers in the trace, and the send and receive "
                "tasks of devices with a message overhead")

    trace = res.trace
    traceview.apply_chart_choice(trace, res.makespan)  # a bar clicked or a range dragged on the chart last run
    op_names = [o.name for o in problem.graph.ops]  # in topological order
    c1, c2, c3 = st.columns([2, 3, 2])
    find = c1.text_input("Find ops by name", key=ui.persist(traceview.FIND), placeholder="part of a name, e.g. mixed_6",
                         help="Outlines every op whose name contains this (in orange) and offers them to follow.")
    found = matching_ops(op_names, find)
    found_set = set(found)
    offered = found if find.strip() else op_names
    if s.get(traceview.FOLLOW) in op_names and s.get(traceview.FOLLOW) not in offered:
        offered = [s[traceview.FOLLOW]] + offered  # clicked on the chart: followed even if the search misses it
    follow = c2.selectbox("Follow an op (or click its bar)", offered, index=None,
                          key=ui.persist(traceview.FOLLOW, offered), placeholder="choose or type an op's name",
                          help="Outlines its events in red and draws its tensors that cross devices as arrows: "
                               "producer's forward → transfer on the link → consumer's forward.")
    critical = c3.toggle("Highlight the critical path", key=ui.persist("trace_critical"),
                         help="The chain of ops and transfers that fixes the makespan: speeding up anything "
                              "off this path cannot shorten the step.")
    unit = "micro-batch" if pipelined else "batch"
    units = 1 + max((e.batch for e in trace), default=0)
    path = view["critical"] if critical else None
    if critical and units > 1:  # the whole step's path through every batch covers the chart: one batch's
        shown = st.selectbox(f"Critical path of {unit}", list(range(units)), index=units - 1,
                             key=ui.persist("trace_critical_batch", list(range(units))),
                             format_func=lambda b: f"{unit} {b + 1}" + (" (ends the step)" if b == units - 1 else ""),
                             help=f"The chain of work that fixes when this {unit} is done, drawn where it runs on "
                                  f"this {unit}'s own ops and transfers (where it waits for another {unit}'s work, "
                                  "the caption below says which).")
        path, chain = traceview.batch_critical(view, problem.graph, shown)
    flows = op_flows(trace, problem.graph, follow) if follow else []
    window = traceview.window_ms(res.makespan)
    whole = window == (0.0, round(res.makespan * 1e3, 6))
    extra = trace_overlay.gantt_extra(
        trace, view["rows"], res.makespan, follow=op_events(trace, follow) if follow else [], flows=flows,
        found=[i for i, e in enumerate(trace) if e.kind == "op" and e.op in found_set],
        picked=traceview.picked_critical(res, path) if critical else None,
        window=None if whole else (window[0] / 1e3, window[1] / 1e3))
    fig = gantt.gantt_figure(view["segments"], view["rows"], len(problem.devices), res.makespan,
                              path, trace, unit=unit, extra=extra)
    st.plotly_chart(fig, key=traceview.CHART, on_select="rerun", selection_mode=("points", "box"),
                    config=traceview.CHART_CONFIG)
    traceview.chart_keys()
    st.caption(("Click a bar to follow its op. " if extra["bars"] is True else
                f"A step of {len(trace):,} events: the bars inside the time window are clickable (click one to "
                "follow its op). " if extra["bars"] else
                f"A step of over {trace_overlay.CLICKABLE_EVENTS:,} events: to click bars, choose a time window "
                f"of at most {trace_overlay.CLICKABLE_EVENTS:,} events (*Box Select* and drag, or the slider "
                "below), or choose the op to follow above. ")
               + "To sum a time window, pick *Box Select* in the chart's toolbar and drag across the chart (or use "
               "the slider below). " + traceview.KEYS_HINT + " "
               + ("Names appear inside the bars wide enough to hold them (zoom in for more)." if extra["names"] else
                  "Names are written inside the bars wide enough to hold them."))
    if find.strip():
        st.caption(f"{len(found)} op(s) match “{ui.esc(find.strip())}”"
                   + (": " + ", ".join(ui.esc(n) for n in found[:12]) + (" …" if len(found) > 12 else "")
                      if found else "."))
    if follow:
        if flows:
            st.caption(f"**{ui.esc(follow)}**: {len(flows)} tensor(s) cross devices (red arrows: producer → "
                       "transfer → consumer).")
            st.dataframe(traceview.flow_rows(trace, flows), hide_index=True, key="trace_flows",
                         column_config={k: st.column_config.NumberColumn(format="%.4g")
                                        for k in ("size (MB)", "produced (ms)", "arrived (ms)", "consumed (ms)")})
        else:
            st.caption(f"**{ui.esc(follow)}**: none of its tensors crosses devices (its producers and consumers "
                       "run where it runs).")
    if critical:
        others = sorted({trace[i].batch for i in chain} - {shown}) if units > 1 else []
        on_links = sum(1 for i in path if res.trace[i].kind == "transfer")
        link_time = sum(res.trace[i].end - res.trace[i].start for i in path if res.trace[i].kind == "transfer")
        overhead = [i for i in path if res.trace[i].kind in ("send", "recv")]
        extra_text = (f"; {len(overhead)} send/receive tasks (message overhead) take "
                      f"{fmt_seconds(sum(res.trace[i].end - res.trace[i].start for i in overhead))}" if overhead else "")
        head = (f"Critical path of {unit} {shown + 1}: {len(path)} events" if units > 1 else
                f"Critical path: {len(path)} events")
        waits = (f" Before them the chain waits on the work of {unit}(s) "
                 + ", ".join(str(b + 1) for b in others) + f" ({len(chain) - len(path)} events, not drawn)."
                 if others else "")
        st.caption(f"{head}, {on_links} of them transfers taking {fmt_seconds(link_time)} of the "
                   f"{fmt_seconds(res.makespan)} makespan{extra_text}.{waits} Select a row to mark its event on "
                   "the chart.")
        st.dataframe(traceview.critical_rows(res, path), hide_index=True, key=traceview.TABLE,
                     on_select="rerun", selection_mode="single-row",
                     column_config={k: st.column_config.NumberColumn(format="%.4g")
                                    for k in ("start (ms)", "duration (ms)", "share of the makespan (%)")})

with ui.guarded("the time window"):
    top = round(res.makespan * 1e3, 6)
    st.slider("Time window (ms)", 0.0, top, (0.0, top), key=ui.persist(traceview.WINDOW), step=max(top / 2000, 1e-6),
              format="%.3f", help="Or choose Box Select in the Gantt chart's toolbar and drag across the chart. The "
                                   "table below sums what happened inside the window.")
    win = window_stats(trace, s[traceview.WINDOW][0] / 1e3, s[traceview.WINDOW][1] / 1e3, problem.devices.names,
                       [c.name for c in problem.devices.channels])
    st.caption(f"From {win['start_s'] * 1e3:.4g} to {win['end_s'] * 1e3:.4g} ms ({fmt_seconds(win['span_s'])}): busy "
               "time per device and bytes per channel inside the window (a transfer that straddles its edge "
               "counts with the share of its duration inside).")
    st.dataframe([{"device or channel": r["device"], "busy (ms)": r["busy_s"] * 1e3,
                   "busy (% of the window)": r["share"] * 100, "moved (MB)": None} for r in win["devices"]]
                 + [{"device or channel": f"{r['channel']} (link)", "busy (ms)": r["busy_s"] * 1e3,
                     "busy (% of the window)": r["share"] * 100, "moved (MB)": r["bytes"] / 1e6}
                    for r in win["channels"]], hide_index=True, key="trace_window_table", placeholder="",
                 column_config={k: st.column_config.NumberColumn(format="%.4g")
                                for k in ("busy (ms)", "busy (% of the window)", "moved (MB)")})

with ui.guarded("the memory"):
    mem_fig, off = memory.memory_figure(view["memory"], problem.devices.names,
                                        [d.memory_bytes for d in problem.devices.devices])
    st.plotly_chart(mem_fig, key="trace_memory", config={"displaylogo": False})
    if off:
        st.caption("Capacity far above the chart (not drawn): " + ", ".join(
            f"{n} {fmt_bytes(problem.devices.devices[problem.devices.index[n]].memory_bytes)}" for n in off))

with ui.guarded("the bottlenecks"):
    st.markdown("##### Bottlenecks")
    t1, t2, t3, t4 = st.tabs(["Channels", "Largest transfers", "Devices", "What if"])
    with t1:
        rows = view["channels"]
        c1, c2 = st.columns([2, 3])
        c1.plotly_chart(memory.utilisation_figure(rows, "channel", "Channel utilisation"), key="trace_chan_util",
                        config={"displaylogo": False})
        c2.dataframe([{"channel": r["channel"], "transfers": r.get("transfers", 0), "moved (MB)": r["bytes"] / 1e6,
                       "busy (ms)": r["busy_s"] * 1e3, "utilisation (%)": r["utilisation"] * 100,
                       "effective GB/s": r["throughput"] / 1e9} for r in rows],
                     hide_index=True, key="trace_chan_table",
                     column_config={k: st.column_config.NumberColumn(format="%.4g")
                                    for k in ("moved (MB)", "busy (ms)", "utilisation (%)", "effective GB/s")})
    with t2:
        st.dataframe([{"tensor": r["tensor"], "what": r["kind"], "batch": r["batch"] + 1,
                       "route": f"{r['src']} → {r['dst']}", "channel": r["channel"], "size (MB)": r["bytes"] / 1e6,
                       "start (ms)": r["start_s"] * 1e3, "duration (ms)": r["duration_s"] * 1e3}
                      for r in view["largest"]], hide_index=True, key="trace_largest",
                     column_config={k: st.column_config.NumberColumn(format="%.4g")
                                    for k in ("size (MB)", "start (ms)", "duration (ms)")})
        if not view["largest"]:
            st.caption("No transfers: every op runs on one device.")
    with t3:
        rows = view["devices"]
        c1, c2 = st.columns([2, 3])
        c1.plotly_chart(memory.utilisation_figure(rows, "device", "Device utilisation"), key="trace_dev_util",
                        config={"displaylogo": False})
        c2.dataframe([{"device": r["device"], "busy (ms)": r["busy_s"] * 1e3, "idle (ms)": r["idle_s"] * 1e3,
                       "longest idle stretch (ms)": r["longest_idle_s"] * 1e3,
                       "peak memory (GB)": r["peak_memory"] / 1e9, "capacity (GB)": r["capacity"] / 1e9}
                      for r in rows], hide_index=True, key="trace_dev_table",
                     column_config={k: st.column_config.NumberColumn(format="%.4g")
                                    for k in ("busy (ms)", "idle (ms)", "longest idle stretch (ms)",
                                              "peak memory (GB)", "capacity (GB)")})

with ui.guarded("the what-if"), t4:
    from placement_core.analysis.sensitivity import what_if

    placement_now = state.current_placement()
    sens = traceview.sensitivity(problem, placement_now, sim)
    st.plotly_chart(traceview.sensitivity_figure(sens), key="trace_sensitivity", config={"displaylogo": False})
    st.caption("Each link's bandwidth nudged by 1 % (the derivative, in the hover) and doubled (the bars), all "
               "else unchanged: a link that saves nothing is not the bottleneck, however busy it looks.")
    busiest = [r["channel"] for r in sorted(sens, key=lambda r: -r["bytes"])][:12]
    c1, c2 = st.columns(2)
    c1.markdown("**Bandwidth ×** (the busiest links)")
    bandwidth = {name: c1.number_input(ui.esc(name), 0.01, 100.0, 1.0, step=0.5, format="%.2f",
                                       key=ui.persist(f"trace_bw_{i}", bounds=(0.01, 100.0)))
                 for i, name in enumerate(busiest)}
    c2.markdown("**Speed ×** (devices)")
    speed = {name: c2.number_input(ui.esc(name), 0.01, 100.0, 1.0, step=0.5, format="%.2f",
                                   key=ui.persist(f"trace_speed_{i}", bounds=(0.01, 100.0)))
             for i, name in enumerate(problem.devices.names[:12])}
    r = what_if(problem, placement_now, bandwidth=bandwidth, speed=speed)
    m1, m2 = st.columns(2)
    m1.metric("Makespan now", fmt_seconds(r["makespan_s"]))
    m2.metric("Makespan under the what-if", fmt_seconds(r["what_if_makespan_s"]),
              delta=f"{r['delta_s'] * 1e3:+.4g} ms", delta_color="inverse")

with ui.guarded("the download"):
    # Streamlit calls a deferred download's function in another thread, without the session: everything it
    # needs is read here, in the script run.
    devices_names = list(problem.devices.names)
    channel_names = [c.name for c in problem.devices.channels]
    title = f"{s.network_label} on {s.devices_label}: {s.placement_label}"
    graph_for_flows = problem.graph  # read in the script run, like the names: the download runs later
    placement_json = json.dumps(placement_to_dict(state.current_placement(), state.graph(), state.devices(),
                                                  state.problem().splits), indent=1)

    def _chrome(res=res) -> str:
        return json.dumps(chrome_trace(res, devices_names, channel_names, title=title, graph=graph_for_flows))

    c1, c2, _ = st.columns([1, 1, 1])
    c1.download_button("Download the trace (Chrome trace JSON)", _chrome, file_name="trace.json",
                       mime="application/json", icon=":material/download:", on_click="ignore", key="trace_dl_chrome",
                       help="Open it in Perfetto (ui.perfetto.dev) or chrome://tracing.")
    c2.download_button("Download the placement (JSON)", placement_json, file_name="placement.json",
                       mime="application/json", icon=":material/download:", on_click="ignore", key="trace_dl_placement",
                       help="placement/1: op name → device name. The CLI and this page (Try another placement) read "
                            "it back.")
