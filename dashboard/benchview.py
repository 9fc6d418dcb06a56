"""The Benchmark page: measure placements for real and compare with the simulator, drawn as sections that are
guarded one by one (``ui.guarded``), so one that fails shows its message and the others still draw.

The sections: the model and the local devices (the form); what to measure (:mod:`.benchchoice`); which local
device plays each device; the run (:mod:`.benchjob`: the job in the background, its progress); the measurements
(:mod:`.benchresults`); the calibration (:mod:`.calibview`). torch is imported only by the benchmark itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import streamlit as st

from placement_core import Problem, SimSettings
from placement_core.analysis.benchmark_plan import default_mapping, shared_warning

from . import benchchoice, benchjob, benchresults, calibview, state, ui

# Built-in networks were generated from these torchvision models (scripts/make_builtin_networks.py),
# so their op names match what the benchmark traces.
BUILTIN_SOURCES = {
    "alexnet": ("torchvision:alexnet", "3, 224, 224"),
    "vgg16": ("torchvision:vgg16", "3, 224, 224"),
    "resnet50": ("torchvision:resnet50", "3, 224, 224"),
    "inception_v3": ("torchvision:inception_v3(aux_logits=False, init_weights=False)", "3, 299, 299"),
}
MODES = ["Chosen placements", "The K best placements of a run"]
RUNNERS = ["ranks", "inprocess"]


@dataclass(frozen=True)
class Form:
    """What the form says: the model, its sample shape and batch, the local devices, runner and steps."""

    source: str  # "" when there is none to run (not given, or refused)
    shape: str
    batch: int
    spec: str
    runner: str
    steps: int
    warmup: int
    local: tuple  # the local devices ``spec`` names


def _follow_network() -> None:
    """The model source, sample shape and batch follow the network: typed for one, they do not carry over."""
    s = state.session()
    if s.get("bench_for") != s.base_graph_key:
        for key in ("bench_source", "bench_shape", "bench_batch"):
            s.pop(key, None)
        s.bench_for = s.base_graph_key


def render() -> None:
    if benchjob.benchmark_backend() is None:
        st.warning("Real benchmarking is not available here: PyTorch or `placement_core.torch.benchmark` is not "
                   "installed (`.venv/bin/pip install -e \".[torch]\"`). The other pages work without it.",
                   icon=":material/construction:")
        return
    _follow_network()
    form = plan = ranking = mapping = None
    with ui.guarded("the model and the local devices"):
        form = _model_form()
    with ui.guarded("what to measure"):
        mode = st.radio("What to measure", MODES, horizontal=True, key=ui.persist("bench_mode", MODES),
                        help="Chosen placements: any of the current one, run results, elites, single devices. The "
                             "K best of a run: its K best distinct placements by simulated objective, to see "
                             "whether the measured ranking agrees (Kendall τ).")
        plan, ranking = _what_to_measure(mode)
    if form is not None and plan is not None:
        with ui.guarded("the device mapping"):
            mapping = _device_mapping(plan, form)
    with ui.guarded("the benchmark run"):
        _run(plan, ranking, mapping, form)
    with ui.guarded("the measurements"):
        _measurements()
    st.divider()
    if form is not None:
        with ui.guarded("the calibration"):
            calibview.render(form.source, form.shape, form.spec, form.runner)


def _model_form() -> Form:
    s = state.session()
    g = state.graph()
    base = s.base_graph_key
    known = s.get("network_source") or (BUILTIN_SOURCES.get(base.split(":", 1)[1]) if base.startswith("builtin:")
                                        else None)
    st.markdown(f"##### Measure placements of {ui.esc(s.network_label)}")
    c1, c2, c3 = st.columns([3, 2, 1])
    source = c1.text_input("PyTorch model", known[0] if known else "", key=ui.persist("bench_source"),
                           placeholder="torchvision:NAME or path/to/file.py:NAME",
                           help="The model the network was made from; its ops must have the same names.")
    shape = c2.text_input("Input shape of one sample", known[1] if known else "3, 224, 224",
                          key=ui.persist("bench_shape"))
    batch = c3.number_input("Batch size", 1, 4096, min(int(g.batch_size), 8),
                            key=ui.persist("bench_batch", bounds=(1, 4096)),
                            help="Steps run at this batch; the simulated time is for the same batch.")
    c1, c2, c3, c4 = st.columns(4)
    spec = c1.text_input("Local devices", "cpu:2", key=ui.persist("bench_devices"),
                         help="cpu:2 = two CPU ranks (each on its own cores); cuda:0,cuda:1 = two GPUs; "
                              "cpu,cuda:0 = a CPU and a GPU.")
    runner = c2.selectbox("Runner", RUNNERS, key=ui.persist("bench_runner", RUNNERS),
                          help="ranks: one process per device, tensors cross with torch.distributed (honest on a "
                               "CPU-only machine); inprocess: one process drives every device.")
    steps = c3.number_input("Timed steps", 1, 1000, 5, key=ui.persist("bench_steps", bounds=(1, 1000)))
    warmup = c4.number_input("Warm-up steps (dropped)", 1, 100, 2, key=ui.persist("bench_warmup", bounds=(1, 100)))
    from .torch_import import code_refusal
    refusal = code_refusal(source)
    if refusal:
        st.error(ui.esc(refusal), icon=":material/block:")
        source = ""  # nothing below may run it: the buttons stay disabled
    elif not source:
        st.info("This network was not made from a PyTorch model here: give its source to benchmark it.",
                icon=":material/info:")
    return Form(source, shape, int(batch), spec, runner, int(steps), int(warmup),
                tuple(benchchoice.local_devices(spec)))


def _what_to_measure(mode: str) -> tuple[list, dict | None]:
    """[(label, placement, stored run id or None)] and, for a run's top K, what ranks them."""
    if mode == MODES[0]:
        options, origin = benchchoice.candidates()
        chosen = st.multiselect("Placements", list(options), default=list(options)[:1],
                                key=ui.persist("bench_chosen", list(options)),
                                help="Several placements give a scatter of simulated against measured time.")
        return [(k, options[k], origin.get(k)) for k in chosen], None
    runs = benchchoice.top_runs()
    if not runs:
        st.info("No optimization run of this network and device graph yet: start one on the Optimize page "
                "(every run keeps the 50 best distinct placements it evaluated; MAP-Elites also an archive of diverse "
                "ones).",
                icon=":material/info:")
        return [], None
    c1, c2 = st.columns([3, 1])
    which = c1.selectbox("Run", list(runs), key=ui.persist("bench_top_run", list(runs)),
                         help="A finished run of this session, or a stored run of the same network and devices.")
    k = c2.number_input("K", 1, 50, 5, key=ui.persist("bench_top_k", bounds=(1, 50)),
                        help="How many of its best distinct placements to measure.")
    ranked, note, run_id = benchchoice.top_k(runs[which], int(k))
    if note:
        st.caption(ui.esc(note))
    st.dataframe([{"simulated rank": i, "placement": r.label, "simulated objective (ms)": r.objective * 1e3,
                   "fits in memory": r.feasible} for i, r in enumerate(ranked, start=1)],
                 hide_index=True, key="bench_top_preview",
                 column_config={"simulated objective (ms)": st.column_config.NumberColumn(format="%.4g")})
    return ([(r.label, r.placement, run_id) for r in ranked],
            {"title": f"The {len(ranked)} best of {which}", "objectives": [r.objective for r in ranked]})


