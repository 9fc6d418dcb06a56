"""Optimize: run one or several algorithms in the background and watch them converge."""

import importlib.util
import os

import streamlit as st

from dashboard import seed_answer, server_runs, state, ui
from dashboard.charts import curves
from dashboard.background_runs import REGISTRY, RunSpec
from placement_core import InputError
from placement_core.analysis import fmt_bytes, fmt_seconds
from placement_core.optimize import ALGORITHMS, problem_for
from placement_core.optimize.seeding import HEURISTICS, parse_init, seeding_text

SEED_TITLES = {h: ALGORITHMS[h].title or h for h in HEURISTICS} | {
    "single": "Every single-device placement (homogeneous)"}


def _init_problems(init: str | None) -> list[str]:
    """What is wrong with the initial mappings, said before Start (the run's thread would fail on it)."""
    if not init:
        return []
    try:
        kinds = dict(parse_init(init))
    except InputError as e:
        return [f"Initial mappings: {e.problem}" + (f". {e.fix}" if e.fix else "")]
    if "bayes" in kinds and importlib.util.find_spec("optuna") is None:
        return ["Initial mappings: the Bayesian start needs optuna, which is not installed. Install the learn "
                'extra (.venv/bin/pip install -e ".[learn]") or set its trials to 0.']
    return []


ui.header("Optimize", "Search for placements with the simulator as the judge: thousands of placements per "
          "second, no GPU needed. Runs continue in the background while you look at other pages.")
s = state.session()
g, d = state.graph(), state.devices()

with ui.guarded("the simulator settings"):
    with st.expander(f"Simulator settings — {s.sim.summary()}, {s.sim.penalty} penalty", expanded=False,
                     key="opt_settings"):
        ui.sim_controls("opt")
        st.caption("These settings are shared by every page (the Trace shows the step the optimizer scored).")

