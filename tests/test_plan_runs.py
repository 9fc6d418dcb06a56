"""Plan archives as stored runs (issue 28, item 6): a MAP-Elites archive of cluster plans saved to the run store
reopens equal to the one searched, element by element; the CLI stores it like `placement optimize` stores a run;
a stored archive that is damaged or from another version is named with a clear message."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import fields

import pytest

from placement_core import InputError, load_devices, load_network
from placement_core.cli import main
from placement_core.families import gpt
from placement_core.optimize.plan_elites import search_plans
from placement_core.optimize.plans import Plan, PlanRequest, plan
from placement_core.store import RunStore
from placement_core.store.plan_runs import PlanSearch, load_plan_archive, save_plan_archive

TINY = "gpt:layers=4,hidden=64,heads=4,seq=32,vocab=100"
VARY = ("schedule", "virtual_stages", "recompute", "zero")
CLI = ["plan", "--network", TINY, "--devices", "dgx-a100:nodes=1", "--global-batch", "8", "--search", "map-elites"]


def searched(budget=40, seed=1):
    graph, devices, config = load_network(TINY), load_devices("dgx-a100:nodes=1"), gpt.parse(TINY)
    req = PlanRequest(global_batch=8)
    archive = search_plans(graph, devices, req, config, vary=VARY, budget=budget, seed=seed)
    search = PlanSearch("dgx-a100:nodes=1", req, TINY, VARY, ("pp", "tp"), budget, seed)
    return archive, search, graph, devices


def same_plan(a: Plan, b: Plan) -> bool:
    return all(getattr(a, f.name) == getattr(b, f.name) for f in fields(Plan) if f.name not in ("placement", "graph"))


def test_a_stored_plan_archive_reopens_equal_to_the_one_searched():
    archive, search, graph, devices = searched()
    with RunStore() as store:
        run_id = save_plan_archive(store, archive, search, graph, devices, wall_s=1.5, label="tiny")
        back, search_back, _ = load_plan_archive(store, run_id)
        rec = store.get(run_id)
    assert search_back == search
    assert (rec.algorithm, rec.status, rec.evaluations, rec.budget_evaluations, rec.wall_s, rec.label) == \
        ("plan-archive", "done", 40, 40, 1.5, "tiny")
    assert rec.best_objective == archive.best().plan.step_time_s
    assert back.evaluations == archive.evaluations == 40 and back.coverage == archive.coverage
    assert back.reachable == archive.reachable and back.shape == archive.shape
    assert [(d.name, d.label, d.axis) for d in back.descriptors] == [(d.name, d.label, d.axis)
                                                                       for d in archive.descriptors]
    assert back.elites.keys() == archive.elites.keys() and len(back) == 7
    for niche, e in archive.elites.items():
        f = back.elites[niche]
        assert (f.niche, f.objective, f.descriptors, f.row, f.fits) == (e.niche, e.objective, e.descriptors, e.row,
                                                                         e.fits)
        assert same_plan(f.plan, e.plan) and f.plan.breakdown == e.plan.breakdown and f.plan.cuts == e.plan.cuts
    assert [e.niche for e in back.ranked()] == [e.niche for e in archive.ranked()]
    # the reopened archive re-simulates each elite to the step time it was stored with (its trace, memory)
    for e in back.ranked()[:3]:
        again, problem = back.simulate(e)
        assert again.step_time_s == e.plan.step_time_s and problem.n_devices == 8


def test_the_cli_stores_the_archive_and_lists_it(capsys):
    assert main(CLI + ["--budget", "100", "--recompute", "none", "--zero", "0", "--schedule", "1f1b", "--json",
                       "--label", "every plan"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["run_id"] == 1
    exhaustive = plan(load_network(TINY), load_devices("dgx-a100:nodes=1"), PlanRequest(global_batch=8),
                      gpt.parse(TINY))
    with RunStore() as store:
        archive, search, _ = load_plan_archive(store, 1)
        assert store.get(1).label == "every plan"
    assert search.vary == ("virtual_stages",) and search.budget == 100  # schedule given: its chunks still searched
    assert archive.evaluations == 26 and len(archive) == 9  # every plan of the exhaustive search
    for e in archive.elites.values():
        assert e.objective == min(p.step_time_s for p in exhaustive if (p.pp, p.tp) == (e.plan.pp, e.plan.tp))
    assert main(["runs", "list", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert (row["algorithm"], row["evaluations"], row["best_objective_s"]) == ("plan-archive", 26,
                                                                               exhaustive[0].step_time_s)
    assert main(["runs", "show", "1"]) == 0
    assert "archive: 9 plans, one per niche" in capsys.readouterr().out
    assert main(["runs", "export", "1", "--what", "placement", "--out", "x.json"]) == 2
    assert "run 1 is a plan archive" in capsys.readouterr().err
    assert main(CLI + ["--budget", "5", "--no-store"]) == 0
    assert "stored as run" not in capsys.readouterr().out
    assert main(CLI + ["--budget", "5"]) == 0
    assert "stored as run 2 (see `placement runs show 2`" in capsys.readouterr().out


def test_a_folded_cluster_archive_reopens():
    assert main(CLI[:4] + ["dgx-a100:nodes=2", "--fold"] + CLI[5:] + ["--budget", "12", "--json"]) == 0
    with RunStore() as store:
        archive, search, devices = load_plan_archive(store, 1)
    assert type(devices).__name__ == "Cluster" and devices.n_gpus == 16 and archive.evaluations == 12
    e = archive.best()
    assert archive.simulate(e)[0].step_time_s == e.plan.step_time_s


def _corrupt(path, run_id: int, change) -> None:
    with sqlite3.connect(path) as c:
        extras = json.loads(c.execute("SELECT extras FROM runs WHERE id=?", (run_id,)).fetchone()[0])
        change(extras["plan_archive"])
        c.execute("UPDATE runs SET extras=? WHERE id=?", (json.dumps(extras), run_id))


@pytest.mark.parametrize("change, message", [
    (lambda d: d.update(format=99), "run 1's plan archive was stored by another version of placement (format 99"),
    (lambda d: d["elites"][0]["genome"].update(tp=16), "holds a plan (tp 16, pp "),
    (lambda d: d["elites"][0]["plan"].pop("step_time_s"), "run 1's plan archive is damaged: an elite does not read "
                                                          "(KeyError"),
    (lambda d: d.pop("elites"), "run 1's plan archive is damaged: an elite does not read"),
])
def test_a_malformed_or_old_stored_archive_says_so(change, message, capsys):
    archive, search, graph, devices = searched(budget=10)
    with RunStore() as store:
        save_plan_archive(store, archive, search, graph, devices, wall_s=0.1)
        path = store.path
    _corrupt(path, 1, change)
    with RunStore() as store, pytest.raises(InputError, match="plan archive") as e:
        load_plan_archive(store, 1)
    assert message in str(e.value) and e.value.fix
    with sqlite3.connect(path) as c:  # a search setting gone: named too
        problem = json.loads(c.execute("SELECT problem FROM runs WHERE id=1").fetchone()[0])
        del problem["request"]
        c.execute("UPDATE runs SET problem=? WHERE id=1", (json.dumps(problem),))
    with RunStore() as store, pytest.raises(InputError, match="its search settings do not read"):
        load_plan_archive(store, 1)


def test_a_placement_run_is_not_a_plan_archive():
    from placement_core import Problem
    problem = Problem(load_network("alexnet"), load_devices("malvik"))
    with RunStore() as store:
        run_id = store.create_run(problem, "random", {}, 0)
        with pytest.raises(InputError, match=f"run {run_id} is a random run, not a plan archive"):
            load_plan_archive(store, run_id)
