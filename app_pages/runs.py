"""Runs: every stored optimization run; reopen, resume, export or delete one."""

import time

import streamlit as st

from dashboard import runs_table, server_runs, settings, state, stored, ui
from dashboard.charts import curves as curve_charts
from dashboard.background_runs import REGISTRY, RunSpec
from placement_core import InputError
from placement_core.analysis import fmt_bytes, fmt_seconds
from placement_core.analysis.exports import RUN_EXPORTS, export_run
from placement_core.optimize.seeding import seeding_text

ui.header("Runs", "Every optimization run on this machine, from this dashboard, other sessions and the "
          "`placement` command line, kept in the run store with its history, archive and checkpoints. Reopen "
          "one, resume one that was stopped or interrupted, export or delete it.")
s = state.session()

EXPORT_TITLES = {"placement": "placement (placement/1 JSON)", "torch": "PyTorch device map (JSON)",
                 "snippet": "PyTorch snippet (.py)", "history": "history (CSV)", "archive": "archive",
                 "trace": "trace of the best placement (Chrome JSON)", "benchmarks": "benchmarks (CSV)"}


def _hide_statuses(statuses: list[str]) -> None:
    s.runs_hidden_statuses = [x for x in statuses if x not in s.runs_status]


run_id = None
with ui.guarded("the run store"), stored.open_store() as store:
    records, damaged = store.runs_checked()
    st.caption(f"Store: `{store.path}` (set `PLACEMENT_HOME` to use another folder).")
    if damaged:  # one bad row or page costs only its runs: say which, and how to salvage the rest
        st.warning(f"{len(damaged)} stored run(s) cannot be read and are not listed: "
                   + ", ".join(f"run {d.run_id} ({ui.esc(d.why)})" for d in damaged[:10])
                   + (f" and {len(damaged) - 10} more" if len(damaged) > 10 else "")
                   + ". `placement runs doctor` checks the store and copies every readable run into a new file "
                     "beside it; `placement runs delete ID` removes one damaged run.", icon=":material/warning:")
    if not records:
        st.info("No stored runs yet. Start one on the Optimize page, or with `placement optimize` on the command "
                "line; both record it here.", icon=":material/info:")
        st.page_link("app_pages/optimize.py", label="Go to Optimize", icon=":material/rocket_launch:")
        st.stop()
    statuses = sorted({r.display_status for r in records})
    # Kept across pages as the statuses the user hid, so a status that appears later (a run finished) shows.
    s.runs_status = [x for x in statuses if x not in s.get("runs_hidden_statuses", ())]
    shown = st.multiselect("Status", statuses, key="runs_status", on_change=_hide_statuses, args=(statuses,))
    records = [r for r in records if r.display_status in shown]
    sizes = store.archive_sizes()
    table = runs_table.rows(records, sizes)
    grouped = st.toggle("Group by configuration", key=ui.persist("runs_grouped"),
                        help="One row per configuration (algorithm and parameters, network, devices, simulator "
                             "settings, budget, initial mappings): repeats with other seeds together, with the "
                             "best, mean and worst of their best objectives.")
    ms = st.column_config.NumberColumn(format="%.4g")
    if grouped:
        st.dataframe(runs_table.groups(table), hide_index=True, key="runs_groups", placeholder="",
                     column_config={k: ms for k in ("best objective (ms)", "mean best (ms)", "worst best (ms)",
                                                    "evaluations/s", "wall time (s)")})
    st.dataframe(table, hide_index=True, key="runs_table", placeholder="",
                 column_config={"best objective (ms)": st.column_config.NumberColumn(
                     format="%.4g", help="time per batch, plus the memory penalty if the best placement "
                                         "exceeds a device's memory"),
                     "evaluations/s": st.column_config.NumberColumn(format="%.0f"),
                     "wall time (s)": st.column_config.NumberColumn(format="%.1f"),
                     "elites": st.column_config.NumberColumn(help="archive size (MAP-Elites runs only)")})
    if not records:
        st.stop()

    by_id = {r.id: r for r in records}
    run_id = st.selectbox("Run", list(by_id), key=ui.persist("runs_pick", list(by_id)),
                          format_func=lambda i: stored.describe(by_id[i]))
if run_id is None:  # the store could not be read (the guard said why) or holds no run shown
    st.stop()

