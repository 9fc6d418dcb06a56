"""The Pipeline page's sections, one per tab: the browser redraws every chart on the page at each change of m
(most of the time a change takes), so the page builds and sends only the tab the user is looking at."""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

from placement_core.analysis import fmt_bytes, fmt_seconds
from placement_core.analysis.bubble import stage_times
from placement_core.analysis.closed_forms import FORMULAS, bubble_fraction
from placement_core.analysis.pipeline import best_micro_batches

from . import pipelineview, state
from .charts import pipeline_bars
from .pipelineview import NAMES, SHORT

TIMELINES, NUMBERS, BUBBLE, SWEEP, MEASURED = ("Timelines", "Numbers and memory", "Where the bubble comes from",
                                               "Choosing m", "Measured")
VIEWS = [TIMELINES, NUMBERS, BUBBLE, SWEEP, MEASURED]


@dataclass
class Shown:
    """What the page computed for the chosen settings, handed to the section drawn."""
    views: list  # pipelineview.schedule_runs
    parts: list  # pipelineview.breakdowns (empty for the ideal pipeline)
    facts: list  # compare_facts, one per view
    m: int
    v: int
    big: bool
    config: dict
    ideal: bool
    stages: list
    placement_of: dict  # schedule -> placement


def compare_facts(views: list[dict], g, d, m: int, cost: dict) -> list[dict]:
    """Per schedule shown: its stage devices, peak memory per stage, closed-form bubble and the comparison
    table's row (cheap: no simulation; every tab uses some of it)."""
    out = []
    for vw in views:
        run = vw["run"]
        devs = [d.names[i] for i in run.stage_devices]
        t = stage_times(g, d, vw["placement"], run.stage_devices, schedule=run.schedule, micro_batches=m, **cost)
        closed = bubble_fraction(run.schedule, len(devs), run.micro_batches, t["t_f"], t["t_b"],
                                 v=run.virtual_stages, t_w=t["t_w"])
        peaks = run.stage_peak_memory()
        out.append({"view": vw, "devs": devs, "closed": closed, "peaks": peaks, "row": {
            "schedule": NAMES[run.schedule], "micro-batches": run.micro_batches, "step time (ms)": run.step_time * 1e3,
            "bubble (%)": run.bubble_fraction * 100, "closed-form bubble (%)": closed * 100,
            "first-stage peak (GB)": peaks[0] / 1e9, "highest stage peak (GB)": max(peaks) / 1e9,
            "fits in memory": run.evaluation.feasible}})
    return out


def _number_columns(*names: str) -> dict:
    return {k: st.column_config.NumberColumn(format="%.4g") for k in names}


def timelines(s: Shown) -> None:
    """Each schedule's timeline on one time axis, its step, bubble, closed form and highest peak beside it."""
    d = state.devices()
    x_max = max(vw["run"].step_time for vw in s.views)
    capacity = {n: dv.memory_bytes for n, dv in zip(d.names, d.devices)}
    for i, f in enumerate(s.facts):
        vw, run = f["view"], f["view"]["run"]
        unit = "batch" if run.schedule == "thesis" else "micro-batch"
        with st.container(border=True):
            if s.big:  # the timeline across the page; the numbers under it
                left = st.container()
                cells = st.columns(4)
            else:
                left, right = st.columns([4, 1.25])
                cells = [right] * 4
            title = f"{(SHORT if s.big else NAMES)[run.schedule]} · step {fmt_seconds(run.step_time)} · bubble {run.bubble_fraction:.1%}"
            # one legend, under the first timeline (the colours are the same on all); each on a projector
            fig = pipelineview.gantt_figure(vw, x_max, title, unit, run.chunk_of is not None and run.virtual_stages > 1,
                                            s.big, legend=s.big or i == 0)
            left.plotly_chart(fig, key=f"pipe_gantt_{run.schedule}", config=s.config)
            cells[0].metric("Step time", fmt_seconds(run.step_time),
                            help="One batch (all its micro-batches), from the first forward to the last weight update.")
            cells[1].metric("Bubble", f"{run.bubble_fraction:.1%}",
                            help="Share of the step a stage device is idle, averaged over the stages.")
            cells[2].metric("Closed form", f"{f['closed']:.1%}",
                            help=f"{FORMULAS[run.schedule]} over the step, for {len(f['devs'])} equal stages with the "
                                 "stages' mean times (t_f, t_b, t_W per micro-batch) and free transfers.")
            k = max(range(len(f["peaks"])), key=f["peaks"].__getitem__)
            dev = f["devs"][k]
            cells[3].metric("Peak memory", fmt_bytes(f["peaks"][k]),
                            help=f"The highest stage's peak: stage {k + 1} on {dev}, "
                                 f"{f['peaks'][k] / capacity[dev]:.0%} of its {fmt_bytes(capacity[dev])}. Every "
                                 f"stage's peak against its capacity: the *{NUMBERS}* tab.")
            if not run.evaluation.feasible:
                cells[3].warning("Exceeds a device's memory.", icon=":material/warning:")
    st.caption("Bars: **F k** = forward of micro-batch k in its colour, **B k** = its backward in a lighter "
               "shade (under ZB-H1 only the input gradient), **W k** = ZB-H1's weight gradient, lightest and "
               "hatched, **F k·c** = through chunk c (interleaved 1F1B), **U** = weight updates (grey); thin "
               "bars on the link rows are transfers. Every chart has the same time axis.")


