"""Cluster plan: the best ways to run the current network on a GPU cluster, and where each spends its time
and memory."""

import streamlit as st

from dashboard import clusterview, planarchive, state, ui
from dashboard.charts.gantt import gantt_figure
from placement_core.analysis.trace import gantt_rows, gantt_segments
from placement_core import InputError
from placement_core.families import gpt
from placement_core.optimize.plan_export import export

ui.header("Cluster plan", "Tensor-parallel groups inside a node, pipeline stages across groups, data "
          "parallelism over the rest, micro-batches under a pipeline schedule: every plan of the current network "
          "on a DGX cluster is simulated, the fastest that fits first; or MAP-Elites keeps an archive of the best "
          "plan per pipeline depth × tensor degree, browsed on the Archive page. Build a GPT on the Network page "
          "(A GPT by its shape) to plan a transformer with tensor parallelism and recomputation (docs/clusters.md).")
s = state.session()
g = state.graph()
gpt_config = gpt.parse(s.base_graph_key) if gpt.is_gpt(s.base_graph_key) else None

with ui.guarded("the plan form"):
    st.markdown(f"##### {ui.esc(s.network_label)}: {len(g):,} ops, {g.precision}")
    submitted = clusterview.form(gpt_config, extra=planarchive.form_row)
    if submitted is not None and submitted[1] is None:
        clusterview.run(submitted[0], gpt_config)
    elif submitted is not None:
        planarchive.run(submitted[0], submitted[1], gpt_config)

with ui.guarded("the plan archive"):
    newest = next(iter(planarchive.runs()), None)
    if newest is not None and newest.graph_key == state.graph_key():
        planarchive.summary(newest)

result = s.get("cluster_result")
with ui.guarded("the plans' network"):
    if result is not None and result[0] != state.graph_key():
        st.info("These plans were made for another network; press Plan to plan the current one.",
                icon=":material/info:")
        result = None
if result is not None:
    _, choices, devices, plans = result
    gpus = plans[0].tp * plans[0].pp * plans[0].dp
    flops = None
    key = s.base_graph_key
    if gpt.is_gpt(key):
        flops = gpt.parse(key, choices.global_batch).matmul_flops()
    with ui.guarded("the plans"):
        fitting = sum(p.fits for p in plans)
        st.markdown(f"##### {len(plans)} plans on {ui.esc(choices.devices_spec)} ({gpus} GPUs), "
                    f"{fitting} fit in memory")
        if not fitting:
            st.warning("No plan fits in memory: try more nodes, ZeRO, a smaller micro-batch or a smaller model.",
                       icon=":material/warning:")
        st.dataframe(clusterview.plans_table(plans, flops, gpus), hide_index=True, key="cluster_table",
                     column_config={"step (ms)": st.column_config.NumberColumn(format="%.3f"),
                                    "fullest GPU (GB)": st.column_config.NumberColumn(format="%.2f"),
                                    "idle": st.column_config.NumberColumn(format="percent"),
                                    "TFLOP/s per GPU": st.column_config.NumberColumn(format="%.0f")})
        index = st.selectbox("Plan", range(len(plans)), format_func=lambda k: f"#{k + 1}: {clusterview.label(plans[k])}",
                             key=ui.persist("cluster_pick", range(len(plans))))
    p = plans[index or 0]
    with ui.guarded("the plan's figures"):
        problem, parts, trace, folded = clusterview.details(state.graph_key(), choices, index or 0, g, devices, p,
                                                            gpt_config)
        c = st.columns(4)
        c[0].metric("Step", f"{p.step_time_s * 1e3:.4g} ms")
        c[1].metric("Fullest GPU", f"{p.peak_memory_bytes / 1e9:.1f} GB",
                    help=f"of {clusterview.capacity(devices) / 1e9:.0f} GB")
        c[2].metric("NVLink traffic", f"{p.breakdown['nvlink_bytes'] / 1e9:.1f} GB")
        c[3].metric("InfiniBand traffic", f"{p.breakdown['infiniband_bytes'] / 1e9:.1f} GB")
        with ui.guarded("the plan's export"):
            config = gpt.parse(key) if gpt.is_gpt(key) else None
            nodes = choices.nodes
            stages = export("stages", p.graph or g, config, p, nodes, 8, choices.global_batch, choices.optimizer)
            c = st.columns([3, 1])
            if config is not None:
                try:
                    command = export("megatron", p.graph or g, config, p, nodes, 8, choices.global_batch,
                                     choices.optimizer)
                except InputError as e:
                    c[0].caption(f"Megatron-LM: {ui.esc(str(e))}")
                else:
                    c[0].code(command, language="bash", wrap_lines=True)
            c[1].download_button("Stage split (JSON)", stages, file_name="stages.json", mime="application/json",
                                 key="cluster_stages", icon=":material/download:",
                                 help="Each pipeline chunk's first and last op and the layers it holds.")
        if folded and p.dp > 1:
            st.info(f"One data-parallel replica is shown: its {problem.n_devices} simulated GPU(s), the first of "
                    f"each tensor-parallel group in each pipeline stage. The other {p.dp - 1:,} replicas run the "
                    "same step and are folded into it; each op's gradient all-reduce over the replicas "
                    "(NVLink inside a node, InfiniBand across) is kept in its weight update.",
                    icon=":material/layers:")
        st.markdown("##### Where the step's time goes")
        st.plotly_chart(clusterview.time_figure(p), key="cluster_time", config={"displaylogo": False})
        st.markdown("##### Memory per GPU")
        st.plotly_chart(clusterview.memory_figure(parts, problem.devices.names, clusterview.capacity(devices)),
                        key="cluster_memory", config={"displaylogo": False})
        st.caption("Weights, gradients and the optimizer's state (Adam's moments and, for bf16 weights, an fp32 "
                   "copy; ZeRO partitions them over each data-parallel group) and, on top, what the simulated "
                   "peak holds besides: activations kept for the backward, messages.")
        if trace is not None:
            st.markdown("##### The step, GPU by GPU")
            rows = gantt_rows(problem.devices.names, [ch.name for ch in problem.devices.channels])
            fig = gantt_figure(gantt_segments(trace.trace, rows), rows, problem.n_devices, trace.makespan,
                               unit="micro-batch")
            st.plotly_chart(fig, key="cluster_gantt", config={"displaylogo": False, "scrollZoom": True})
        else:
            st.caption(clusterview.gantt_refused(problem, p))
