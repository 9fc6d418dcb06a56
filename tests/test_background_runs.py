"""Background runs' live records (dashboard.background_runs): the best-so-far curve keeps the whole history of a long run.

The expected curves are worked out by hand from the reported (evaluations, best) sequences.
"""

import math

import numpy as np

from dashboard.background_runs import BestCurve, Run, RunSpec
from dashboard.settings import SimChoices
from placement_core.optimize import Progress


def _run(budget: int) -> Run:
    spec = RunSpec(algorithm="map-elites", title="MAP-Elites", params={}, evaluations=budget, seconds=None, seed=0,
                   workers=1, graph=None, graph_key="", network_label="", devices=None, devices_key="",
                   devices_label="", sim=SimChoices())
    return Run(spec, problem=None)


def test_the_curve_keeps_every_improvement_and_the_last_report():
    c = BestCurve()
    for ev, best in [(50, math.inf), (100, 9.0), (150, 9.0), (200, 7.0), (250, 7.0), (300, 7.0), (350, 4.0),
                     (400, 4.0)]:
        c.add(ev, best)
    assert c.points() == [(100, 9.0), (200, 7.0), (350, 4.0), (400, 4.0)]


def test_a_200000_evaluation_run_keeps_its_early_improvements():
    """4,000 reports (one per batch of 50): the old curve, halved every 600 points, lost the improvements at
    100 and 150 evaluations and looked flat until much later."""
    improvements = {50: 10.0, 100: 9.0, 150: 8.0, 1_000: 7.0, 70_600: 6.0, 150_000: 5.0}
    run = _run(200_000)
    best = math.inf
    for ev in range(50, 200_001, 50):
        best = improvements.get(ev, best)
        run.on_progress(Progress("map-elites", ev, 200_000, best, best, ev / 2000.0, None, ev == 200_000))
    assert run.view()["curve"] == [(50, 10.0), (100, 9.0), (150, 8.0), (1_000, 7.0), (70_600, 6.0),
                                   (150_000, 5.0), (200_000, 5.0)]


def test_past_the_limit_the_smallest_steps_go():
    c = BestCurve(limit=4)
    for ev, best in [(1, 10.0), (2, 9.0), (3, 5.0), (4, 4.5), (5, 4.0)]:
        c.add(ev, best)
    # interior drops: 1 (10 -> 9 at 2), 4 (9 -> 5 at 3), 0.5 (5 -> 4.5 at 4): the smallest (at 4) goes
    assert c.points() == [(1, 10.0), (2, 9.0), (3, 5.0), (5, 4.0)]


def test_the_bounded_curve_stays_above_the_true_best_and_keeps_the_big_steps():
    c = BestCurve(limit=100)
    true_x, true_y = [], []
    best = 20_000.0
    for i in range(10_000):
        best -= 1000.0 if i == 5_000 else 1.0
        true_x.append(float(i))
        true_y.append(best)
        c.add(i, best)
    c.add(12_000, best)
    pts = c.points()
    assert len(pts) <= 101
    xs, ys = np.array(pts).T
    assert pts[0] == (0.0, true_y[0]) and pts[-2] == (9_999.0, true_y[-1]) and pts[-1] == (12_000.0, true_y[-1])
    assert np.all(np.diff(ys) < 0) or np.all(np.diff(ys[:-1]) < 0)
    assert 5_000.0 in xs  # the one big step
    shown = ys[np.searchsorted(xs, true_x, side="right") - 1]  # the step chart's value at every true improvement
    assert np.all(shown >= np.array(true_y))
    assert set(zip(xs, ys)) <= set(zip(true_x, true_y)) | {(12_000.0, true_y[-1])}


def test_a_running_curves_flat_tail_moves_in_twentieths_of_the_budget():
    from dashboard.charts.curves import _live_tail

    curve = [(50.0, 9.0), (300.0, 7.0), (1_730.0, 7.0)]
    assert _live_tail(curve, 20_000) == [(50.0, 9.0), (300.0, 7.0), (1_000.0, 7.0)]  # steps of 1,000
    assert _live_tail([(50.0, 9.0), (300.0, 7.0), (990.0, 7.0)], 20_000) == [(50.0, 9.0), (300.0, 7.0)]
    assert _live_tail(curve[:2], 20_000) == curve[:2]  # ends at an improvement: as it is
    assert _live_tail([(50.0, 9.0), (300.0, 7.0), (73_000.0, 7.0)], None)[-1] == (70_000.0, 7.0)  # 5,000s


