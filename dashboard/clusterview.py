"""The Cluster plan page's parts: the form, the search (cached per network and choices), the charts."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from placement_core.formats.clusters import KINDS, MAX_NODES, MAX_PLAN_NODES, Cluster, load_plan_cluster
from placement_core.optimize.plans import PlanRequest, gpus_of, memory_parts, plan, simulate_plan

from . import state, ui
from .charts.style import BASE_LAYOUT

PARTS = (("weights", "#4c78a8"), ("gradients", "#f58518"), ("optimizer", "#e45756"), ("activations", "#72b7b2"))
GANTT_MAX_GPUS = 32  # simulated GPUs; a larger plan's details fold its replicas into one (details)
# tasks (ops × micro-batches, forward and backward): tracing a step grows faster than its tasks (GPT-3 on 16
# stages: 32 micro-batches 100,000 events in 4.8 s, 64 in 12 s, 192 in 140 s; load 5), so larger are not drawn
GANTT_MAX_TASKS = 100_000


@dataclass(frozen=True)
class Choices:
    cluster: str
    nodes: int
    global_batch: int
    schedule: str
    optimizer: str
    zero: int
    pp: int  # 0: searched
    micro_batch: int  # 0: searched
    tp: int = 1  # 0: searched (a gpt: network's layers split over each tensor-parallel group)
    sequence_parallel: bool = False
    recompute: str = "none"

    @property
    def devices_spec(self) -> str:
        return f"{self.cluster}:nodes={self.nodes}"

    def request(self) -> PlanRequest:
        return PlanRequest(global_batch=self.global_batch, pp=self.pp or None, micro_batch=self.micro_batch or None,
                           schedule=self.schedule, optimizer=self.optimizer, zero=self.zero, tp=self.tp or None,
                           sequence_parallel=self.sequence_parallel, recompute=self.recompute)


def form(config=None, extra=None) -> tuple[Choices, object] | None:
    """The plan's choices once the user presses Plan or ``extra``'s button, with what ``extra(config)`` (more
    widgets in the same form, e.g. the plan archive's) returned: None unless its button was pressed.
    ``config``, the current network's ``gpt:`` configuration (or None), offers tensor and sequence parallelism
    and recomputation, which split a GPT's layers."""
    g = state.graph()
    with st.form("cluster_form", border=False):
        c = st.columns(4)
        cluster = c[0].selectbox("Cluster", list(KINDS), key=ui.persist("cluster_kind", list(KINDS)),
                                 format_func=lambda k: {"dgx-a100": "DGX A100 nodes", "dgx-h100": "DGX H100 nodes"}[k])
        nodes = c[1].number_input("Nodes (8 GPUs each)", 1, MAX_PLAN_NODES, 2,
                                  key=ui.persist("cluster_nodes", bounds=(1, MAX_PLAN_NODES)),
                                  help=f"Up to {MAX_NODES} nodes every data-parallel replica is simulated; above, "
                                       f"one replica is, the others folded into it with their gradients' "
                                       f"all-reduce kept (the same step either way).")
        batch = c[2].number_input("Global batch (sequences)", 1, 1 << 20, int(g.batch_size) * 8,
                                  key=ui.persist("cluster_batch", bounds=(1, 1 << 20)),
                                  help="Samples per training step, over every replica.")
        schedules = ["1f1b", "gpipe", "zb-h1"]
        schedule = c[3].selectbox("Pipeline schedule", schedules, key=ui.persist("cluster_schedule", schedules))
        c = st.columns(4)
        optimizer = c[0].selectbox("Optimizer", ["adam", "sgd"], key=ui.persist("cluster_optimizer", ["adam", "sgd"]),
                                   help="Adam keeps two moments (and an fp32 copy of bf16 weights) per parameter.")
        zeros = [0, 1, 2, 3] if config is not None else [0, 1, 2]
        zero = c[1].selectbox("ZeRO stage", zeros, key=ui.persist("cluster_zero", zeros),
                              help="1: the optimizer state partitioned over each data-parallel group; 2: the "
                                   "gradients too; 3 (a GPT): the weights too, gathered layer by layer.")
        pp = c[2].number_input("Pipeline stages (0 = search)", 0, 8 * MAX_PLAN_NODES, 0,
                               key=ui.persist("cluster_pp", bounds=(0, 8 * MAX_PLAN_NODES)))
        micro = c[3].number_input("Micro-batch (0 = search)", 0, 1 << 20, 0,
                                  key=ui.persist("cluster_micro", bounds=(0, 1 << 20)),
                                  help="Sequences per micro-batch and replica.")
        tp, sp, recompute = 1, False, "none"
        if config is not None:
            c = st.columns(4)
            tp = c[0].selectbox("Tensor parallel", [0, 1, 2, 4, 8], key=ui.persist("cluster_tp", [0, 1, 2, 4, 8]),
                                format_func=lambda t: "search" if t == 0 else str(t),
                                help="GPUs of a node that split each layer (Megatron's column- and row-parallel "
                                     "linear layers, the heads over the group); their all-reduces are in the step.")
            recomputes = ["none", "selective", "full"]
            recompute = c[1].selectbox("Recomputation", recomputes, key=ui.persist("cluster_recompute", recomputes),
                                       help="Selective: attention's scores again in the backward; full: each "
                                            "layer's forward again (less memory, more compute).")
            sp = c[2].checkbox("Sequence parallel", key=ui.persist("cluster_sp"),
                               help="All-gathers and reduce-scatters instead of all-reduces; norms split over the "
                                    "sequence (needs tensor parallelism above 1).")
        go_ = st.form_submit_button("Plan", type="primary", icon=":material/search:")
        more = extra(config) if extra is not None else None
    if not go_ and more is None:
        return None
    return Choices(cluster, int(nodes), int(batch), schedule, optimizer, int(zero), int(pp), int(micro),
                   int(tp), bool(sp), recompute), more


def plan_devices(choices: Choices):
    """The cluster's device graph up to ``MAX_NODES`` nodes (every replica simulated), above it the
    :class:`Cluster` whose replicas `placement plan` folds into one."""
    if choices.nodes <= MAX_NODES:
        return state.builtin_device_graph(choices.devices_spec)
    return load_plan_cluster(choices.devices_spec)


@st.cache_resource(max_entries=8, show_spinner=False)
def _plans(graph_key: str, choices: Choices, _graph, _config):
    devices = plan_devices(choices)
    return devices, plan(_graph, devices, choices.request(), _config)


def run(choices: Choices, config=None) -> None:
    s = state.session()
    with st.spinner(f"Simulating every plan on {choices.devices_spec}…"):
        devices, plans = _plans(state.graph_key(), choices, state.graph(), config)
    s.cluster_result = (state.graph_key(), choices, devices, plans)


@st.cache_resource(max_entries=16, show_spinner=False)
def details(graph_key: str, choices: Choices, index: int, _graph, _devices, _plan, _config=None):
    """(problem, memory parts, trace or None, folded): the plan simulated again for its charts. A plan of more
    than ``GANTT_MAX_GPUS`` simulated GPUs is shown as one replica (its dp replicas folded into it), which
    runs the same step: one data-parallel model either way (docs/clusters.md)."""
    from dataclasses import replace

    devices = _devices
    if not isinstance(devices, Cluster) and len(gpus_of(devices)) // _plan.tp > GANTT_MAX_GPUS:
        devices = Cluster(choices.cluster, choices.nodes)
    p, problem = simulate_plan(_graph, devices, gpus_of(devices), _plan.pp, _plan.dp, _plan.micro_batch,
                               replace(choices.request(), tp=_plan.tp), _config)
    parts = memory_parts(problem, p.placement)
    trace = problem.simulate(p.placement, trace=True).result if gantt_refused(problem, p) is None else None
    return problem, parts, trace, isinstance(devices, Cluster)


def gantt_refused(problem, p) -> str | None:
    """Why the plan's step is not drawn GPU by GPU (too many simulated GPUs or tasks), None when it is."""
    if problem.n_devices > GANTT_MAX_GPUS:
        return (f"The step's chart is drawn for up to {GANTT_MAX_GPUS} simulated GPUs: this plan's replica has "
                f"{problem.n_devices} pipeline stages.")
    tasks = 2 * len(problem.graph) * p.micro_batches
    if tasks > GANTT_MAX_TASKS:
        return (f"The step's chart is drawn for up to {GANTT_MAX_TASKS:,} tasks: this step has {tasks:,} "
                f"({p.micro_batches:,} micro-batches through {len(problem.graph):,} ops, forward and backward). "
                "Fewer micro-batches (a larger micro-batch, a smaller global batch) or layers draw it.")
    return None


def plans_table(plans, flops: float | None, gpus: int) -> list[dict]:
    rows = []
    for k, p in enumerate(plans):
        row = {"#": k + 1, "tensor-parallel": p.tp, "pipeline stages": p.pp, "data-parallel": p.dp,
               "micro-batch": p.micro_batch,
               "micro-batches": p.micro_batches, "step (ms)": p.step_time_s * 1e3,
               "fullest GPU (GB)": p.peak_memory_bytes / 1e9, "fits": "yes" if p.fits else "no",
               "idle": p.breakdown["bubble_fraction"]}
        if flops is not None:
            row["TFLOP/s per GPU"] = flops / p.step_time_s / gpus / 1e12
        rows.append(row)
    return rows


def memory_figure(parts: dict, names: list[str], capacity: float) -> go.Figure:
    used = [i for i in range(len(names)) if sum(parts[k][i] for k, _ in PARTS) > 0]
    fig = go.Figure(layout=BASE_LAYOUT)
    for key, colour in PARTS:
        fig.add_bar(name=key, x=[names[i] for i in used], y=[parts[key][i] / 1e9 for i in used],
                    marker_color=colour, hovertemplate="%{x}: %{y:.2f} GB " + key + "<extra></extra>")
    fig.add_hline(y=capacity / 1e9, line_dash="dash", line_color="#888",
                  annotation_text=f"capacity {capacity / 1e9:.0f} GB", annotation_position="top left")
    fig.update_layout(barmode="stack", height=360, yaxis_title="GB", xaxis_title="GPU",
                      legend=dict(orientation="h", y=1.12), margin=dict(t=50))
    return fig


def time_figure(p) -> go.Figure:
    b = p.breakdown
    fig = go.Figure(layout=BASE_LAYOUT)
    fig.add_bar(y=["step"], x=[b["compute_s"] * 1e3], name=f"compute of the busiest GPU ({b['busiest_gpu']})",
                orientation="h", marker_color="#4c78a8")
    if b.get("tensor_parallel_comm_s"):
        fig.add_bar(y=["step"], x=[b["tensor_parallel_comm_s"] * 1e3], name="exposed tensor-parallel communication",
                    orientation="h", marker_color="#f58518")
    if b.get("data_parallel_comm_s"):
        fig.add_bar(y=["step"], x=[b["data_parallel_comm_s"] * 1e3], name="data-parallel gradient all-reduce",
                    orientation="h", marker_color="#e45756")
    fig.add_bar(y=["step"], x=[b["other_s"] * 1e3], name="the rest: pipeline bubble and exposed communication",
                orientation="h", marker_color="#bab0ac")
    fig.update_layout(barmode="stack", height=160, xaxis_title="ms", legend=dict(orientation="h", y=1.5),
                      margin=dict(t=40, b=40))
    return fig


def label(p) -> str:
    return ((f"tensor parallel {p.tp}, " if p.tp > 1 else "")
            + f"{p.pp} stage(s) × {p.dp} replica(s), micro-batch {p.micro_batch} ({p.micro_batches} per step): "
            f"{p.step_time_s * 1e3:.0f} ms" + ("" if p.fits else ", does not fit"))


def capacity(devices) -> float:
    if isinstance(devices, Cluster):
        return float(devices.graph([0]).devices[0].memory_bytes)
    return float(np.max([d.memory_bytes for d in devices.devices]))
