"""Runs page and stored runs across the dashboard (AppTest): list, reopen, resume, delete, pickers, sessions,
overlaid curves and the settings diff of two runs."""

import math
import subprocess
import threading

import numpy as np
import pytest
from apptest_util import (assert_clean, dashboard_run, decode, figures, frame, goto, metrics, sidebar_text, start,
                          text, wait_for_runs)

from dashboard import stored
from dashboard.charts.curves import OBJECTIVE_TITLE
from dashboard.background_runs import REGISTRY
from placement_core import Problem, load_devices, load_network
from placement_core.analysis import fmt_bytes, fmt_seconds
from placement_core.optimize import run as optimize
from placement_core.store.recording import start_run
from placement_core.base.jsonio import content_hash
from placement_core.store import RunRecord, RunStore


def runs_page(at=None):
    at = at or start()
    goto(at, "runs")
    assert_clean(at)
    return at


def alexnet_problem():
    return Problem(load_network("alexnet"), load_devices("malvik"))


def stopped_run(problem, algorithm, evaluations, seed, stop_at):
    """A run stored as the CLI would leave it after a stop at ``stop_at`` evaluations."""
    stop = threading.Event()
    with RunStore() as store:
        run_id, partial = start_run(store, problem, algorithm, evaluations=evaluations, seed=seed, checkpoint_every=100,
                                    stop=stop, progress=lambda p: stop.set() if p.evaluations >= stop_at else None)
    assert partial.stopped
    return run_id


@pytest.mark.slow
def test_an_empty_store_says_how_to_fill_it():
    at = runs_page()
    assert "No stored runs yet" in text(at)
    assert "Go to Optimize" in [e.proto.label for e in at.get("page_link")]


@pytest.mark.slow
def test_a_dashboard_run_is_stored_and_reopened():
    at = start()
    run = dashboard_run(at, "ga")
    assert run.store_id is not None
    runs_page(at)
    [row] = at.dataframe[0].value.to_dict("records")
    assert (row["run"], row["status"], row["algorithm"], row["network"], row["evaluations"]) == (
        run.store_id, "done", "Genetic algorithm", "resnet50", 300)
    assert row["best objective (ms)"] == pytest.approx(run.result.best_objective * 1e3)
    m = metrics(at)
    assert m["Status"] == "done" and m["Evaluations"] == "300"
    assert m["Best objective"] == fmt_seconds(run.result.best_objective)
    fig = figures(at)[0]  # the run's own history; the overlay of runs follows
    best = next(t for t in fig["data"] if t["name"] == "best so far")
    assert decode(best["x"]) == run.result.history[:, 0].tolist()
    assert decode(best["y"]) == pytest.approx((run.result.history[:, 1] * 1e3).tolist())
    assert fig["layout"]["yaxis"]["title"]["text"] == "objective (ms per batch)"
    assert "Only one run is listed" in text(at)  # nothing to diff it with
    at.button(key="runs_use").click().run()
    assert_clean(at)
    assert (at.session_state["placement"] == run.result.best_placement).all()
    assert f"best of run {run.store_id} · Genetic algorithm" in sidebar_text(at)
    assert "Download" in [b.proto.label for b in at.get("download_button")]


@pytest.mark.slow
def test_a_command_line_run_brings_its_builtin_network_and_devices():
    problem = alexnet_problem()
    with RunStore() as store:
        run_id, result = start_run(store, problem, "random", evaluations=200, seed=1)
    at = runs_page()
    at.button(key="runs_use").click().run()
    assert_clean(at)
    s = at.session_state
    # recognised as the built-in network and preset (not a copy), so other pages know where they came from
    assert s["base_graph_key"] == "builtin:alexnet" and s["devices_key"] == "preset:malvik"
    assert (s["placement"] == result.best_placement).all()
    assert "AlexNet" in sidebar_text(at) and "malvik" in sidebar_text(at)
    goto(at, "trace")
    assert_clean(at)
    assert metrics(at)["Objective"] == fmt_seconds(result.best_objective)


