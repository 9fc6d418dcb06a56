"""Initial mappings (dissertation Ch. 4) for any algorithm: the heuristics' own placements, random and the
Bayesian (TPE) start, and `placement optimize --init`."""

import json

import numpy as np
import pytest

from placement_core import InputError, Problem, load_devices, load_network
from placement_core.cli import main
from placement_core.optimize import run
from placement_core.optimize.seeding import bayes_start, initial_placements, parse_init


@pytest.fixture(scope="module")
def problem():
    return Problem(load_network("alexnet"), load_devices("malvik-4gpu-limited-alexnet"))


def test_parse_init_names_what_is_wrong():
    assert parse_init("heft, min-cut,random:3,bayes") == [("heft", 1), ("min-cut", 1), ("random", 3), ("bayes", 100)]
    for text, message in (("nope", "unknown initial mapping 'nope'"), ("heft:3", "heft takes no count"),
                          ("random:x", "the count must be an integer"), ("bayes:0", "from 1 to 100000"),
                          (",", "no initial mapping named")):
        with pytest.raises(InputError, match=message):
            parse_init(text)


def test_the_seeds_are_the_heuristics_own_placements(problem):
    s = initial_placements(problem, "heft,heft-nocomm,min-cut,m-etf,single,random:4", seed=3)
    by_label = dict(zip(s.labels, s.placements))
    for name in ("heft", "heft-nocomm", "min-cut", "m-etf"):
        own = run(problem, name, evaluations=1000).best_placement
        # a heuristic that lands on a placement another one found first keeps the first label
        assert any(np.array_equal(own, x) for x in s.placements), name
        if name in by_label:
            assert np.array_equal(by_label[name], own)
    singles = [x for lbl, x in by_label.items() if lbl.startswith("single")]
    assert all(len(set(x.tolist())) == 1 for x in singles)
    assert s.parts["single"] == problem.n_devices and s.parts["random"] == 4
    assert s.evaluations == sum(s.parts.values())
    # distinct, best first, each with its simulated objective
    assert len({x.tobytes() for x in s.placements}) == len(s.placements)
    assert s.objectives == sorted(s.objectives)
    assert s.objectives == pytest.approx(problem.evaluate_many(s.placements).tolist(), rel=1e-12)


def test_the_bayesian_start_begins_with_the_homogeneous_mappings_and_is_reproducible(problem):
    xs, fs = bayes_start(problem, 12, seed=5)
    assert len(xs) == 12 and fs.tolist() == pytest.approx(problem.evaluate_many(xs).tolist(), rel=1e-12)
    for dev in range(problem.n_devices):  # the dissertation's starting points, enqueued first
        assert (xs[dev] == dev).all()
    again, _ = bayes_start(problem, 12, seed=5)
    assert np.array_equal(xs, again)
    s = initial_placements(problem, "bayes:12", seed=5, keep=3)
    assert s.evaluations == 12 and len(s.placements) == 3 and s.objectives[0] == pytest.approx(fs.min())


def test_a_seeded_ga_starts_from_the_seeds(problem):
    """The GA's first generation is the seeds, then random placements; its best is at most the best seed's."""
    from placement_core.parallel import SerialEvaluator

    batches = []

    class Recording(SerialEvaluator):
        def evaluate(self, placements):
            batches.append(np.array(placements))
            return super().evaluate(placements)

    s = initial_placements(problem, "heft,min-cut,single", seed=0)
    first = run(problem, "ga", evaluations=50, seed=0, initial=s.placements, evaluator=Recording(problem))
    assert np.array_equal(batches[0][:len(s.placements)], s.placements) and len(batches[0]) == 50
    assert first.best_objective <= s.objectives[0]


def test_optimize_init_on_the_command_line(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path))
    code = main(["optimize", "--network", "alexnet", "--devices", "malvik-4gpu-limited-alexnet", "--algorithm",
                 "annealing", "--budget", "200", "--init", "heft,min-cut", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    r = json.loads(out)
    problem = Problem(load_network("alexnet"), load_devices("malvik-4gpu-limited-alexnet"))
    heft = run(problem, "heft", evaluations=10).best_objective
    mincut = run(problem, "min-cut", evaluations=10).best_objective
    assert r["seeded"]["evaluations"] == 2 and r["seeded"]["best_objective_s"] == pytest.approx(min(heft, mincut))
    assert r["best_objective_s"] <= min(heft, mincut)
    from placement_core.store import RunStore
    with RunStore() as store:  # stored with the run, so a resume starts from the same seeds
        assert len(store.initial(r["run_id"])) == r["seeded"]["placements"]
    code = main(["optimize", "--resume", str(r["run_id"]), "--init", "heft"])
    assert code == 2 and "--init starts a new run" in capsys.readouterr().err
    # the store says how the run was seeded, in the words the run itself printed
    best = "heft" if heft <= mincut else "min-cut"
    assert main(["runs", "show", str(r["run_id"]), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["seeding"]
    assert shown == {"init": "heft,min-cut", "placements": r["seeded"]["placements"], "evaluations": 2,
                     "best_label": best, "best_objective_s": pytest.approx(min(heft, mincut)), "with_current": False}
    assert main(["runs", "show", str(r["run_id"])]) == 0
    assert (f"  seeded with {shown['placements']} initial placement(s) (heft,min-cut; 2 evaluations, not counted "
            f"in the budget); best seed {best}: {min(heft, mincut):.6g} s") in capsys.readouterr().out.splitlines()
    assert main(["runs", "list", "--json"]) == 0
    assert [row["seeded"] for row in json.loads(capsys.readouterr().out)] == ["heft,min-cut"]
