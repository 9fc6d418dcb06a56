"""Optimize page (AppTest): parameter forms, background runs, progress, stop, results, errors."""

import sys
import time

import pytest
from apptest_util import assert_clean, figures, goto, sidebar_text, start, text, wait_for_runs

from dashboard.background_runs import REGISTRY


def optimize_page(evaluations=400):
    at = start()
    goto(at, "optimize")
    assert_clean(at)
    at.number_input(key="opt_evaluations").set_value(evaluations)
    return at


def runs(at):
    return sorted(REGISTRY.runs(at.session_state["session_key"]), key=lambda r: r.id)


def test_form_has_thesis_defaults_for_the_chosen_algorithms():
    at = optimize_page()
    assert at.multiselect(key="opt_algorithms").value == ["ga", "map-elites"]
    assert at.number_input(key="opt_ga_population").value == 50
    assert at.number_input(key="opt_ga_elite").value == 5
    assert at.number_input(key="opt_map-elites_tournament_size").value == 10
    assert at.number_input(key="opt_map-elites_crossover_rate").value == 0.4
    assert "individuals per generation" in at.number_input(key="opt_ga_population").help
    assert at.number_input(key="opt_evaluations").value == 400
    assert "No runs yet" in text(at)


@pytest.mark.slow
def test_two_algorithms_run_in_the_background_and_their_results_can_be_used():
    at = optimize_page()
    at.button(key="opt_start").click().run()
    assert not at.exception
    ga, me = runs(at)
    assert (ga.spec.algorithm, me.spec.algorithm) == ("ga", "map-elites")
    wait_for_runs(at)
    assert_clean(at)
    assert (ga.status, me.status) == ("done", "done") and ga.result.evaluations == 400
    [fig] = figures(at)
    assert [t["name"] for t in fig["data"]] == [ga.name, me.name]  # both curves on one chart
    assert fig["layout"]["yaxis"]["title"]["text"] == "objective (ms per batch)"
    assert [m.label for m in at.metric].count("Best objective") == 2
    assert "Browse its archive" in [e.proto.label for e in at.get("page_link")]
    at.button(key=f"use_{ga.id}").click().run()
    assert_clean(at)
    assert at.session_state["placement_label"] == f"best of {ga.name}"
    assert (at.session_state["placement"] == ga.result.best_placement).all()
    assert f"best of {ga.name}" in sidebar_text(at)


@pytest.mark.slow
def test_a_run_survives_switching_pages():
    at = optimize_page(evaluations=300)
    at.multiselect(key="opt_algorithms").set_value(["random"])
    at.button(key="opt_start").click().run()
    goto(at, "network")
    assert_clean(at)
    [r] = runs(at)
    r.thread.join(30)
    goto(at, "optimize")
    assert_clean(at)
    assert "Results" in text(at) and r.result.evaluations == 300
    assert at.button(key=f"use_{r.id}").label == "Use this placement"


@pytest.mark.slow
def test_progress_is_shown_while_running_and_stop_ends_the_run():
    at = optimize_page(evaluations=5_000_000)
    at.multiselect(key="opt_algorithms").set_value(["ga"])
    at.button(key="opt_start").click().run()
    [r] = runs(at)
    deadline = time.time() + 20
    while r.evaluations == 0 and time.time() < deadline:
        time.sleep(0.05)
    at.run()
    [bar] = at.get("progress")
    assert "evaluations/s" in bar.proto.text and "/ 5,000,000 evaluations" in bar.proto.text
    assert "optimization run(s) in progress" in [e.value for e in at.sidebar.info][0]
    at.button(key=f"stop_{r.id}").click().run()
    r.thread.join(20)
    at.run()
    assert_clean(at)
    assert r.status == "stopped" and 0 < r.result.evaluations < 5_000_000
    assert f"**{r.name}** · stopped" in text(at)


@pytest.mark.slow
def test_a_run_that_fails_shows_its_message():
    at = optimize_page()
    at.multiselect(key="opt_algorithms").set_value(["ga"])
    at.number_input(key="opt_ga_elite").set_value(60)  # elite must be smaller than the population (50)
    at.button(key="opt_start").click().run()
    wait_for_runs(at)
    assert not at.exception
    [err] = at.error
    assert "elite must be smaller than the population" in err.value


@pytest.mark.slow
def test_simulator_settings_are_shared_with_the_trace_page():
    at = optimize_page()
    at.number_input(key="opt_batches").set_value(4)
    at.number_input(key="opt_in_flight").set_value(2).run()
    assert at.session_state["sim"].batches == 4 and at.session_state["sim"].in_flight == 2
    goto(at, "trace")
    assert_clean(at)
    assert at.number_input(key="trace_batches").value == 4
    assert "4 batch(es), 2 in flight" in sidebar_text(at)


@pytest.mark.slow
def test_worker_processes_evaluate_in_parallel():
    # Worker processes (multiprocessing spawn) re-import the main script, app.py: it must not start the app there.
    at = optimize_page(evaluations=600)
    at.multiselect(key="opt_algorithms").set_value(["random"])
    at.number_input(key="opt_workers").set_value(2)
    at.button(key="opt_start").click().run()
    wait_for_runs(at, timeout=120)
    assert_clean(at)
    [r] = runs(at)
    assert r.status == "done" and r.result.evaluations == 600 and r.spec.workers == 2


def alexnet_optimize_page(evaluations=300):
    at = start()
    at.selectbox(key="net_builtin").set_value("alexnet").run()
    assert_clean(at)
    goto(at, "optimize")
    assert_clean(at)
    at.number_input(key="opt_evaluations").set_value(evaluations)
    at.multiselect(key="opt_algorithms").set_value(["ga"])
    return at


