"""The Benchmark page: measure placements for real with ``placement_core.torch.benchmark``.

torch is imported only by the benchmark itself, in a background thread (and
its worker processes) once the user presses Run; drawing the page imports no
torch. Jobs live in a process-level registry keyed by session, like
optimization runs, so a benchmark keeps going while the user looks elsewhere.
"""

from __future__ import annotations

import importlib.util
import itertools
import threading
import traceback
from dataclasses import dataclass, field

import numpy as np
import streamlit as st

from placement_core import InputError, Problem, SimSettings
from placement_core.analysis import correlation_stats, fmt_seconds, kendall_tau
from placement_core.analysis.benchmark_plan import default_mapping, distinct_top, shared_warning

from . import calibview, state, ui
from .charts import agreement
from .jobs import JobBoard
from .background_runs import REGISTRY

# Built-in networks were generated from these torchvision models (scripts/make_builtin_networks.py),
# so their op names match what the benchmark traces.
BUILTIN_SOURCES = {
    "alexnet": ("torchvision:alexnet", "3, 224, 224"),
    "vgg16": ("torchvision:vgg16", "3, 224, 224"),
    "resnet50": ("torchvision:resnet50", "3, 224, 224"),
    "inception_v3": ("torchvision:inception_v3(aux_logits=False, init_weights=False)", "3, 299, 299"),
}
_ids = itertools.count(1)
MODES = ["Chosen placements", "The K best placements of a run"]
AXES = {"independent": "independent axes", "log-log": "log-log", "equal": "equal axes (y = x diagonal)"}
RUNNERS = ["ranks", "inprocess"]


def benchmark_backend():
    """``placement_core.torch.benchmark`` when it and torch are installed, else None (no torch import)."""
    if importlib.util.find_spec("torch") is None:
        return None
    try:
        if importlib.util.find_spec("placement_core.torch.benchmark") is None:
            return None
    except (ImportError, ValueError):
        return None
    import placement_core.torch.benchmark as bench
    return bench if hasattr(bench, "benchmark") else None


def run_benchmark(source, shape, placements, devices, runner, batch_size, settings, progress):
    """The real thing (tests replace this to check the page without running PyTorch)."""
    bench = benchmark_backend()
    return bench.benchmark(source, shape, placements, devices, runner=runner, batch_size=batch_size,
                           settings=settings, progress=progress)


@dataclass
class BenchJob:
    labels: list[str]
    simulated: list[float]
    assignments: list[dict]
    source: str
    shape: tuple
    devices: str
    runner: str
    batch_size: int
    settings: object
    network_name: str = ""
    network_hash: str | None = None  # content of the network at the benchmark's batch size
    run_ids: list = field(default_factory=list)  # the stored run each placement came from, or None
    stored_ids: list = field(default_factory=list)  # the measurements' ids in the run store
    store_note: str | None = None
    ranking: dict | None = None  # a run's top K: {"title", "objectives"} (the run's own simulated objectives)
    id: int = field(default_factory=lambda: next(_ids))
    status: str = "running"
    done: int = 0
    results: list = field(default_factory=list)
    error: str | None = None
    collected: bool = False
    thread: threading.Thread | None = None

    @property
    def active(self) -> bool:
        return self.status == "running"

    def stop(self) -> None:
        """Benchmarks run to their end: their worker processes have their own timeouts."""

    def work(self) -> None:
        try:
            self.results = run_benchmark(self.source, self.shape, self.assignments, self.devices, self.runner,
                                         self.batch_size, self.settings, self._progress)
            self._record()
            self.status = "done"
        except InputError as e:
            self.error, self.status = str(e), "failed"
        except Exception as e:  # report, never crash the page
            traceback.print_exc()
            self.error, self.status = f"the benchmark failed ({type(e).__name__}: {e})", "failed"

    def _progress(self, done: int, total: int) -> None:
        self.done = done

    def _record(self) -> None:
        """Keep every measurement in the run store (the scatter of earlier measurements reads it back)."""
        from placement_core.store import RunStore
        try:
            with RunStore() as store:
                run_ids = self.run_ids or [None] * len(self.labels)
                self.stored_ids = [
                    store.add_benchmark(network_name=self.network_name, devices_spec=self.devices, runner=self.runner,
                                        placement=a, simulated_s=sim, measured_median_s=r.median_step_s,
                                        result=r.to_dict(), run_id=run_id, label=label,
                                        network_hash=self.network_hash, batch_size=self.batch_size)
                    for label, sim, a, r, run_id in zip(self.labels, self.simulated, self.assignments, self.results,
                                                        run_ids)]
        except InputError as e:
            self.store_note = f"The measurements were not stored: {e}"