def numbers(s: Shown) -> None:
    """The schedules' numbers side by side, and every stage's peak memory against its capacity."""
    d = state.devices()
    capacity = {n: dv.memory_bytes for n, dv in zip(d.names, d.devices)}
    st.dataframe([f["row"] for f in s.facts], hide_index=True, key="pipe_compare", column_config=_number_columns(
        "step time (ms)", "bubble (%)", "closed-form bubble (%)", "first-stage peak (GB)", "highest stage peak (GB)"))
    peak_max = max(max(f["peaks"]) for f in s.facts)
    cap_max = max(capacity[n] for f in s.facts for n in f["devs"])
    mem_max = max(peak_max * 1.3, cap_max * 1.08) if cap_max <= 5 * peak_max else peak_max * 1.3
    per_row = 1 if s.big else min(len(s.facts), 4)
    for i in range(0, len(s.facts), per_row):
        for col, f in zip(st.columns(per_row), s.facts[i:i + per_row]):
            vw, run = f["view"], f["view"]["run"]
            col.markdown(f"**{SHORT[run.schedule]}**")
            col.plotly_chart(pipelineview.memory_figure(vw, f["devs"], f["peaks"], [capacity[n] for n in f["devs"]],
                                                        mem_max, s.big), key=f"pipe_memory_{run.schedule}",
                             config=s.config)
            if not run.evaluation.feasible:
                col.warning("Exceeds a device's memory.", icon=":material/warning:")
    rows = [{"schedule": f["view"]["run"].schedule, "device": dev, "peak": pk}
            for f in s.facts for dev, pk in zip(f["devs"], f["peaks"])]
    st.plotly_chart(pipeline_bars.memory_by_schedule_figure(rows, SHORT, capacity, big=s.big), key="pipe_memory_all",
                    config=s.config)


def bubble(s: Shown) -> None:
    """Each schedule's idle time split into the schedule, the imbalance, the updates and the transfers."""
    named = [(SHORT[vw["run"].schedule], pt) for vw, pt in zip(s.views, s.parts)]
    st.plotly_chart(pipeline_bars.breakdown_figure(named, big=s.big), key="pipe_breakdown", config=s.config)
    st.dataframe([{"schedule": name, "idle, all stages (ms)": pt["idle_s"] * 1e3,
                   "schedule (ms)": pt["schedule_s"] * 1e3, "imbalance (ms)": pt["imbalance_s"] * 1e3,
                   "weight updates (ms)": pt["updates_s"] * 1e3, "transfers (ms)": pt["transfers_s"] * 1e3,
                   "transfers (%)": pt["transfers_share"] * 100, "imbalance (%)": pt["imbalance_share"] * 100}
                  for name, pt in named], hide_index=True, key="pipe_breakdown_table", column_config=_number_columns(
                      "idle, all stages (ms)", "schedule (ms)", "imbalance (ms)", "weight updates (ms)",
                      "transfers (ms)", "transfers (%)", "imbalance (%)"))
    st.caption("The stages' idle time in one step, summed over them, split by simulating the same placement "
               "again: with free transfers (what is left over is the **transfers**' part), then also free weight "
               "updates (the **updates**' part). What the ideal run still idles beyond the closed form for equal "
               "stages of the stages' mean times is the **imbalance** between stages.")