with ui.guarded("the run form"):
    st.markdown(f"##### New run: {ui.esc(s.network_label)} on {ui.esc(s.devices_label)}")
    names = list(ALGORITHMS)
    default = [a for a in ("ga", "map-elites") if a in names]
    chosen = st.multiselect("Algorithms", names, default=default, key=ui.persist("opt_algorithms"),
                            format_func=lambda a: ALGORITHMS[a].title or a,
                            help="Each runs in its own background thread with the same budget and seed.")
    c1, c2, c3, c4 = st.columns(4)
    evaluations = c1.number_input("Evaluations per algorithm", 1, 10_000_000, 20_000, step=1000,
                                  key=ui.persist("opt_evaluations"), help="The thesis gives every algorithm 20,000.")
    seconds = c2.number_input("Time limit (s, 0 = none)", 0, 86_400, 0, step=10, key=ui.persist("opt_seconds"),
                              help="Stop after this long even if evaluations are left.")
    seed = c3.number_input("Seed", 0, 2**31 - 1, 1, key=ui.persist("opt_seed"), help="The same seed gives the same result.")
    workers = c4.number_input("Worker processes", 1, max(os.cpu_count() or 1, 1), 1, key=ui.persist("opt_workers"),
                              help="Evaluate batches of placements in parallel processes (1 = in this process).")
    seeded = st.checkbox(f"Seed the search with the current placement ({ui.esc(s.placement_label)})", value=True,
                         key=ui.persist("opt_seeded"), help="The current placement joins the first population (GA) or the "
                         "archive (MAP-Elites), so a run never ends worse than it; turn off for the thesis' "
                         "purely random start.")
    c1, c2, c3 = st.columns([4, 1, 1])
    heuristics = c1.multiselect(
        "Initial mappings", list(HEURISTICS), default=[], key=ui.persist("opt_init", HEURISTICS),
        format_func=lambda h: SEED_TITLES[h], placeholder="none",
        help="Placements from fixed heuristics that join the first population (GA) or the archive (MAP-Elites) "
             "alongside the current placement, as in the dissertation's initial mappings: HEFT (earliest finish "
             "time with communication costs), HEFT without communication (TF-Mapper), memory-aware HEFT, "
             "recursive min-cut, Baechi's m-ETF and m-TOPO, the expert's balanced contiguous stages, and every "
             "single-device placement. Each costs one evaluation (single: one per device), spent before the "
             "search, outside its budget, and reported with the result.")
    n_random = c2.number_input("Random placements", 0, 100_000, 0, step=10, key=ui.persist("opt_init_random"),
                               help="Uniformly random placements added to the seeds (0 = none); one evaluation "
                                    "each, spent before the search.")
    n_bayes = c3.number_input("Bayesian trials", 0, 100_000, 0, step=50, key=ui.persist("opt_init_bayes"),
                              help="A Bayesian-optimization start (optuna's tree-structured Parzen estimator, one "
                                   "device choice per op, starting from the single-device placements): its best "
                                   "distinct trials join the seeds. 0 = none; each trial is one evaluation, spent "
                                   "before the search and reported with the result (100 trials take seconds).")
    init = ",".join(list(heuristics) + ([f"random:{int(n_random)}"] if n_random else [])
                    + ([f"bayes:{int(n_bayes)}"] if n_bayes else [])) or None
    params = {}
    for a in chosen:
        cls = ALGORITHMS[a]
        with st.expander(f"{cls.title or a} parameters (thesis defaults)"):
            params[a] = ui.param_inputs(cls, f"opt_{a}")
    problems = []
    for a in chosen:
        for name, value in params[a].items():
            try:
                params[a][name] = ALGORITHMS[a].PARAMS[name].parse(name, value)
            except InputError as e:
                problems.append(f"{ALGORITHMS[a].title or a}: {e.problem}" + (f". {e.fix}" if e.fix else ""))
    problems += _init_problems(init)
    for problem_text in problems:
        st.error(ui.esc(problem_text), icon=":material/error:")
    if st.button("Start", type="primary", icon=":material/play_arrow:", disabled=not chosen or bool(problems),
                 key="opt_start"):
        problem_sim = s.sim
        for a in chosen:
            spec = RunSpec(algorithm=a, title=ALGORITHMS[a].title or a, params=params[a],
                           evaluations=int(evaluations), seconds=float(seconds) or None, seed=int(seed),
                           workers=int(workers), graph=g, graph_key=state.graph_key(),
                           network_label=s.network_label, devices=d, devices_key=state.devices_key(),
                           devices_label=s.devices_label, sim=problem_sim,
                           initial=state.current_placement()[None, :].copy() if seeded else None, init=init)
            # each run gets its own Problem: the compiled simulator is not shared between threads
            # with the session's split table (Split ops), and the splits data-parallel and hybrid-parallel add
            # (and an initial mapping such as data-parallel brings its splits too, as on the command line)
            problem = problem_for(state.spec_for(g, problem_sim, d).build(g, d), a)
            for kind, _ in (parse_init(init) if init else []):
                problem = problem_for(problem, kind)
            REGISTRY.start(s.session_key, spec, problem)
        st.rerun()

runs = server_runs.runs()  # this session's, and every run this server computes (a reload, another tab)
running = [r for r in runs if r.active]
shown_finished = {r.id for r in runs if not r.active}  # the results drawn by this run of the page


@st.fragment(run_every=1.0 if running else None)
def live():
    current = server_runs.runs()
    views = [r.view() for r in current]
    active = [v for v in views if v["status"] in ("starting", "running")]
    if not views:
        st.info("No runs yet. Choose algorithms and press **Start**.", icon=":material/info:")
        return
    st.markdown("##### Progress")
    for v in views:
        if v["status"] not in ("starting", "running"):
            continue
        c1, c2 = st.columns([6, 1])
        frac = v["fraction"] or 0.0
        text = (f"**{v['name']}** · {v['evaluations']:,}"
                + (f" / {v['budget']:,}" if v["budget"] else "") + " evaluations"
                + f" · {v['evals_per_s']:,.0f} evaluations/s"
                + (f" · best {fmt_seconds(v['best'])}" if v["best"] < float("inf") else ""))
        snap = v["snapshot"] or {}
        if "coverage" in snap:
            text += f" · archive {snap['archive_size']} elites ({snap['coverage']:.1%} of niches)"
        if snap.get("stage") == "planning" and snap["tasks"]:  # HEFT plans long before its one evaluation
            text += f" · planning {snap['planned_tasks']:,} / {snap['tasks']:,} tasks"
            frac = snap["planned_tasks"] / snap["tasks"]
        if v["stage"]:
            text += f" · {v['stage']}"
        c1.progress(min(max(frac, 0.0), 1.0), text=text)
        if c2.button("Stop", key=f"stop_{v['id']}", icon=":material/stop:"):
            next(r for r in current if r.id == v["id"]).stop()
    if any(v["curve"] for v in views):
        st.plotly_chart(curves.progress_figure(views), key="opt_progress", config={"displaylogo": False})
    if {v["id"] for v in views if v["status"] not in ("starting", "running")} - shown_finished:
        st.rerun(scope="app")  # a run finished: redraw the page with its result (and the sidebar's count)