BOARD: JobBoard[BenchJob] = JobBoard("benchmark")


def jobs(session: str) -> list[BenchJob]:
    return BOARD.jobs(session)


def submit(session: str, job: BenchJob) -> None:
    job.thread = threading.Thread(target=job.work, name=f"placement-bench-{job.id}", daemon=True)
    BOARD.add(session, job)
    job.thread.start()


def collect(session: str) -> None:
    """Move finished jobs' measurements into the session's list of benchmarked placements."""
    s = state.ss()
    points = s.setdefault("bench_points", [])
    for job in jobs(session):
        if job.status == "running" or job.collected:
            continue
        job.collected = True
        if job.error:
            s.bench_error = job.error
            continue
        if job.store_note:
            s.bench_error = job.store_note
        ids = job.stored_ids or [None] * len(job.labels)
        if job.ranking is not None:
            s.setdefault("bench_rankings", []).append(ranking_of(job))
        for label, sim, r, stored_id in zip(job.labels, job.simulated, job.results, ids):
            q = r.quartiles_s
            points.append({"placement": label, "status": r.status, "simulated_s": sim,
                           "measured_s": r.median_step_s, "iqr_s": None if q is None else q[1] - q[0],
                           "devices": job.devices, "runner": job.runner, "batch": job.batch_size,
                           "message": r.message, "stored_id": stored_id})


def ranking_of(job: BenchJob) -> dict:
    """A measured top K: simulated rank (the run's objective) beside measured rank, and Kendall τ of the two."""
    objectives = job.ranking["objectives"]
    ok = [i for i, r in enumerate(job.results) if r.status == "ok" and r.median_step_s is not None]
    order = sorted(ok, key=lambda i: job.results[i].median_step_s)
    rows = [{"simulated rank": i + 1, "placement": label, "simulated objective (ms)": objectives[i] * 1e3,
             "measured median (ms)": None if r.median_step_s is None else r.median_step_s * 1e3,
             "measured rank": order.index(i) + 1 if i in order else None, "status": r.status}
            for i, (label, r) in enumerate(zip(job.labels, job.results))]
    tau = kendall_tau([objectives[i] for i in ok], [job.results[i].median_step_s for i in ok])
    return {"title": job.ranking["title"], "rows": rows, "tau": tau, "n": len(ok), "devices": job.devices,
            "runner": job.runner, "batch": job.batch_size}


def local_devices(spec: str) -> list:
    from placement_core.torch.devspec import parse_devices
    return parse_devices(spec)


def local_device_names(spec: str) -> list[str]:
    return [d.name for d in local_devices(spec)]