@pytest.mark.slow
def test_resume_an_interrupted_run_to_the_uninterrupted_result():
    problem = alexnet_problem()
    full = optimize(problem, "ga", evaluations=2000, seed=5)
    run_id = stopped_run(problem, "ga", 2000, 5, stop_at=700)
    dead = subprocess.Popen(["true"])
    dead.wait()
    with RunStore() as store:  # as if its process had been killed: still "running", pid gone
        store._conn.execute("UPDATE runs SET status='running', pid=? WHERE id=?", (dead.pid, run_id))
    at = runs_page()
    assert metrics(at)["Status"] == "interrupted"
    assert "Its process ended without finishing" in text(at)
    at.button(key="runs_resume").click().run()
    assert_clean(at)
    assert at.title[0].value == "Optimize"
    wait_for_runs(at)
    [resumed] = REGISTRY.runs(at.session_state["session_key"])
    assert resumed.store_id == run_id and resumed.status == "done"
    assert np.array_equal(resumed.result.best_placement, full.best_placement)
    assert np.array_equal(resumed.result.history, full.history)
    with RunStore() as store:
        rec = store.get(run_id)
    assert rec.status == "done" and rec.evaluations == 2000 and rec.best_objective == pytest.approx(full.best_objective)
    runs_page(at)
    assert at.button(key="runs_resume").disabled  # finished runs cannot be resumed


@pytest.mark.slow
def test_delete_needs_a_confirmation():
    problem = alexnet_problem()
    with RunStore() as store:
        first, _ = start_run(store, problem, "random", evaluations=20, seed=1)
        second, _ = start_run(store, problem, "random", evaluations=20, seed=2)
    at = runs_page()
    assert at.selectbox(key="runs_pick").value == second
    assert at.button(key="runs_delete").disabled
    at.checkbox(key=f"runs_sure_{second}").check().run()
    at.button(key="runs_delete").click().run()
    assert_clean(at)
    assert f"Deleted run {second}" in text(at)
    with RunStore() as store:
        assert [r.id for r in store.runs()] == [first]
    assert at.selectbox(key="runs_pick").options == [f"run {first} · Random search · alexnet on malvik · done · "
                                                     f"20 evaluations · best {fmt_seconds(store_best(first))}"]


def store_best(run_id):
    with RunStore() as store:
        return store.get(run_id).best_objective


@pytest.mark.slow
def test_a_stored_archive_opens_on_the_archive_page():
    problem = Problem(load_network("resnet50"), load_devices("malvik-4gpu"))
    with RunStore() as store:
        run_id, result = start_run(store, problem, "map-elites", evaluations=600, seed=3)
    at = runs_page()
    at.button(key="runs_archive").click().run()
    assert_clean(at)
    assert at.title[0].value == "Archive"
    assert at.selectbox(key="arch_run").value == f"stored:{run_id}"
    assert metrics(at)["Elites"] == f"{len(result.archive):,}"
    goto(at, "archive")  # AppTest reruns the page it was told to open: the Archive page, as switched to
    at.radio(key="arch_bins").set_value("all").run()  # every bin (the default groups the 40 into 8 quantiles)
    assert at.selectbox(key="arch_run").value == f"stored:{run_id}"
    heat = figures(at)[0]["data"][0]
    z = np.array([[math.nan if v is None else v for v in row] for row in decode(heat["z"])], dtype=float)
    projected = {(e.niche[0], e.niche[2]) for e in result.archive.elites.values()}
    assert int(np.isfinite(z).sum()) == len(projected)
    best = result.archive.ranked()[0]
    assert z[best.niche[0], best.niche[2]] == pytest.approx(best.objective * 1e3)
    ranked = result.archive.ranked()
    goto(at, "archive")  # AppTest reruns the page it was told to open, not the one the script switched to
    at.selectbox(key=f"arch_pick_stored:{run_id}").set_value(ranked[1].niche).run()
    at.button(key="arch_use").click().run()
    assert_clean(at)
    assert (at.session_state["placement"] == ranked[1].placement).all()
    assert at.session_state["placement_label"] == f"elite #2 of run {run_id} · MAP-Elites"