def measured(s: Shown) -> None:
    """Stored pipelined benchmarks of this network, measured beside simulated."""
    rows = pipelineview.measured_pipelines(state.graph())
    if not rows:
        st.caption("No pipelined benchmark of this network is stored yet. Run one with torch.distributed."
                   "pipelining on CPU ranks, e.g. `placement benchmark --model ... --devices cpu:4 --placement "
                   "stages:4 --schedule 1f1b --micro-batches 8 --simulate local --timings local` (after "
                   "`placement calibrate`); see docs/pipeline.md.")
        return
    st.plotly_chart(pipeline_bars.measured_figure(rows, SHORT, big=s.big), key="pipe_measured", config=s.config)
    st.dataframe([{"benchmark": r["id"], "schedule": SHORT.get(r["schedule"], r["schedule"]),
                   "stages": r["stages"], "V": r["virtual_stages"], "micro-batches": r["micro_batches"],
                   "batch": r["batch_size"], "measured step (ms)": (r["measured_step_s"] or 0) * 1e3,
                   "measured bubble (%)": r["measured_bubble"] * 100,
                   "simulated step (ms)": None if r["simulated_step_s"] is None else r["simulated_step_s"] * 1e3,
                   "simulated bubble (%)": None if r["simulated_bubble"] is None else r["simulated_bubble"] * 100,
                   "simulated on": r["simulated_on"] or "–"} for r in rows],
                 hide_index=True, key="pipe_measured_table", column_config=_number_columns(
                     "measured step (ms)", "measured bubble (%)", "simulated step (ms)", "simulated bubble (%)"))
    st.caption("Measured bubble: per step, the mean over the ranks of the share of the step a rank waits "
               "outside its stages' forward, backward and weight-gradient work. Simulated: the same "
               "pipeline on the devices the run was given with --simulate (a calibrated preset).")


def sweep(s: Shown) -> None:
    """Step time and first-stage memory against m, and the fastest m that fits."""
    g, d, sim = state.graph(), state.devices(), state.session().sim
    st.markdown("##### Step time and memory against the number of micro-batches")
    counts = pipelineview.sweep_counts(g.batch_size, s.m)
    args = (state.graph_key(), state.devices_key(), g, d, s.placement_of, counts, s.v, state.cost_key(),
            state.cost_kw(g, sim), sim.penalty, s.ideal)
    rows = pipelineview.sweep_rows(*args)
    first = s.stages[0].device
    st.plotly_chart(pipelineview.sweep_figure(*args, s.m, d.devices[d.index[first]].memory_bytes), key="pipe_sweep",
                    config=s.config)
    best = best_micro_batches(rows)
    notes = [f"{SHORT[k]}: m = {r['micro_batches']} ({fmt_seconds(r['step_time_s'])} per batch, first stage "
             f"{fmt_bytes(r['first_stage_peak_bytes'])})" if r else f"{SHORT[k]}: no m fits in memory"
             for k, r in best.items() if k != "thesis"]
    if notes:
        st.caption("Fastest m that fits in memory — " + "; ".join(notes) + f". Dotted line: the chosen m = {s.m}; "
                   f"the memory line is the first stage's ({first}).")
    st.caption(pipelineview.peak_stage_note(s.views, d.names, s.m) + " GPipe keeps all m micro-batches' "
               "activations until their backward passes, 1F1B at most about p per stage.")


SECTIONS = {TIMELINES: timelines, NUMBERS: numbers, BUBBLE: bubble, SWEEP: sweep, MEASURED: measured}
