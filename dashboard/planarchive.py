"""Plan archives in the dashboard: MAP-Elites over cluster plans run from the Cluster plan page, stored in the run
store as it finishes (``placement_core.store.plan_runs``: a reload or another session reopens it) and kept with the
session too, and drawn on the Archive page (its map, then the chosen niche's plan, time, memory and trace).

Plans are not placements of one problem (each has its own graph under tensor parallelism, its own schedule and
micro-batches), so the Archive page's placement sections (device load, compare, use) do not apply; these do.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass

import streamlit as st

from placement_core.analysis import fmt_bytes, fmt_seconds
from placement_core.analysis.trace import gantt_rows, gantt_segments
from placement_core.base.errors import InputError
from placement_core.formats.clusters import Cluster
from placement_core.optimize.plan_elites import NICHES, PlanArchive, search_plans
from placement_core.optimize.plan_space import DIMS, LABELS
from placement_core.optimize.plans import memory_parts
from placement_core.simulate.chrome import chrome_trace
from placement_core.store import RunStore
from placement_core.store.plan_runs import PlanSearch, load_plan_archive, save_plan_archive

from . import clusterview, state, stored, ui
from .charts.gantt import gantt_figure

KEEP = 5  # plan archives a session keeps (the newest)
_IDS = itertools.count(1)


@dataclass(frozen=True)
class ArchiveChoices:
    budget: int
    niches: tuple[str, ...]
    vary: tuple[str, ...]  # of schedule, recompute, zero: searched instead of the form's value
    seed: int = 0


@dataclass
class PlanRun:
    id: int
    name: str
    graph_key: str
    network_label: str
    devices_spec: str
    capacity: float
    archive: PlanArchive
    key: str = ""  # the Archive page's: "plan:<id>" for this session's, "stored:<run id>" for one reopened
    store_id: int | None = None  # its run in the run store (None: storing it failed)


def form_row(config) -> ArchiveChoices | None:
    """The MAP-Elites widgets and button of the Cluster plan form: their choices when the button was pressed."""
    st.markdown("**Or an archive of plans**: MAP-Elites keeps the fastest plan that fits in every niche; browse "
                "it on the Archive page.")
    c = st.columns([1, 2, 2])
    budget = c[0].number_input("MAP-Elites budget", 1, 2000, 60, key="cluster_me_budget",
                               help="How many plans MAP-Elites simulates (each once); it stops earlier when "
                                    "every plan is done.")
    niches = c[1].multiselect("Niches", list(DIMS), default=list(NICHES), key="cluster_me_niches",
                              format_func=LABELS.get, help="Two or more plan dimensions: each combination of "
                                                           "their values is a niche with its own best plan.")
    searchable = ["schedule", "zero"] + (["recompute"] if config is not None else [])
    vary = c[2].multiselect("Also search", searchable, default=searchable, key="cluster_me_vary",
                            format_func=LABELS.get, help="Searched instead of the value chosen above; the "
                                                         "pipeline stages, micro-batch and tensor degree are searched "
                                                         "when 0 or 'search'.")
    if not st.form_submit_button("Search with MAP-Elites", icon=":material/grid_view:"):
        return None
    return ArchiveChoices(int(budget), tuple(niches), tuple(vary))


def run(choices, archive_choices: ArchiveChoices, config) -> PlanRun:
    """Search, store the archive as a run and keep it with the session (the newest ``KEEP``). On the devices the
    exhaustive search plans on (:func:`.clusterview.plan_devices`): above 32 nodes a cluster whose data-parallel
    replicas are folded into one, stored as its ``dgx-…:nodes=N`` spec and reopened as the same cluster."""
    s = state.session()
    devices = clusterview.plan_devices(choices)
    bar = st.progress(0.0, text="MAP-Elites over the plans…")

    def progress(done: int, total: int) -> None:
        bar.progress(done / total, text=f"MAP-Elites: {done} of {total} plans simulated")

    t0 = time.perf_counter()
    graph = state.graph()
    archive = search_plans(graph, devices, choices.request(), config, vary=archive_choices.vary,
                           niches=archive_choices.niches, budget=archive_choices.budget, seed=archive_choices.seed,
                           progress=progress)
    bar.empty()
    search = PlanSearch(devices_spec=choices.devices_spec, request=choices.request(),
                        network_spec=s.base_graph_key if config is not None else None, vary=archive_choices.vary,
                        niches=archive_choices.niches, budget=archive_choices.budget, seed=archive_choices.seed)
    store_id = s.plan_store_error = None
    try:
        with stored.open_store() as store:
            store_id = save_plan_archive(store, archive, search, graph, devices, wall_s=time.perf_counter() - t0)
    except InputError as e:  # the archive is still this session's; say why it is not stored
        s.plan_store_error = str(e)
    k = next(_IDS)
    name = f"plan archive {k}" + (f" (run {store_id})" if store_id is not None else "")
    result = PlanRun(k, name, state.graph_key(), s.network_label, choices.devices_spec,
                     clusterview.capacity(devices), archive, key=f"plan:{k}", store_id=store_id)
    s.plan_archives = (s.get("plan_archives") or [])[-(KEEP - 1):] + [result]
    s["arch_run"] = result.key  # the Archive page opens on it
    return result


@st.cache_resource(max_entries=8, show_spinner="Reopening the plan archive…")
def _stored(path: str, run_id: int, updated: float) -> PlanRun:
    with RunStore(path=path) as store:
        rec = store.get(run_id)
        archive, search, devices = load_plan_archive(store, run_id)
    return PlanRun(run_id, stored.run_name(rec), f"stored:{run_id}", rec.network_name, search.devices_spec,
                   clusterview.capacity(devices), archive, key=f"stored:{run_id}", store_id=run_id)


def stored_run(store, rec) -> PlanRun:
    """A stored plan archive, reopened once per run (its inputs never change after it is stored)."""
    return _stored(str(store.path), rec.id, rec.updated)


def summary(r: PlanRun) -> None:
    """What the newest plan archive holds, and the way to the Archive page."""
    a = r.archive
    best = a.best()
    with st.container(border=True):
        st.markdown(f"**{ui.esc(r.name)}**: {a.evaluations} of {len(a.space):,} plans simulated, {len(a)} of "
                    f"{len(a.reachable)} niches ({' × '.join(d.label for d in a.descriptors)}) filled; best "
                    f"{ui.esc(plan_label(best.plan))}, {fmt_seconds(best.plan.step_time_s)} a step"
                    + ("" if best.fits else " (over memory: no plan simulated fits)"))
        st.page_link("app_pages/archive.py", label="Browse it on the Archive page", icon=":material/grid_view:")
        if r.store_id is not None:
            st.caption(f"Stored as run {r.store_id}: the Runs page lists it, and the Archive page reopens it after "
                       "a reload or in another session.")
        elif state.session().get("plan_store_error"):
            st.warning("Kept with this session only, not stored: " + ui.esc(state.session().plan_store_error),
                       icon=":material/warning:")


def runs() -> list[PlanRun]:
    return list(reversed(state.session().get("plan_archives") or []))


@st.cache_resource(max_entries=16, show_spinner="Simulating the plan…")
def _details(run_key: str, row: int, _archive: PlanArchive, _elite):
    plan, problem = _archive.simulate(_elite)
    return plan, problem, memory_parts(problem, plan.placement)


def elite_section(source, ranked, rank_of, pick_key, map_section) -> None:
    """Metrics, the map (``map_section``, the Archive page's, drawn for ``source``, its archive source), the chosen
    niche's plan with its time, memory and trace."""
    archive, run = source.archive, source.plan
    with ui.guarded("the plan archive"):
        c = st.columns(4)
        c[0].metric("Elites", f"{len(archive):,}")
        c[1].metric("Niches filled", f"{archive.coverage:.0%}",
                    help=f"of the {len(archive.reachable)} niches some valid plan falls in (" +
                         " × ".join(f"{d.size} {d.label}" for d in archive.descriptors) + ")")
        c[2].metric("Best step", fmt_seconds(ranked[0].objective))
        c[3].metric("Plans simulated", f"{archive.evaluations:,}", help=f"of {len(archive.space):,} valid plans")
        map_section(source, pick_key)
        niche = st.selectbox("Elite", [e.niche for e in ranked], key=pick_key,
                             format_func=lambda n: f"#{rank_of[n]} · {fmt_seconds(archive.elites[n].objective)} · "
                                                   f"{archive.label(archive.elites[n])}"
                                                   + ("" if archive.elites[n].fits else " · over memory"))
        elite = archive.elites[niche]
        p = elite.plan
        with st.container(border=True):
            st.markdown(f"**Elite #{rank_of[niche]}** · {ui.esc(archive.label(elite))}: {ui.esc(plan_label(p))}")
            m = st.columns(5)
            m[0].metric("Step", fmt_seconds(p.step_time_s), help="one step of the global batch")
            m[1].metric("Fullest GPU", fmt_bytes(p.peak_memory_bytes), help=f"of {fmt_bytes(run.capacity)}")
            m[2].metric("Fits in memory", "yes" if p.fits else "no",
                        help=None if p.fits else "No plan simulated in this niche fits: this is the one nearest "
                                                 "to fitting.")
            m[3].metric("Schedule", p.schedule + (f" × {p.virtual_stages}" if p.virtual_stages > 1 else ""))
            m[4].metric("Recompute · ZeRO", f"{p.recompute} · {p.zero}")
            st.dataframe(plan_rows([elite], archive), hide_index=True, key="plan_arch_elite")
            st.markdown("##### Where the step's time goes")
            st.plotly_chart(clusterview.time_figure(p), key="plan_arch_time", config={"displaylogo": False})
        trace_section(run, elite)


def trace_section(run, elite) -> None:
    """The plan's memory per GPU and, on request, its step GPU by GPU with the trace to download."""
    with ui.guarded("the plan's trace"):
        plan, problem, parts = _details(run.key, elite.row, run.archive, elite)
        if isinstance(run.archive.setup[1] if run.archive.setup else None, Cluster) and plan.dp > 1:
            st.caption(f"One data-parallel replica is shown: its {problem.n_devices} simulated GPU(s), the first of "
                       f"each tensor-parallel group in each stage; the other {plan.dp - 1:,} are folded into it, "
                       "their gradients' all-reduce kept in each weight update.")
        st.markdown("##### Memory per GPU")
        st.plotly_chart(clusterview.memory_figure(parts, problem.devices.names, run.capacity),
                        key="plan_arch_memory", config={"displaylogo": False})
        if not st.toggle("Show its trace", key="plan_arch_trace",
                         help="The plan's step simulated with a trace: every op and collective on its GPU, "
                              "every transfer on its link."):
            return
        if problem.n_devices > clusterview.GANTT_MAX_GPUS:
            st.caption(f"The step's chart is drawn for clusters of up to {clusterview.GANTT_MAX_GPUS} GPUs.")
            return
        result = problem.simulate(plan.placement, trace=True).result
        channels = [ch.name for ch in problem.devices.channels]
        rows = gantt_rows(problem.devices.names, channels)
        st.markdown("##### The step, GPU by GPU")
        st.plotly_chart(gantt_figure(gantt_segments(result.trace, rows), rows, problem.n_devices, result.makespan,
                                     unit="micro-batch"),
                        key="plan_arch_gantt", config={"displaylogo": False, "scrollZoom": True})
        data = chrome_trace(result, problem.devices.names, channels, title=f"{run.name}: {plan_label(plan)}",
                            graph=problem.graph)
        st.download_button("Trace (Chrome JSON)", json.dumps(data), file_name="plan-trace.json",
                           mime="application/json", key="plan_arch_trace_json", icon=":material/download:",
                           help="Open it in ui.perfetto.dev or chrome://tracing.")


def plan_label(p) -> str:
    """The plan in words, its schedule, recomputation and ZeRO stage when they are not the defaults."""
    extra = [f"{p.schedule}" + (f" × {p.virtual_stages} virtual stages" if p.virtual_stages > 1 else "")]
    extra += [f"recompute {p.recompute}"] if p.recompute != "none" else []
    extra += [f"ZeRO-{p.zero}"] if p.zero else []
    return (f"tensor parallel {p.tp}, {p.pp} stage(s) × {p.dp} replica(s), micro-batch {p.micro_batch} "
            f"({p.micro_batches} per step), " + ", ".join(extra))


def plan_rows(elites, archive: PlanArchive) -> list[dict]:
    rows = []
    for e in elites:
        p = e.plan
        rows.append({"niche": archive.label(e), "tensor-parallel": p.tp, "pipeline stages": p.pp,
                     "data-parallel": p.dp, "micro-batch": p.micro_batch, "micro-batches": p.micro_batches,
                     "schedule": p.schedule, "virtual stages": p.virtual_stages, "recompute": p.recompute,
                     "ZeRO": p.zero, "step (ms)": p.step_time_s * 1e3, "fullest GPU (GB)": p.peak_memory_bytes / 1e9,
                     "fits": "yes" if p.fits else "no"})
    return rows


def top_section(archive: PlanArchive) -> None:
    with ui.guarded("the elites"):
        st.markdown("##### The best plan of every niche")
        st.dataframe(plan_rows(archive.ranked(), archive), hide_index=True, key="plan_arch_top",
                     column_config={"step (ms)": st.column_config.NumberColumn(format="%.4g"),
                                    "fullest GPU (GB)": st.column_config.NumberColumn(format="%.3g")})