with ui.guarded("the progress"):
    live()

with ui.guarded("the results"):
    finished = [r for r in runs if not r.active]
    if running:
        if st.button("Stop all", icon=":material/stop_circle:", key="opt_stop_all"):
            for r in running:
                r.stop()
    if finished:
        st.markdown("##### Results")
        st.caption("Best placement of each finished run. *Use* makes it the current placement (with the "
                   "network, devices and settings it was found for); the Trace and Archive pages show it.")
        for r in reversed(finished):
            res = r.result
            with st.container(border=True):
                c1, c2, c3, c4, c5 = st.columns([3, 2, 2, 2, 2])
                c1.markdown(f"**{ui.esc(r.name)}** · {r.status}  \n<small>{ui.esc(r.spec.network_label)} on "
                            f"{ui.esc(r.spec.devices_label)}"
                            f" · {r.spec.sim.summary()}</small>", unsafe_allow_html=True)
                if res is None:
                    c2.error(r.error or "no result", icon=":material/error:")
                    if c5.button("Dismiss", key=f"rm_{r.id}"):
                        REGISTRY.remove(s.session_key, r.id)
                        st.rerun()
                    continue
                c2.metric("Best objective", fmt_seconds(res.best_objective),
                          help="seconds per batch plus the memory penalty")
                c3.metric("Evaluations", f"{res.evaluations:,}", help=f"in {res.wall_s:.1f} s")
                fits = "yes" if res.best.feasible else "no"
                c4.metric("Fits in memory", fits)
                if c5.button("Use this placement", key=f"use_{r.id}", type="primary"):
                    state.adopt_run(r, res.best_placement, f"best of {r.name}")
                    st.rerun()
                if res.archive is not None:
                    c5.page_link("app_pages/archive.py", label="Browse its archive", icon=":material/grid_view:")
                if not res.best.feasible:
                    over = fmt_bytes(float(res.best.overflow.sum()))
                    why = (" HEFT plans for time only and does not look at memory capacity: try a memory-aware "
                           "search (GA, MAP-Elites) or the 'infeasible' memory penalty." if r.spec.algorithm == "heft"
                           else " Raise the budget, seed it with a placement that fits, or use the 'infeasible' "
                                "memory penalty.")
                    st.warning(f"This placement needs {over} more memory than the devices have: it would not run."
                               + why, icon=":material/warning:")
                if seed_answer.seed_kept(r):
                    st.info(f"**Nothing beat the seed**: after {res.evaluations:,} evaluations the best placement is "
                            f"still one the search started from ({fmt_seconds(res.best_objective)}). "
                            + seed_answer.explanation(r) + " Placement matters where a network does not fit one "
                            "GPU or has parallel branches on fast links: try one of these setups (the placement "
                            "starts all on gpu0 again).", icon=":material/lightbulb:")
                    b = st.columns(len(seed_answer.SETUPS))
                    for k, (name, (net, dev, why, found)) in enumerate(seed_answer.SETUPS.items()):
                        b[k].button(f"{state.NETWORK_TITLES.get(net, net)} on {dev}", key=f"matters_{name}_{r.id}",
                                    on_click=seed_answer.load_setup, args=(name,), icon=":material/swap_horiz:",
                                    help=f"{why}. Measured from all on gpu0, 20,000 evaluations: {found}.")
                if r.seeded is not None:
                    sd = r.seeded
                    st.caption(f"{ui.esc(seeding_text(sd, sentence=True))}; best seed {ui.esc(sd['best_label'])}: "
                               f"{fmt_seconds(sd['best_objective_s'])}.")
                planned = res.extras.get("planned_makespan_s")
                if planned is not None:
                    st.caption(f"HEFT's own plan finishes the step in {fmt_seconds(planned)}; the simulator, with "
                               f"FIFO queues and shared channels, gives {fmt_seconds(res.best.result.makespan)}.")