@pytest.mark.slow
def test_the_trace_page_picks_a_stored_run():
    problem = alexnet_problem()
    with RunStore() as store:
        run_id, result = start_run(store, problem, "hill-climbing", evaluations=300, seed=4)
    at = start()
    goto(at, "trace")
    assert at.selectbox(key="trace_stored").value == run_id
    at.button(key="trace_use_stored").click().run()
    assert_clean(at)
    assert at.session_state["base_graph_key"] == "builtin:alexnet"
    assert metrics(at)["Objective"] == fmt_seconds(result.best_objective)


@pytest.mark.slow
def test_two_sessions_keep_their_own_state_and_share_the_store():
    one, two = start(), start()
    assert one.session_state["session_key"] != two.session_state["session_key"]
    ga = dashboard_run(one, "ga", 200)
    rnd = dashboard_run(two, "random", 200)
    assert [r.spec.algorithm for r in REGISTRY.runs(one.session_state["session_key"])] == ["ga"]
    assert [r.spec.algorithm for r in REGISTRY.runs(two.session_state["session_key"])] == ["random"]
    goto(two, "trace")
    two.number_input(key="trace_seed").set_value(9)
    two.button(key="trace_use_random").click().run()
    one.run()
    assert two.session_state["placement_label"] == "random (seed 9)"
    assert one.session_state["placement_label"] == "all on gpu0"  # untouched by the other session
    for at in (one, two):
        runs_page(at)
        assert sorted(at.dataframe[0].value["run"]) == sorted([ga.store_id, rnd.store_id])



# -- comparing runs: the settings diff on hand-made records ----------------------------------------------

SPEC = {"profile": "default", "comp_efficiency": 0.9, "comm_efficiency": 0.25, "timings": None, "timings_batch": 0,
        "penalty": "thesis", "schedule": "thesis", "micro_batches": 1, "batches": 1, "in_flight": 1,
        "forward_only": False}


def record(**kw) -> RunRecord:
    base = dict(id=1, created=100.0, updated=200.0, status="done", label=None, network_name="resnet50",
                devices_name="malvik-4gpu", problem=dict(SPEC), algorithm="ga",
                params={"population": 50, "mutation_rate": 0.5}, seed=1, budget_evaluations=2000,
                budget_seconds=None, evaluations=2000, best_objective=0.1, best_placement=None, wall_s=1.0,
                extras={}, error=None, host="h", pid=1)
    return RunRecord(**{**base, **kw})


def test_runs_that_differ_only_in_outcome_have_identical_settings():
    a = record()
    b = record(id=2, created=300.0, updated=400.0, status="stopped", label="mine", evaluations=700,
               best_objective=0.2, wall_s=9.0, host="other", pid=2, error="x")
    assert stored.settings_diff(stored.run_settings(a, "n" * 64, "d" * 64, 128),
                                stored.run_settings(b, "n" * 64, "d" * 64, 128)) == []