with ui.guarded("the run"), stored.open_store() as store:
    rec = store.get(run_id)
    status = rec.display_status
    with st.container(border=True):
        st.markdown(f"**{stored.run_name(rec)}** · {ui.esc(rec.network_name)} on {ui.esc(rec.devices_name)} · "
                    f"{status}" + (f" · {ui.esc(rec.label)}" if rec.label else ""))
        m = st.columns(4)
        m[0].metric("Status", status)
        budget = f" of {rec.budget_evaluations:,}" if rec.budget_evaluations else ""
        m[1].metric("Evaluations", f"{rec.evaluations:,}", help=f"{rec.evaluations:,}{budget}")
        plans = rec.algorithm == "plan-archive"  # MAP-Elites over cluster plans: its best is a plan's step time
        m[2].metric("Best step" if plans else "Best objective",
                    "–" if rec.best_objective is None else fmt_seconds(rec.best_objective),
                    help="the fastest stored plan's step time" if plans else "seconds per batch plus the memory "
                                                                           "penalty")
        m[3].metric("Wall time", "–" if rec.wall_s is None else fmt_seconds(rec.wall_s))
        spec = rec.problem
        if plans:
            how = (f"plans of {ui.esc(rec.network_name)} on {ui.esc(spec.get('devices_spec'))}, global batch "
                   f"{(spec.get('request') or {}).get('global_batch')}; browse them on the Archive page")
        else:
            how = (f"{spec['batches']} batch(es), {spec['in_flight']} in flight" if spec["schedule"] == "thesis"
                   else f"{spec['schedule']}, {spec['micro_batches']} micro-batches")
            how += f", {spec['profile']} costs, {spec['penalty']} penalty"
        st.caption(f"{'Plan archive' if plans else 'Simulator'}: {how} · seed {rec.seed} · "
                   "parameters: " + (ui.esc(", ".join(f"{k} {v}" for k, v in rec.params.items())) or "none")
                   + f" · started {time.strftime('%Y-%m-%d %H:%M', time.localtime(rec.created))} on "
                   f"{ui.esc(rec.host)}")
        if rec.seeding:
            st.caption(f"{ui.esc(seeding_text(rec.seeding, best=True, sentence=True))} (the first placements it evaluated).")
        if rec.error:
            st.error(f"The run failed: {ui.esc(rec.error)}", icon=":material/error:")
        if status == "interrupted":
            st.warning("Its process ended without finishing (killed or crashed). Resume continues from its last "
                       "checkpoint.", icon=":material/warning:")
        history = store.history(rec.id)
        training = rec.algorithm.startswith("train-")
        if training:
            st.caption("A policy training (Learned policies page, or `placement train-policy`): its history is the "
                       "reward curve, each graph's objective divided by its best single device, and its best "
                       f"placement the best training found for {ui.esc(rec.network_name)}, its first training "
                       "graph.")
        if len(history):
            st.plotly_chart(curve_charts.history_figure(history, stored.run_name(rec), ratio=training),
                            key="runs_history", config={"displaylogo": False})

        has_best = rec.best_placement is not None
        live_run = server_runs.live_run_of(rec.id)  # computed by this server (any tab, before a reload)
        live = [live_run] if live_run is not None else []
        b = st.columns(5)
        if b[0].button("Use its best placement", type="primary", key="runs_use", disabled=not has_best):
            adopted = stored.adopt(store, rec, rec.best_placement, f"best of {stored.run_name(rec)}")
            s.runs_note = adopted.note or f"The best placement of {stored.run_name(rec)} is now current."
            st.rerun()
        if b[1].button("Show its trace", key="runs_trace", disabled=not has_best):
            stored.adopt(store, rec, rec.best_placement, f"best of {stored.run_name(rec)}")
            st.switch_page("app_pages/trace.py")
        if b[2].button("Open its archive", key="runs_archive",
                       disabled=rec.id not in store.archive_sizes() and not plans):
            s.arch_run = f"stored:{rec.id}"
            st.switch_page("app_pages/archive.py")
        resumable = status in stored.RESUMABLE and not live and not training
        if b[3].button("Resume", key="runs_resume", disabled=not resumable, icon=":material/play_arrow:",
                       help="Continue from the last checkpoint in the background, in this process and serially, "
                            "so it ends exactly where an uninterrupted run with the same seed would."):
            problem = stored.stored_problem(store, rec.id)
            net_hash, dev_hash = store.input_hashes(rec.id)
            same = stored.same_setup(store, rec)
            g, d = problem.graph, problem.devices
            base = state.session().base_graph_key if same else f"stored:{net_hash[:12]}"
            run_spec = RunSpec(
                algorithm=rec.algorithm, title=stored.title(rec.algorithm), params=rec.params,
                evaluations=rec.budget_evaluations, seconds=rec.budget_seconds, seed=rec.seed, workers=1,
                graph=g, graph_key=state.graph_key() if same else f"{base}@{g.batch_size}",
                network_label=s.network_label if same else g.name, devices=d,
                devices_key=state.devices_key() if same else f"stored:{dev_hash[:12]}",
                devices_label=s.devices_label if same else d.name, sim=stored.sim_of(rec.problem),
                resume_id=rec.id)
            REGISTRY.start(s.session_key, run_spec, problem)
            st.switch_page("app_pages/optimize.py")
        if live_run is not None:
            stopping = live_run.stop_event.is_set()
            if b[4].button("Stopping…" if stopping else "Stop", key="runs_stop", icon=":material/stop:",
                           disabled=stopping, help="Stop it after the current batch; it is checkpointed and "
                                                   "stored as stopped, so Resume continues it."):
                live_run.stop()
                st.rerun()
            st.caption(f"Running in this dashboard ({ui.esc(live_run.name)}): {live_run.evaluations:,} evaluations "
                       "so far; the Optimize page shows its progress.")
        elif status == "running":
            st.caption(f"Running in process {rec.pid} on {ui.esc(rec.host)}; it can be resumed once it stops.")

        c1, c2, c3 = st.columns([2, 1, 1])
        kinds = [k for k in RUN_EXPORTS if k != "archive" or rec.id in store.archive_sizes()]
        what = c1.selectbox("Export", kinds, key=ui.persist("runs_export", kinds), format_func=EXPORT_TITLES.get)
        fmt = c2.selectbox("Format", RUN_EXPORTS[what], key=ui.persist(f"runs_export_fmt_{what}", RUN_EXPORTS[what]))
        try:
            exported = export_run(store, rec.id, what, fmt)
        except InputError as e:  # say why this export is not available, keep the page
            c3.caption(ui.esc(e))
        else:
            c3.download_button("Download", exported.data, file_name=exported.filename, mime=exported.mime,
                               icon=":material/download:", on_click="ignore", key="runs_download")

        with st.expander("Delete this run"):
            sure = st.checkbox(f"Delete {stored.run_name(rec)} with its history, archive and checkpoint",
                               key=f"runs_sure_{rec.id}")
            if st.button("Delete", key="runs_delete", disabled=not sure or status == "running"):
                store.delete(rec.id)
                s.runs_note = f"Deleted {stored.run_name(rec)}."
                s.pop("runs_pick", None)
                st.rerun()
    if s.get("runs_note"):
        st.success(s.pop("runs_note"), icon=":material/check_circle:")