def candidates() -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Placements that can be benchmarked on the current network and devices, and the stored run of each."""
    from . import stored

    s = state.ss()
    out = {f"current: {s.placement_label}": state.current_placement()}
    origin: dict[str, int] = {}
    live = REGISTRY.runs(s.session_key)
    for r in live:
        if r.result is not None and r.spec.graph_key == state.graph_key() and r.spec.devices_key == state.devices_key():
            out[f"best of {r.name}"] = r.result.best_placement
            if r.store_id is not None:
                origin[f"best of {r.name}"] = r.store_id
            if r.result.archive is not None:
                for k, e in enumerate(r.result.archive.ranked()[1:5], start=2):
                    out[f"elite #{k} of {r.name}"] = e.placement
    seen = {r.store_id for r in live}
    try:
        with stored.open_store() as store:
            for rec in store.runs(limit=200):
                if rec.best_placement is not None and rec.id not in seen and stored.same_setup(store, rec):
                    key = f"best of {stored.run_name(rec)} (stored)"
                    out[key], origin[key] = rec.best_placement, rec.id
    except InputError:
        pass  # an unreadable store only hides stored runs here; the Runs page says what is wrong
    g, d = state.graph(), state.devices()
    for i, name in enumerate(d.names):
        out[f"all on {name}"] = np.full(len(g), i, dtype=np.int32)
    return out, origin


def top_runs() -> dict[str, tuple]:
    """Runs of the current network and devices whose best placements can be measured: label -> ("live", Run)
    for this session's finished runs, ("stored", RunRecord) for the run store's (another session, the CLI)."""
    from . import stored

    s = state.ss()
    out: dict[str, tuple] = {}
    live = [r for r in REGISTRY.runs(s.session_key) if r.result is not None and r.spec.graph_key == state.graph_key()
            and r.spec.devices_key == state.devices_key()]
    for r in live:
        out[r.name] = ("live", r)
    seen = {r.store_id for r in live}
    try:
        with stored.open_store() as store:
            for rec in store.runs(limit=200):
                if rec.best_placement is not None and rec.id not in seen and stored.same_setup(store, rec):
                    out[f"{stored.run_name(rec)} (stored, {rec.display_status})"] = ("stored", rec)
    except InputError:
        pass  # an unreadable store only hides stored runs here; the Runs page says what is wrong
    return out


def top_k(source: tuple, k: int) -> tuple[list, str, int | None]:
    """The K best distinct placements of a run (ranked by its own simulated objective), a note when it keeps
    fewer, and its id in the run store. Cached per run version and K."""
    from placement_core.analysis.benchmark_plan import top_of_run

    from . import stored

    kind, run = source
    s = state.ss()
    key = (kind, run.id, getattr(run, "updated", None), int(k))
    cache = s.setdefault("bench_top_cache", {})
    if key not in cache:
        if kind == "live":
            cands = [(f"best of {run.name}", run.result.best_placement)]
            cands += [(f"#{i} evaluated by {run.name}", x) for i, (_, x) in enumerate(run.result.kept, start=1)]
            if run.result.archive is not None:
                cands += [(f"elite #{i} of {run.name}", e.placement)
                          for i, e in enumerate(run.result.archive.ranked(), start=1)]
            ranked = distinct_top(run.problem, cands, int(k))
            note = "" if len(ranked) == k else (f"{run.name} keeps {len(ranked)} distinct placement(s): a run "
                                                "keeps the 50 best distinct placements it evaluated, a "
                                                "deterministic placer proposes only a few.")
            cache[key] = (ranked, note, run.store_id)
        else:
            with stored.open_store() as store:
                _, ranked, note = top_of_run(store, run.id, int(k))
            cache[key] = (ranked, note[0].upper() + note[1:] if note else "", run.id)
        while len(cache) > 8:
            cache.pop(next(iter(cache)))
    return cache[key]


def _follow_network() -> None:
    """The model source, sample shape and batch follow the network: typed for one, they do not carry over."""
    s = state.ss()
    if s.get("bench_for") != s.base_graph_key:
        for key in ("bench_source", "bench_shape", "bench_batch"):
            s.pop(key, None)
        s.bench_for = s.base_graph_key


def render() -> None:
    bench = benchmark_backend()
    if bench is None:
        st.warning("Real benchmarking is not available here: PyTorch or `placement_core.torch.benchmark` is not "
                   "installed (`.venv/bin/pip install -e \".[torch]\"`). The other pages work without it.",
                   icon=":material/construction:")
        return
    s = state.ss()
    g, d = state.graph(), state.devices()
    _follow_network()
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
    locals_ = local_devices(spec)
    local = [x.name for x in locals_]
    mode = st.radio("What to measure", MODES, horizontal=True, key=ui.persist("bench_mode", MODES),
                    help="Chosen placements: any of the current one, run results, elites, single devices. The K "
                         "best of a run: its K best distinct placements by simulated objective, to see whether "
                         "the measured ranking agrees (Kendall τ).")
    plan, ranking = _what_to_measure(mode)
    from placement_core.model.sharding import used_devices
    # the devices the plan runs on (a split op's every device)
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
    warning = shared_warning({d.names[di]: loc for di, loc in mapping.items()}, {x.name: x.torch for x in locals_},
                             runner)
    if warning:
        st.warning(ui.esc(warning), icon=":material/warning:")
    running = [j for j in jobs(s.session_key) if j.status == "running"]
    if st.button("Run the benchmark", type="primary", icon=":material/play_arrow:", key="bench_run",
                 disabled=not (source and plan) or bool(running)):
        _submit(plan, ranking, mapping, source, shape, int(batch), spec, runner, int(steps), int(warmup))
        st.rerun()

    @st.fragment(run_every=1.0 if running else None)
    def progress():
        live = [j for j in jobs(s.session_key) if j.status == "running"]
        for j in live:
            st.progress(j.done / max(len(j.labels), 1),
                        text=f"Benchmarking {len(j.labels)} placement(s) on {ui.esc(j.devices)} ({j.runner}): "
                             f"{j.done} measured. Starting the workers takes a while (they import PyTorch).")
        if running and not live:
            st.rerun(scope="app")

    progress()
    collect(s.session_key)
    if s.get("bench_error"):
        st.error(ui.esc(s.bench_error), icon=":material/error:")
    for r in reversed(s.get("bench_rankings", [])):
        draw_ranking(r)
    points = list(s.get("bench_points", []))
    earlier = earlier_points({p["stored_id"] for p in points if p.get("stored_id") is not None})
    if earlier:
        if st.toggle(f"Include {len(earlier)} earlier measurement(s) of this network from the run store",
                     key=ui.persist("bench_earlier"), help="Measurements from other sessions and earlier days (with "
                     "the simulated time recorded then); `placement benchmark` records them too, without a simulated "
                     "time, so those are listed but not plotted."):
            points = earlier + points
    if points:
        draw_results(points)
    st.divider()
    calibview.render(source, shape, spec, runner)


def _what_to_measure(mode: str) -> tuple[list, dict | None]:
    """[(label, placement, stored run id or None)] and, for a run's top K, what ranks them."""
    if mode == MODES[0]:
        options, origin = candidates()
        chosen = st.multiselect("Placements", list(options), default=list(options)[:1],
                                key=ui.persist("bench_chosen", list(options)),
                                help="Several placements give a scatter of simulated against measured time.")
        return [(k, options[k], origin.get(k)) for k in chosen], None
    runs = top_runs()
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
    ranked, note, run_id = top_k(runs[which], int(k))
    if note:
        st.caption(ui.esc(note))
    st.dataframe([{"simulated rank": i, "placement": r.label, "simulated objective (ms)": r.objective * 1e3,
                   "fits in memory": r.feasible} for i, r in enumerate(ranked, start=1)],
                 hide_index=True, key="bench_top_preview",
                 column_config={"simulated objective (ms)": st.column_config.NumberColumn(format="%.4g")})
    return ([(r.label, r.placement, run_id) for r in ranked],
            {"title": f"The {len(ranked)} best of {which}", "objectives": [r.objective for r in ranked]})


