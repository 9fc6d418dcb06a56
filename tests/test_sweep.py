"""Independent runs as whole tasks (run_many, `placement sweep`): the same results wherever a run lands."""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from placement_core import Problem, load_devices, load_network
from placement_core.analysis.stats import mean_ci
from placement_core.cli import main
from placement_core.cli.sweep_cmds import seeds_list
from placement_core.base.errors import InputError
from placement_core.optimize import run
from placement_core.optimize.sweep import RunJob, grid, run_many
from placement_core.store import RunStore


@pytest.fixture(scope="module")
def alexnet():
    return Problem(load_network("alexnet"), load_devices("malvik-4gpu"))


def test_a_grid_crosses_algorithms_with_the_values_they_know_and_the_seeds(alexnet):
    jobs = grid(alexnet, ["ga", "map-elites"], [0, 1], evaluations=100, params={"mutation_rate": [0.1, 0.5]})
    assert len(jobs) == 2 * 2 + 2 * 2  # both algorithms have mutation_rate
    jobs = grid(alexnet, ["ga", "map-elites"], [0, 1], evaluations=100, params={"elite": [1, 3]})
    assert [(j.algorithm, j.params, j.seed) for j in jobs] == [
        ("ga", {"elite": 1}, 0), ("ga", {"elite": 1}, 1), ("ga", {"elite": 3}, 0), ("ga", {"elite": 3}, 1),
        ("map-elites", {}, 0), ("map-elites", {}, 1)]  # MAP-Elites has no elite size: once per seed
    with pytest.raises(InputError, match="no chosen algorithm has a parameter 'populaton'"):
        grid(alexnet, ["ga"], [0], params={"populaton": [10]})


@pytest.mark.dask
def test_whole_runs_give_the_same_results_on_processes_and_on_dask(alexnet):
    jobs = [RunJob(alexnet, a, s, 300) for a in ("ga", "map-elites", "ga-steady") for s in (0, 1)]
    ref = [run(alexnet, j.algorithm, evaluations=300, seed=j.seed) for j in jobs]
    seen = []
    got = run_many(jobs, workers=2, on_result=lambda i, job, r: seen.append(i))
    assert sorted(seen) == list(range(len(jobs)))
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
            Client(c) as client:
        on_dask = run_many(jobs, dask=client)
    for r0, r1, r2 in zip(ref, got, on_dask):
        assert np.array_equal(r0.history, r1.history) and np.array_equal(r0.history, r2.history)
        assert np.array_equal(r0.best_placement, r2.best_placement)


def test_a_bad_job_fails_before_any_run_starts(alexnet):
    with pytest.raises(InputError, match="population"):
        run_many([RunJob(alexnet, "ga", 0, 100), RunJob(alexnet, "ga", 1, 100, params={"population": 0})],
                 workers=2)


@pytest.mark.parametrize("text, seeds", [("3", [0, 1, 2]), ("2-4", [2, 3, 4]), ("7,1", [7, 1])])
def test_seed_lists(text, seeds):
    assert seeds_list(text) == seeds


@pytest.mark.parametrize("text", ["0", "4-2", "1,1", "x", "-3"])
def test_bad_seed_lists(text):
    with pytest.raises(argparse.ArgumentTypeError):
        seeds_list(text)


def test_sweep_command_stores_every_run_and_summarizes_each_configuration(tmp_path, capsys):
    home = tmp_path / "home"
    code = main(["sweep", "--network", "alexnet", "--devices", "malvik-4gpu", "--algorithm", "ga,cem",
                 "--seeds", "3", "--budget", "200", "--param", "elite=1,2", "--workers", "2", "--home", str(home),
                 "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["runs"]) == 2 * 3 + 3
    with RunStore(home=home) as store:
        for r in data["runs"]:
            rec = store.get(r["run_id"])
            assert rec.status == "done" and rec.best_objective == r["best_objective_s"]
            assert rec.algorithm == r["algorithm"] and rec.seed == r["seed"]
    for row in data["summary"]:
        mine = [r["best_objective_s"] for r in data["runs"]
                if r["algorithm"] == row["algorithm"] and r["params"] == row["params"]]
        assert row["runs"] == 3
        assert (row["mean_s"], row["ci95_s"]) == pytest.approx(mean_ci(mine))
        assert row["best_s"] == min(mine)
    assert [r["mean_s"] for r in data["summary"]] == sorted(r["mean_s"] for r in data["summary"])


def test_mean_ci_by_hand():
    # 1, 2, 3: mean 2, sd 1, t(2 dof) = 4.3027 -> 4.3027 / sqrt(3)
    assert mean_ci([1, 2, 3]) == pytest.approx((2.0, 4.3027 / 3 ** 0.5), rel=1e-4)
    assert mean_ci([5.0]) == (5.0, 0.0)
    # 12 values 0, 1, ..., 11: mean 5.5, sd sqrt(13), t(11 dof) = 2.2010 (the normal's 1.96 is 11 % short)
    assert mean_ci(range(12)) == pytest.approx((5.5, 2.2010 * 13 ** 0.5 / 12 ** 0.5), rel=1e-4)


@pytest.mark.parametrize("dof, printed", [(1, 12.706), (2, 4.303), (5, 2.571), (10, 2.228), (11, 2.201),
                                          (15, 2.131), (20, 2.086), (29, 2.045), (30, 2.042), (60, 2.000),
                                          (120, 1.980)])
def test_t_quantiles_match_the_printed_table(dof, printed):
    from placement_core.analysis.stats import student_t_quantile
    assert round(student_t_quantile(0.975, dof), 3) == printed


def test_t_quantiles_match_scipy():
    from scipy.stats import t

    from placement_core.analysis.stats import student_t_quantile
    for dof in (1, 3, 7, 13, 31, 64, 250, 1000):
        for p in (0.6, 0.9, 0.975, 0.995):
            assert student_t_quantile(p, dof) == pytest.approx(t.ppf(p, dof), rel=1e-10)