def test_the_settings_diff_lists_every_differing_setting_with_both_values():
    a = record()
    b = record(id=2, network_name="alexnet", algorithm="map-elites", params={"population": 50, "dimensions": "x,y"},
               seed=7, budget_evaluations=None, budget_seconds=30.0,
               problem={**SPEC, "schedule": "1f1b", "micro_batches": 8, "penalty": "placeto",
                        "timings": {"conv1": {"gpu": {"fwd": 1e-3, "bwd": 2e-3}}}, "timings_batch": 32})
    diff = stored.settings_diff(stored.run_settings(a), stored.run_settings(b))
    timings_hash = content_hash({"conv1": {"gpu": {"fwd": 1e-3, "bwd": 2e-3}}})
    assert diff == [
        ("network", "resnet50", "alexnet"),
        ("algorithm", "Genetic algorithm (ga)", "MAP-Elites (map-elites)"),
        ("parameter dimensions", "–", "x,y"),  # only B has it: after what precedes it in B
        ("parameter mutation_rate", "0.5", "–"),
        ("budget (evaluations)", "2,000", "none"),
        ("budget (seconds)", "none", "30"),
        ("seed", "1", "7"),
        ("schedule", "thesis scheme", "1F1B"),
        ("micro-batches", "1", "8"),
        ("measured op times", "none (cost formulas)", f"measured, 1 op(s) (table {timings_hash[:12]})"),
        ("measured at batch", "–", "32"),
        ("memory penalty", "thesis: +1 ms per MB over capacity", "placeto: +2 s per GB over capacity"),
    ]


def test_same_names_with_other_contents_or_batch_sizes_differ():
    a, b = record(), record(id=2)
    diff = stored.settings_diff(stored.run_settings(a, "a" * 64, "d" * 64, 128),
                                stored.run_settings(b, "b" * 64, "d" * 64, 32))
    assert diff == [("network content", "a" * 12, "b" * 12), ("batch size", "128", "32")]
    # a field an older store did not record counts as differing, shown as "–"
    old = record(id=3, problem={k: v for k, v in SPEC.items() if k != "forward_only"})
    assert stored.settings_diff(stored.run_settings(a), stored.run_settings(old)) == [("forward only", "no", "–")]


# -- comparing runs on the page ---------------------------------------------------------------------------

def two_random_runs(seeds=(1, 2), budgets=(30, 30), devices=None):
    problem = Problem(load_network("alexnet"), devices or load_devices("malvik"))
    with RunStore() as store:
        return [start_run(store, problem, "random", evaluations=n, seed=s) for s, n in zip(seeds, budgets)]


def diff_rows(at):
    return {r["setting"]: (r[c_a], r[c_b]) for r in frame(at, "setting").to_dict("records")
            for c_a, c_b in [list(frame(at, "setting").columns[1:])]}


@pytest.mark.slow
def test_overlaid_curves_of_two_runs_come_from_the_store():
    (first, r1), (second, r2) = two_random_runs()
    at = runs_page()
    assert at.multiselect(key="runs_overlay").value == [second]  # default: the selected (newest) run
    [fig] = [f for f in figures(at) if f["layout"]["title"]["text"] == "Best objective so far"]
    assert [t["name"] for t in fig["data"]] == [f"run {second} · Random search · alexnet"]
    at.multiselect(key="runs_overlay").set_value([first, second]).run()
    assert_clean(at)
    [fig] = [f for f in figures(at) if f["layout"]["title"]["text"] == "Best objective so far"]
    assert [t["name"] for t in fig["data"]] == [f"run {first} · Random search · alexnet",
                                                f"run {second} · Random search · alexnet"]
    for trace, result in zip(fig["data"], (r1, r2)):
        assert decode(trace["x"]) == result.history[:, 0].tolist()
        assert decode(trace["y"]) == pytest.approx((result.history[:, 1] * 1e3).tolist())
        assert decode(trace["y"])[-1] == pytest.approx(result.best_objective * 1e3)
    assert fig["layout"]["yaxis"]["title"]["text"] == OBJECTIVE_TITLE == "objective (ms per batch + memory penalty)"
    assert fig["layout"]["xaxis"]["type"] == "linear"
    at.checkbox(key="runs_log_x").check().run()
    [fig] = [f for f in figures(at) if f["layout"]["title"]["text"] == "Best objective so far"]
    assert fig["layout"]["xaxis"]["type"] == "log"


