"""`placement optimize` and `placement algorithms`."""

import json

import pytest

from placement_core.cli import main
from placement_core.optimize import ALGORITHMS


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_every_algorithm_from_the_cli(capsys, algorithm):
    code, out, err = run(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", algorithm,
                         "--budget", "300", "--seed", "2", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["algorithm"] == algorithm
    assert set(r) >= {"best_objective_s", "best_assignment", "evaluations", "wall_s"}
    assert 0 < r["evaluations"] <= 300
    assert len(r["best_assignment"]) == 23 and set(r["best_assignment"].values()) <= {"cpu0", "gpu0", "gpu1"}
    assert r["history"][-1][0] == r["evaluations"] and r["history"][-1][1] == r["best_objective_s"]
    if algorithm.startswith("heft"):
        assert r["planned_makespan_s"] > 0


def test_out_file_and_resimulation(capsys, tmp_path):
    out = tmp_path / "me.json"
    code, text, err = run(capsys, "optimize", "--network", "resnet50", "--devices", "malvik-4gpu-limited-resnet50",
                          "--algorithm", "map-elites", "--budget", "1000", "--out", str(out))
    assert code == 0, err
    assert "archive:" in text and "niches filled" in text
    data = json.loads(out.read_text())
    assert data["format"] == "placement-result/1" and data["placement"]["format"] == "placement/1"
    assert data["archive"]["dimensions"][2] == {"name": "cross_device_edges", "label": "cross-device edges",
                                                 "size": 40}
    assert len(data["archive"]["elites"]) > 5
    assert data["archive"]["elites"][0]["objective_s"] == data["best_objective_s"]
    # the written placement simulates to the reported objective
    placement = tmp_path / "p.json"
    placement.write_text(json.dumps(data["placement"]))
    code, text, _ = run(capsys, "simulate", "--network", "resnet50", "--devices", "malvik-4gpu-limited-resnet50",
                        "--placement", str(placement), "--json")
    assert json.loads(text)["objective_s"] == pytest.approx(data["best_objective_s"])


def test_params_and_workers(capsys):
    code, out, err = run(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "ga",
                         "--budget", "200", "--param", "population=20", "--param", "crossover=uniform",
                         "--workers", "2", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["params"]["population"] == 20 and r["params"]["crossover"] == "uniform"
    code, out2, _ = run(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "ga",
                        "--budget", "200", "--param", "population=20", "--param", "crossover=uniform", "--json")
    assert json.loads(out2)["best_assignment"] == r["best_assignment"]  # same seed, serial or 2 workers


def test_algorithms_listing(capsys):
    code, out, _ = run(capsys, "algorithms", "--json")
    data = json.loads(out)
    assert data["ga"]["params"]["population"]["default"] == 50
    assert data["map-elites"]["params"]["tournament_size"]["default"] == 10
    assert data["cem"]["params"]["samples"]["default"] == 60


@pytest.mark.parametrize("argv, text", [
    (["--algorithm", "sgd"], "argument --algorithm: invalid choice: 'sgd'"),
    (["--algorithm", "ga", "--param", "population"], "expected KEY=VALUE"),
    (["--algorithm", "ga", "--param", "population=0"], "population must be in [2, 100000]"),
    (["--algorithm", "ga", "--workers", "2", "--dask", "tcp://x:1"], "not allowed with argument"),
    (["--algorithm", "ga", "--budget", "-3"], "expected a positive integer"),
])
def test_errors(capsys, argv, text):
    code, out, err = run(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", *argv)
    assert code == 2 and err.startswith("error: ") and text in err and err.count("\n") == 1


def test_experiment_e3_writes_its_table_and_keeps_the_discussion(tmp_path, capsys):
    import csv

    out, md = tmp_path / "e3", tmp_path / "e3.md"
    argv = ["experiment", "e3", "--budget", "30", "--seeds", "2", "--versions", "normal", "--networks", "alexnet",
            "--algorithms", "random,single", "--workers", "1", "--out", str(out), "--markdown", str(md)]
    assert main(argv) == 0
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert [(r["algorithm"], r["seed"], r["evaluations"]) for r in rows] == [
        ("random", "0", "30"), ("random", "1", "30"), ("single", "0", "3")]  # one per device of malvik
    single = float(rows[2]["objective_s"])
    assert f"| single | **{single:.4f}** |" in md.read_text()
    md.write_text(md.read_text() + "\n## Discussion\n\nWritten by hand.\n")
    assert main(argv) == 0
    assert md.read_text().endswith("## Discussion\n\nWritten by hand.\n")
    assert (out / "e3.png").stat().st_size > 0