def _device_mapping(plan: list, form: Form) -> dict[int, str]:
    """Which local device plays each device the plan runs on (a split op's every device): the user's choice,
    kept, else the default; a warning names devices that share a local device."""
    from placement_core.model.sharding import used_devices

    s = state.session()
    d = state.devices()
    local = [x.name for x in form.local]
    used = used_devices([p for _, p, _ in plan], len(d), state.problem().splits) if plan else []
    st.caption("Each device of the device graph runs on a local device:")
    mapping = {}
    defaults = default_mapping(d.names, used, local) if used else {}
    picked = s.setdefault("bench_map_picked", set())  # devices whose local device the user chose (kept)
    cols = st.columns(max(len(used), 1))
    for k, di in enumerate(used):
        name = d.names[di]
        key = ui.persist(f"bench_map_{name}", local)
        if name not in picked or key not in s:  # follow the default (it changes with the devices used)
            s[key] = defaults[di]
        mapping[di] = cols[k].selectbox(name, local, key=key, on_change=picked.add, args=(name,))
    warning = shared_warning({d.names[di]: loc for di, loc in mapping.items()},
                             {x.name: x.torch for x in form.local}, form.runner)
    if warning:
        st.warning(ui.esc(warning), icon=":material/warning:")
    return mapping


def _run(plan, ranking, mapping, form: Form | None) -> None:
    """The Run button (disabled until the sections above gave a model, a plan and a mapping, and while a
    benchmark runs) and the progress of the running one."""
    s = state.session()
    running = [j for j in benchjob.jobs(s.session_key) if j.status == "running"]
    ready = form is not None and bool(form.source) and bool(plan) and mapping is not None
    if st.button("Run the benchmark", type="primary", icon=":material/play_arrow:", key="bench_run",
                 disabled=not ready or bool(running)):
        _submit(plan, ranking, mapping, form)
        st.rerun()

    @st.fragment(run_every=1.0 if running else None)
    def progress():
        live = [j for j in benchjob.jobs(s.session_key) if j.status == "running"]
        for j in live:
            st.progress(j.done / max(len(j.labels), 1),
                        text=f"Benchmarking {len(j.labels)} placement(s) on {ui.esc(j.devices)} ({j.runner}): "
                             f"{j.done} measured. Starting the workers takes a while (they import PyTorch).")
        if running and not live:
            st.rerun(scope="app")

    progress()