def test_a_curve_whose_best_placement_exceeds_memory_says_so():
    small = load_devices("malvik").with_memory({"gpu0": 50e6, "gpu1": 50e6, "cpu0": 50e6})
    [(run_id, result)] = two_random_runs(seeds=(3,), budgets=(20,), devices=small)
    over = Problem(load_network("alexnet"), small).simulate(result.best_placement).overflow.sum()
    assert over > 0  # AlexNet's weights alone (~240 MB) overflow 50 MB on every device
    at = runs_page()
    assert f"exceeds memory by {fmt_bytes(over)}" in text(at)
    assert "thesis: +1 ms per MB over capacity" in text(at)


@pytest.mark.slow
def test_the_settings_diff_of_two_stored_runs():
    (first, _), (second, _) = two_random_runs(seeds=(1, 2), budgets=(20, 30))
    at = runs_page()
    assert (at.selectbox(key="runs_diff_a").value, at.selectbox(key="runs_diff_b").value) == (second, first)
    assert list(frame(at, "setting").columns) == ["setting", f"A: run {second}", f"B: run {first}"]
    assert diff_rows(at) == {"budget (evaluations)": ("30", "20"), "seed": ("2", "1")}
    at.selectbox(key="runs_diff_b").set_value(second).run()
    assert "Choose two different runs" in text(at)


def test_runs_with_the_same_settings_are_identical():
    two_random_runs(seeds=(4, 4), budgets=(20, 20))
    at = runs_page()
    assert "Identical settings" in text(at)
    with pytest.raises(KeyError):
        frame(at, "setting")


@pytest.mark.slow
def test_the_runs_page_keeps_its_choices_across_pages():
    (first, _), (second, _) = two_random_runs(seeds=(1, 2), budgets=(20, 30))
    at = runs_page()
    at.selectbox(key="runs_pick").set_value(first).run()
    at.multiselect(key="runs_overlay").set_value([first, second]).run()
    at.checkbox(key="runs_log_x").check().run()
    at.selectbox(key="runs_diff_a").set_value(first).run()
    at.selectbox(key="runs_diff_b").set_value(second).run()
    at.selectbox(key="runs_export").set_value("history").run()
    goto(at, "trace")
    goto(at, "network")
    runs_page(at)
    assert at.selectbox(key="runs_pick").value == first
    assert at.multiselect(key="runs_overlay").value == [first, second]
    assert at.checkbox(key="runs_log_x").value is True
    assert (at.selectbox(key="runs_diff_a").value, at.selectbox(key="runs_diff_b").value) == (first, second)
    assert at.selectbox(key="runs_export").value == "history"
    assert diff_rows(at) == {"budget (evaluations)": ("20", "30"), "seed": ("1", "2")}


@pytest.mark.slow
def test_hidden_statuses_stay_hidden_and_new_ones_show():
    problem = alexnet_problem()
    stopped = stopped_run(problem, "random", 400, 1, stop_at=150)
    with RunStore() as store:
        done, _ = start_run(store, problem, "random", evaluations=20, seed=2)
    at = runs_page()
    assert sorted(at.dataframe[0].value["run"]) == [stopped, done]
    at.multiselect(key="runs_status").set_value(["stopped"]).run()
    assert list(at.dataframe[0].value["run"]) == [stopped]
    goto(at, "network")
    runs_page(at)
    assert at.multiselect(key="runs_status").value == ["stopped"]
    assert list(at.dataframe[0].value["run"]) == [stopped]
    with RunStore() as store:  # a status no run had when "done" was hidden appears: it is shown
        store._conn.execute("UPDATE runs SET status='failed' WHERE id=?", (done,))
    at.run()
    assert at.multiselect(key="runs_status").value == ["failed", "stopped"]
    assert sorted(at.dataframe[0].value["run"]) == [stopped, done]