def short_name(i: int) -> str:
    return f"{stored.run_name(by_id[i])} · {by_id[i].network_name}"


ids = list(by_id)
# a training's curve is a ratio, not seconds: it is drawn with its run above, not overlaid on optimizations
searches = [i for i in ids if not by_id[i].algorithm.startswith("train-") and by_id[i].algorithm != "plan-archive"]
with ui.guarded("the comparison of runs"), stored.open_store() as store:
    st.subheader("Compare runs")
    chosen = st.multiselect("Runs on the chart", searches, default=[run_id] if run_id in searches else [],
                            key=ui.persist("runs_overlay", searches),
                            format_func=short_name, help="The best objective each run had found after every "
                            "number of evaluations, from the run store.")
    c1, c2 = st.columns(2)
    log_x = c1.checkbox("Log scale for evaluations", key=ui.persist("runs_log_x"),
                        help="Shows the early part of long runs, where most of the improvement happens.")
    log_y = c2.checkbox("Log scale for the objective", key=ui.persist("runs_log_y"),
                        help="For curves that start far above where they end: placements that exceed memory "
                             "carry a penalty (the 'infeasible' penalty adds 10⁶ s).")
    curves = [stored.run_curve(store, by_id[i]) for i in chosen]
    drawn = [(c.name, c.history) for c in curves if len(c.history)]
    if drawn:
        st.plotly_chart(curve_charts.runs_overlay_figure(drawn, log_x=log_x, log_y=log_y), key="runs_overlay_chart",
                        config={"displaylogo": False})
    notes = []
    for c in curves:
        if not len(c.history):
            notes.append(f"{c.name}: no history yet.")
        elif c.best_overflow_bytes:
            notes.append(f"{c.name}: its best placement exceeds memory by {fmt_bytes(c.best_overflow_bytes)}, so "
                         f"its curve ends at time plus penalty ({settings.PENALTIES.get(c.penalty, c.penalty)}).")
    if curves:
        st.caption("The objective is the simulated time per batch, plus a memory penalty for a placement that "
                   "exceeds a device's memory, so early points can be penalised. " + " ".join(ui.esc(n) for n in notes))

    st.subheader("Settings of two runs")
    c1, c2 = st.columns(2)
    a = c1.selectbox("Run A", ids, index=ids.index(run_id), key=ui.persist("runs_diff_a", ids), format_func=short_name)
    other = next((i for i in ids if i != a), a)
    b = c2.selectbox("Run B", ids, index=ids.index(other), key=ui.persist("runs_diff_b", ids), format_func=short_name)
    if len(ids) < 2:
        st.info("Only one run is listed: start another (or show more statuses above) to compare settings.",
                icon=":material/info:")
    elif a == b:
        st.info("Choose two different runs to compare their settings.", icon=":material/info:")
    else:
        diff = stored.settings_diff(stored.stored_settings(store, by_id[a]), stored.stored_settings(store, by_id[b]))
        if not diff:
            st.success(f"Identical settings: run {a} and run {b} were made with the same network, devices, "
                       "algorithm, parameters, budget, seed and simulator settings.", icon=":material/check_circle:")
        else:
            st.dataframe([{"setting": k, f"A: run {a}": va, f"B: run {b}": vb} for k, va, vb in diff],
                         hide_index=True, height="content", key="runs_diff_table")
            st.caption(f"{len(diff)} setting(s) differ; every other setting is the same.")