def test_the_progress_figure_draws_a_finished_curve_to_its_end_and_a_running_one_in_steps():
    from apptest_util import decode

    from dashboard.charts.curves import progress_figure

    curve = [(50.0, 0.009), (300.0, 0.007), (1_730.0, 0.007)]
    done = progress_figure([{"id": 1, "name": "GA #1", "curve": curve, "status": "done", "budget": 20_000}])
    assert decode(done.to_dict()["data"][0]["x"]) == [50, 300, 1_730]
    live = progress_figure([{"id": 1, "name": "GA #1", "curve": curve, "status": "running", "budget": 20_000}])
    assert decode(live.to_dict()["data"][0]["x"]) == [50, 300, 1_000]
    later = [*curve[:2], (1_990.0, 0.007)]  # 260 evaluations on, nothing better: the same figure
    assert progress_figure([{"id": 1, "name": "GA #1", "curve": later, "status": "running",
                             "budget": 20_000}]).to_json() == live.to_json()


def test_optimize_makes_the_initial_mappings_in_the_runs_thread_and_records_them(monkeypatch):
    """RunSpec.init is computed by _optimize (not the page): HEFT + 3 random placements cost 1 + 3 evaluations,
    outside the budget; they are stacked after the page's placement, stored with the run, named in its label,
    and the progress line says the run is making them while it does."""
    from dashboard import background_runs
    from placement_core import Problem, load_devices, load_network, single_device
    from placement_core.optimize import seeding
    from placement_core.store import RunStore

    g, d = load_network("alexnet"), load_devices("malvik-4gpu")
    problem = Problem(g, d)
    current = single_device(g, d, "gpu1")
    spec = RunSpec(algorithm="ga", title="GA", params={}, evaluations=200, seconds=None, seed=3, workers=1, graph=g,
                   graph_key="", network_label="AlexNet", devices=d, devices_key="", devices_label="malvik-4gpu",
                   sim=SimChoices(), initial=current[None, :], init="heft,random:3")
    run = Run(spec, problem)
    stages = []
    real = seeding.initial_placements
    monkeypatch.setattr(seeding, "initial_placements",
                        lambda *a, **k: stages.append(run.view()["stage"]) or real(*a, **k))
    result = background_runs._optimize(run)
    assert stages == ["making the initial mappings (heft,random:3)"]
    seeds = real(Problem(g, d), "heft,random:3", seed=3)
    assert run.seeded == {"init": "heft,random:3", "placements": 4, "evaluations": 4, "best_label": seeds.labels[0],
                          "best_objective_s": seeds.objectives[0], "with_current": True}
    assert result.evaluations == 200 and result.best_objective <= min(seeds.objectives[0], problem.evaluate(current))
    assert run.view()["stage"] is None  # cleared by the search's first progress report
    with RunStore() as store:
        initial = store.initial(run.store_id)
        record = store.get(run.store_id)
    assert (initial == np.vstack([current, seeds.placements])).all()
    assert record.label == "dashboard: AlexNet on malvik-4gpu"
    assert record.seeding == run.seeded  # its own column, shown on the Runs page and by `runs show`


def test_a_run_without_initial_mappings_keeps_the_pages_seed_only():
    from dashboard import background_runs
    from placement_core import Problem, load_devices, load_network, single_device

    g, d = load_network("alexnet"), load_devices("malvik-4gpu")
    current = single_device(g, d, "gpu0")[None, :]
    spec = RunSpec(algorithm="random", title="Random", params={}, evaluations=50, seconds=None, seed=0, workers=1,
                   graph=g, graph_key="", network_label="AlexNet", devices=d, devices_key="",
                   devices_label="malvik-4gpu", sim=SimChoices(), initial=current)
    run = Run(spec, Problem(g, d))
    assert background_runs._seed(run) is current and run.seeded is None and run.stage is None


def test_stop_while_making_the_initial_mappings_ends_the_run_before_its_search():
    from dashboard import background_runs
    from placement_core import Problem, load_devices, load_network
    from placement_core.store import RunStore

    g, d = load_network("alexnet"), load_devices("malvik-4gpu")
    spec = RunSpec(algorithm="ga", title="GA", params={}, evaluations=10_000, seconds=None, seed=0, workers=1,
                   graph=g, graph_key="", network_label="AlexNet", devices=d, devices_key="",
                   devices_label="malvik-4gpu", sim=SimChoices(), init="bayes:1000")
    run = Run(spec, Problem(g, d))
    run.stop()  # pressed before the first of the 1,000 trials (the most --init allows)
    background_runs._work(run)
    assert (run.status, run.result, run.seeded, run.stage) == ("stopped", None, None, None)
    assert run.error == "stopped while making the initial mappings: nothing was run"
    with RunStore() as store:
        assert store.runs() == []