@pytest.mark.slow
def test_a_hostile_network_name_stays_text_in_the_comparison():
    from placement_core.model.graph import Graph
    g = load_network("alexnet")
    name = '<img src=x onerror=alert(1)> *net*'
    hostile = Problem(Graph(name, g.ops, g.batch_size), load_devices("malvik"))
    with RunStore() as store:
        first, _ = start_run(store, hostile, "random", evaluations=20, seed=1)
        second, _ = start_run(store, alexnet_problem(), "random", evaluations=20, seed=1)
    at = runs_page()
    at.multiselect(key="runs_overlay").set_value([first, second]).run()
    assert_clean(at)
    [fig] = [f for f in figures(at) if f["layout"]["title"]["text"] == "Best objective so far"]
    # Plotly renders tags in legend and hover names: the name arrives escaped
    assert fig["data"][0]["name"] == f"run {first} · Random search · &lt;img src=x onerror=alert(1)&gt; *net*"
    assert diff_rows(at)["network"] == ("alexnet", name)  # a dataframe shows text as it is


@pytest.mark.slow
def test_a_runs_strings_stay_text_and_its_seeding_is_shown():
    """Network name, label and parameters are a user's strings: shown literally, never as markup; the initial
    mappings a run started from are in its own column, listed and said in the run's details."""
    from placement_core.model.graph import Graph
    from placement_core.optimize.seeding import initial_placements, seeding_record
    g = load_network("alexnet")
    problem = Problem(Graph("<b>net</b> *x*", g.ops, g.batch_size), load_devices("malvik"))
    seeds = initial_placements(problem, "heft,single", seed=0)
    with RunStore() as store:
        run_id, _ = start_run(store, problem, "random", evaluations=20, seed=1, label="![x](https://x.test/a.png)",
                              initial=seeds.placements, seeding=seeding_record("heft,single", seeds))
        plain, _ = start_run(store, alexnet_problem(), "random", evaluations=20, seed=1)
    at = runs_page()
    assert list(at.dataframe[0].value["seeded"]) == ["", "heft,single"]  # newest first
    at.selectbox(key="runs_pick").set_value(run_id).run()
    assert_clean(at)
    [header] = [m.value for m in at.markdown if m.value.startswith(f"**run {run_id}")]
    assert r"&lt;b&gt;net&lt;/b&gt; \*x\*" in header and r"!\[x\](https://x.test/a.png)" in header
    said = [c.value for c in at.caption if "initial placement(s)" in c.value]
    assert said == [f"Seeded with {len(seeds.labels)} initial placement(s) (heft,single; {seeds.evaluations} "
                    f"evaluations, not counted in the budget); best seed {seeds.labels[0]}: "
                    f"{seeds.objectives[0]:.6g} s (the first placements it evaluated)."]
    at.selectbox(key="runs_pick").set_value(plain).run()
    assert not [c.value for c in at.caption if "initial placement(s)" in c.value]


def test_a_damaged_run_is_named_and_the_others_listed(tmp_path, monkeypatch):
    """Garbage in one run's JSON cell: the Runs page lists the other two and names the damaged one."""
    import sqlite3

    from apptest_util import goto, start

    from placement_core import Problem, load_devices, load_network
    from placement_core.store import RunStore

    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path))
    problem = Problem(load_network("alexnet"), load_devices("malvik"))
    with RunStore(home=tmp_path) as store:
        ids = [store.create_run(problem, "random", {}, seed, evaluations=10) for seed in range(3)]
    with sqlite3.connect(tmp_path / "runs.sqlite") as c:
        c.execute("UPDATE runs SET params='{not json' WHERE id=?", (ids[1],))
    at = goto(start(), "runs")
    assert not at.exception
    [w] = [w.value for w in at.warning if "cannot be read" in w.value]
    assert w.startswith(f"1 stored run(s) cannot be read and are not listed: run {ids[1]} (") and "runs doctor" in w
    listed = at.dataframe[0].value["run"].tolist()
    assert listed == [ids[2], ids[0]]