@pytest.mark.slow
def test_initial_mappings_seed_the_run_and_their_cost_is_reported():
    """HEFT + a 5-trial Bayesian start, computed in the run's thread: the stored run starts from exactly the
    placements initial_placements gives (worked out here on a fresh problem), the best found is no worse than
    the best of them, and the page says how many there were and what they cost (1 + 5 evaluations)."""
    from dashboard import state
    from placement_core.optimize.seeding import initial_placements
    from placement_core.store import RunStore

    at = alexnet_optimize_page()
    at.checkbox(key="opt_seeded").uncheck()
    at.multiselect(key="opt_init").set_value(["heft"])
    at.number_input(key="opt_init_bayes").set_value(5).run()
    assert_clean(at)
    at.button(key="opt_start").click().run()
    [r] = runs(at)
    assert r.spec.init == "heft,bayes:5" and r.spec.initial is None
    wait_for_runs(at)
    assert_clean(at)
    assert r.status == "done", r.error
    problem = state.spec_for(r.spec.graph, r.spec.sim).build(r.spec.graph, r.spec.devices)
    seeds = initial_placements(problem, "heft,bayes:5", seed=r.spec.seed)
    assert seeds.evaluations == 6 and 1 <= len(seeds.labels) <= 6
    assert r.seeded["placements"] == len(seeds.labels) and r.seeded["evaluations"] == 6
    assert r.seeded["best_objective_s"] == seeds.objectives[0]
    assert r.result.best_objective <= seeds.objectives[0] * (1 + 1e-12)
    assert r.result.evaluations == 300  # the seeds' evaluations are not charged to the budget
    with RunStore() as store:
        assert (store.initial(r.store_id) == seeds.placements).all()
        assert store.get(r.store_id).seeding == r.seeded  # the Runs page and `runs show` say it from there
    said = f"Seeded with {len(seeds.labels)} initial placement(s) (heft,bayes:5; 6 evaluations, not counted in the budget)"
    assert said in text(at) and f"best seed {seeds.labels[0]}" in text(at)


@pytest.mark.slow
def test_initial_mappings_stack_after_the_current_placement():
    at = alexnet_optimize_page(evaluations=200)
    at.multiselect(key="opt_init").set_value(["single"]).run()  # one placement per device: 5 on malvik-4gpu
    at.button(key="opt_start").click().run()
    wait_for_runs(at)
    assert_clean(at)
    [r] = runs(at)
    n_dev = r.problem.n_devices
    assert r.seeded == {**r.seeded, "init": "single", "placements": n_dev, "evaluations": n_dev,
                        "with_current": True}
    assert "and the current placement" in text(at)
    from placement_core.store import RunStore
    with RunStore() as store:
        initial = store.initial(r.store_id)
    assert initial.shape == (1 + n_dev, r.problem.n_ops)
    assert (initial[0] == at.session_state["placement"]).all()  # the current placement comes first
    assert sorted(initial[1:, 0].tolist()) == list(range(n_dev)) and (initial[1:].T == initial[1:, 0]).all()


@pytest.mark.slow
def test_a_data_parallel_start_brings_its_splits_as_on_the_command_line():
    """data-parallel as an initial mapping needs its batch split in the run's table (the page adds it, as
    `placement optimize --init data-parallel` does); the seed is every op split over the four GPUs."""
    at = alexnet_optimize_page(evaluations=200)
    at.checkbox(key="opt_seeded").set_value(False)
    at.multiselect(key="opt_init").set_value(["data-parallel"]).run()
    at.button(key="opt_start").click().run()
    wait_for_runs(at)
    assert_clean(at)
    [r] = runs(at)
    assert r.error is None and r.status == "done"
    assert r.seeded["placements"] == 1 and r.seeded["evaluations"] == 1
    assert r.problem.splits  # the batch split over the GPUs joined the table
    from placement_core.optimize.seeding import initial_placements
    seed = initial_placements(r.problem, "data-parallel")
    assert r.result.best_objective <= seed.objectives[0]


@pytest.mark.slow
def test_bad_initial_mappings_are_named_before_start(monkeypatch):
    at = alexnet_optimize_page()
    at.number_input(key="opt_init_random").set_value(200_000).run()  # past the limit of 100,000: refused
    assert_clean(at)
    assert at.number_input(key="opt_init_random").value == 0
    monkeypatch.setitem(sys.modules, "optuna", None)  # as if optuna were not installed
    at.number_input(key="opt_init_bayes").set_value(50).run()
    assert not at.exception
    [err] = at.error
    assert "Bayesian start needs optuna" in err.value and "set its trials to 0" in err.value
    assert at.button(key="opt_start").disabled
    at.number_input(key="opt_init_bayes").set_value(0).run()
    assert_clean(at)
    assert not at.button(key="opt_start").disabled


@pytest.mark.slow
def test_initial_mappings_survive_switching_pages():
    at = alexnet_optimize_page()
    at.multiselect(key="opt_init").set_value(["heft-nocomm", "min-cut"])
    at.number_input(key="opt_init_random").set_value(30)
    at.number_input(key="opt_init_bayes").set_value(40).run()
    goto(at, "trace")
    goto(at, "optimize")
    assert_clean(at)
    assert at.multiselect(key="opt_init").value == ["heft-nocomm", "min-cut"]
    assert (at.number_input(key="opt_init_random").value, at.number_input(key="opt_init_bayes").value) == (30, 40)