def _measurements() -> None:
    """Finished jobs' measurements, the rankings of measured top-K runs, and the table, statistics and chart."""
    s = state.session()
    benchjob.collect(s.session_key)
    if s.get("bench_error"):
        st.error(ui.esc(s.bench_error), icon=":material/error:")
    for r in reversed(s.get("bench_rankings", [])):
        benchresults.draw_ranking(r)
    points = list(s.get("bench_points", []))
    earlier = benchresults.earlier_points({p["stored_id"] for p in points if p.get("stored_id") is not None})
    if earlier:
        if st.toggle(f"Include {len(earlier)} earlier measurement(s) of this network from the run store",
                     key=ui.persist("bench_earlier"), help="Measurements from other sessions and earlier days (with "
                     "the simulated time recorded then); `placement benchmark` records them too, without a simulated "
                     "time, so those are listed but not plotted."):
            points = earlier + points
    if points:
        benchresults.draw_results(points)


def _submit(plan, ranking, mapping, form: Form) -> None:
    from placement_core.formats.network import network_hash
    from placement_core.torch.benchmark import BenchmarkSettings

    from .torch_import import parse_sample_shape

    s = state.session()
    g, d = state.graph(), state.devices()
    batch, spec, runner = form.batch, form.spec, form.runner
    sample = parse_sample_shape(form.shape)
    # measured op times (a calibration of this network) are scaled linearly to the benchmark's batch
    from placement_core.model.sharding import gene_entry
    table = state.problem().splits  # the session's split table: a split op runs on the ranks runner
    sim_problem = Problem(g.with_batch_size(batch), d, settings=SimSettings(), penalty=s.sim.penalty,
                          splits=table, **state.cost_kw(g, s.sim))
    labels = [label for label, _, _ in plan]
    sims = [float(sim_problem.simulate(p).result.batch_time) for _, p, _ in plan]
    intervals, indistinct = simulated_intervals(sim_problem, [p for _, p, _ in plan], labels, sims)
    local_names = [mapping.get(j, name) for j, name in enumerate(d.names)]
    assignments = [{op.name: gene_entry(int(p[i]), local_names, table) for i, op in enumerate(g.ops)}
                   for _, p, _ in plan]
    job = benchjob.BenchJob(labels, sims, assignments, form.source, (1,) + sample, spec, runner, batch,
                            BenchmarkSettings(steps=form.steps, warmup=form.warmup), network_name=g.name,
                            network_hash=network_hash(sim_problem.graph), run_ids=[run_id for _, _, run_id in plan],
                            ranking=ranking, intervals=intervals, indistinct=indistinct)
    benchjob.submit(s.session_key, job)


def simulated_intervals(problem, placements, labels, sims) -> tuple[list | None, list]:
    """Each placement's 90 % interval of its simulated time from the calibration's spread (None where the op
    times carry none, or where a placement overflows memory and its objective is not its time), and the pairs
    of placements whose paired difference is within the draws' spread."""
    from placement_core.analysis import uncertainty
    if not placements or not uncertainty.has_spread(problem):
        return None, []
    sp = uncertainty.spread(problem, np.array(placements))
    intervals = [(float(a), float(b)) if np.isclose(o, t) else None
                 for a, b, o, t in zip(sp.low, sp.high, sp.point, sims)]
    same = sp.same
    indistinct = [(labels[i], labels[j]) for i in range(len(labels)) for j in range(i + 1, len(labels))
                  if same[i, j] and labels[i] != labels[j]]
    return intervals, indistinct