def _submit(plan, ranking, mapping, source, shape, batch, spec, runner, steps, warmup) -> None:
    from placement_core.formats.network import network_hash
    from placement_core.torch.benchmark import BenchmarkSettings

    from .torch_import import parse_sample_shape

    s = state.ss()
    g, d = state.graph(), state.devices()
    sample = parse_sample_shape(shape)
    # measured op times (a calibration of this network) are scaled linearly to the benchmark's batch
    from placement_core.model.sharding import gene_entry
    table = state.problem().splits  # the session's split table: a split op runs on the ranks runner
    sim_problem = Problem(g.with_batch_size(batch), d, settings=SimSettings(), penalty=s.sim["penalty"],
                          splits=table, **state.cost_kw(g, s.sim))
    labels = [label for label, _, _ in plan]
    sims = [float(sim_problem.simulate(p).result.batch_time) for _, p, _ in plan]
    local_names = [mapping.get(j, name) for j, name in enumerate(d.names)]
    assignments = [{op.name: gene_entry(int(p[i]), local_names, table) for i, op in enumerate(g.ops)}
                   for _, p, _ in plan]
    submit(s.session_key, BenchJob(labels, sims, assignments, source, (1,) + sample, spec, runner, batch,
                                   BenchmarkSettings(steps=steps, warmup=warmup), network_name=g.name,
                                   network_hash=network_hash(sim_problem.graph),
                                   run_ids=[run_id for _, _, run_id in plan], ranking=ranking))


def draw_ranking(r: dict) -> None:
    st.markdown(f"##### {ui.esc(r['title'])}: simulated and measured ranking")
    st.dataframe(r["rows"], hide_index=True,
                 column_config={k: st.column_config.NumberColumn(format="%.4g")
                                for k in ("simulated objective (ms)", "measured median (ms)")})
    tau = r["tau"]
    st.caption(f"Kendall τ of the simulated and the measured ranking over {r['n']} measured placement(s): "
               + ("– (fewer than two measured, or all tied)" if np.isnan(tau) else f"**{tau:.3f}**")
               + f" (1: the same order; 0: unrelated). Measured on {ui.esc(r['devices'])} with the {r['runner']} "
               f"runner at batch {r['batch']}; stored with the run.")


def earlier_points(exclude: set[int]) -> list[dict]:
    """Stored measurements of the current network (same content, at any batch size) not in ``exclude``."""
    from placement_core.formats.network import network_hash

    from . import stored

    g = state.graph()
    try:
        with stored.open_store() as store:
            rows = [b for b in store.benchmarks(network_name=g.name) if b["id"] not in exclude]
    except InputError:
        return []
    hashes = {}
    out = []
    for b in rows:
        batch = b.get("batch_size")
        if batch is None or b.get("network_hash") is None:
            continue
        if batch not in hashes:
            hashes[batch] = network_hash(g.with_batch_size(int(batch)))
        if hashes[batch] != b["network_hash"]:
            continue
        r = b["result"]
        out.append({"placement": f"{b['label'] or 'placement'} (stored #{b['id']})", "status": r.get("status", "ok"),
                    "simulated_s": b["simulated_s"], "measured_s": b["measured_median_s"],
                    "iqr_s": r.get("iqr_s"), "devices": b["devices_spec"], "runner": b["runner"],
                    "batch": batch, "message": r.get("message") or "", "stored_id": b["id"]})
    return out


def points_csv(points: list[dict]) -> bytes:
    """The benchmarked placements the page shows, as CSV (times in seconds, as the run store keeps them)."""
    from placement_core.analysis.exports import rows_to_csv

    return rows_to_csv([{"placement": p["placement"], "status": p["status"], "simulated_s": p["simulated_s"],
                         "measured_median_s": p["measured_s"], "iqr_s": p["iqr_s"], "devices": p["devices"],
                         "runner": p["runner"], "batch_size": p["batch"], "stored_benchmark": p.get("stored_id"),
                         "note": p["message"]} for p in points]).encode()


def draw_results(points: list[dict]) -> None:
    s = state.ss()
    st.markdown("##### Measured against simulated")
    st.dataframe([{"placement": p["placement"], "status": p["status"],
                   "simulated (ms)": None if p["simulated_s"] is None else p["simulated_s"] * 1e3,
                   "measured median (ms)": None if p["measured_s"] is None else p["measured_s"] * 1e3,
                   "spread, IQR (ms)": None if p["iqr_s"] is None else p["iqr_s"] * 1e3,
                   "devices": p["devices"], "batch": p["batch"], "note": p["message"]} for p in points],
                 hide_index=True, key="bench_table",
                 column_config={k: st.column_config.NumberColumn(format="%.4g")
                                for k in ("simulated (ms)", "measured median (ms)", "spread, IQR (ms)")})
    st.download_button("Download as CSV", points_csv(points), file_name=f"benchmarks-{state.graph().name}.csv",
                       mime="text/csv", key="bench_csv", icon=":material/download:", on_click="ignore",
                       help="The placements above with their simulated and measured times, in seconds.")
    ok = [p for p in points if p["status"] == "ok" and p["measured_s"] is not None and p["simulated_s"] is not None]
    if not ok:
        st.caption("No successful measurement yet.")
        return
    sim = [p["simulated_s"] for p in ok]
    mea = [p["measured_s"] for p in ok]
    stats = correlation_stats(sim, mea)
    from placement_core.analysis.stats import mape  # the E5 experiment's statistic
    m = st.columns(5)
    m[0].metric("Placements measured", stats["n"])
    m[1].metric("Pearson r", "–" if np.isnan(stats["pearson_r"]) else f"{stats['pearson_r']:.3f}",
                help="Linear agreement of simulated and measured time (thesis E5: 0.67–0.94).")
    m[2].metric("Kendall τ", "–" if np.isnan(stats["kendall_tau"]) else f"{stats['kendall_tau']:.3f}",
                help="Agreement of the rankings: what matters when the simulator picks the best placement.")
    m[3].metric("MAPE", f"{mape(sim, mea):.3g} %",
                help="Mean absolute percentage error of simulated against measured time: mean of |sim − measured| "
                     "/ measured. Large unless the device graph is calibrated for this machine.")
    m[4].metric("Measured / simulated", f"{np.median(np.array(mea) / np.array(sim)):.3g}×",
                help="The median ratio of measured to simulated time. Above 1: the machine is slower than the "
                     "device graph says (calibrate it).")
    fit = None if np.isnan(stats["slope"]) else (stats["slope"], stats["intercept"])
    axes = st.radio("Axes", list(AXES), format_func=AXES.get, horizontal=True, key=ui.persist("bench_axes", AXES),
                    help="Independent: each axis spans its own values, so the points spread out even when the "
                         "simulator is off by a large factor (the ranking shows). Log-log: both logarithmic, for "
                         "times that span orders of magnitude. Equal: the same range on both axes, y = x the "
                         "diagonal (points bunch against one axis when the scales differ).")
    st.plotly_chart(agreement.agreement_figure(sim, mea, [p["placement"] for p in ok], fit, axes=axes),
                    key="bench_scatter", config={"displaylogo": False})
    st.caption("Simulated with the current device graph. For absolute agreement, simulate with a device graph "
               "calibrated on this machine (below); the ranking (Kendall τ) is what optimization relies on. "
               f"Fastest measured: {ui.esc(min(ok, key=lambda p: p['measured_s'])['placement'])} "
               f"({fmt_seconds(min(mea))}).")
    if st.button("Clear the measurements", key="bench_clear"):
        s.bench_points = []
        s.bench_rankings = []
        s.pop("bench_error", None)
        st.rerun()
