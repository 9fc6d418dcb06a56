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
    sharding = ["--sharding", "channel,batch"] if algorithm == "heft-sharded" else []  # it chooses among splits
    code, out, err = run(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", algorithm,
                         "--budget", "300", "--seed", "2", "--json", *sharding)
    assert code == 0, err
    r = json.loads(out)
    assert r["algorithm"] == algorithm
    assert set(r) >= {"best_objective_s", "best_assignment", "evaluations", "wall_s"}
    assert 0 < r["evaluations"] <= 300
    used = {d for v in r["best_assignment"].values() for d in (v["devices"] if isinstance(v, dict) else [v])}
    assert len(r["best_assignment"]) == 23 and used <= {"cpu0", "gpu0", "gpu1"}
    if algorithm == "data-parallel":  # every op that has a batch split by it over both GPUs
        assert {"devices": ["gpu0", "gpu1"], "split": "batch"} in r["best_assignment"].values()
    assert r["history"][-1][0] == r["evaluations"] and r["history"][-1][1] == r["best_objective_s"]
    if algorithm.startswith("heft") and algorithm != "heft-sharded":  # heft-sharded keeps no plan of its own
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
    # the written placement simulates to the reported objective, taken out of the result or as it is
    placement = tmp_path / "p.json"
    placement.write_text(json.dumps(data["placement"]))
    for path in (placement, out):
        code, text, err = run(capsys, "simulate", "--network", "resnet50", "--devices",
                              "malvik-4gpu-limited-resnet50", "--placement", str(path), "--json")
        assert code == 0, err
        assert json.loads(text)["objective_s"] == pytest.approx(data["best_objective_s"])


@pytest.mark.slow
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
    (["--algorithm", "ga-steady", "--param", "in_flight=4"],
     "ga-steady's parameter in_flight is now called pending. Use pending=4"),
    (["--algorithm", "map-elites-async", "--param", "in-flight=2"],
     "map-elites-async's parameter in_flight is now called pending. Use pending=2"),
    (["--algorithm", "ga", "--workers", "2", "--dask", "tcp://x:1"], "not allowed with argument"),
    (["--algorithm", "ga", "--budget", "-3"], "expected a positive integer"),
    (["--algorithm", "ga", "--seed", "-1"], "argument --seed: expected an integer from 0 to 9223372036854775807, "
                                            "got '-1'"),
    (["--algorithm", "ga", "--seed", str(2**63)], "argument --seed: expected an integer from 0 to"),
    (["--algorithm", "ga", "--budget", str(2**64)], "argument --budget: expected a positive integer from 1 to "
                                                    "9223372036854775807"),
    (["--algorithm", "ga", "--seconds", "inf"], "argument --seconds: expected a positive, finite number of seconds"),
    (["--algorithm", "ga", "--seconds", "0"], "argument --seconds: expected a positive, finite number of seconds"),
    (["--algorithm", "ga", "--workers", str(10**20)], "argument --workers: expected a number of worker processes "
                                                      "from 1 to 1024"),
    (["--resume", str(2**64)], "argument --resume: expected a run id, an integer from 1 to"),
    (["--algorithm", "ga", "--out", "/nonexistent-placement-dir/x.json"],
     "error: /nonexistent-placement-dir/x.json: --out: the folder '/nonexistent-placement-dir' does not exist. "
     "Create it first, or give a path in an existing folder"),
])
def test_errors(capsys, tmp_path, argv, text):
    """One error line, exit 2, and nothing in the run store (the values are checked before anything runs)."""
    home = tmp_path / "home"
    code, out, err = run(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--home", str(home),
                         *argv)
    assert code == 2 and err.startswith("error: ") and text in err and err.count("\n") == 1
    assert out == ""
    if (home / "runs.sqlite").exists():
        from placement_core.store import RunStore
        with RunStore(home=home) as store:
            assert store.runs() == []


def test_out_is_checked_before_the_search(capsys, tmp_path, monkeypatch):
    import placement_core.store.recording

    def never(*a, **kw):
        raise AssertionError("the search started")

    monkeypatch.setattr(placement_core.store.recording, "start_run", never)
    (tmp_path / "file").write_text("")
    for target, text in ((tmp_path, f"error: {tmp_path}: --out: is a directory. Give a file name, e.g. "
                                    f"{tmp_path}/result.json"),
                         (tmp_path / "none" / "r.json", f"--out: the folder '{tmp_path}/none' does not exist"),
                         (tmp_path / "file" / "r.json", f"--out: '{tmp_path}/file' is not a folder")):
        code, out, err = run(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm",
                             "random", "--budget", "10", "--out", str(target))
        assert code == 2 and out == "" and text in err and err.count("\n") == 1


@pytest.mark.dask
def test_an_unreachable_dask_scheduler_leaves_nothing_in_the_store(capsys, tmp_path):
    pytest.importorskip("distributed")
    home = tmp_path / "home"
    code, out, err = run(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "random",
                         "--budget", "10", "--dask", "tcp://127.0.0.1:1", "--home", str(home))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("error: dask: cannot reach the Dask scheduler at 'tcp://127.0.0.1:1'")
    from placement_core.store import RunStore
    with RunStore(home=home) as store:
        assert store.runs() == []


def test_pipelined_runs_say_so(capsys):
    """Under gpipe/1f1b the problem reports the schedule and the whole batch, as `simulate --json` does."""
    argv = ["--network", "alexnet", "--devices", "malvik", "--schedule", "gpipe", "--micro-batches", "4"]
    code, out, err = run(capsys, "optimize", *argv, "--algorithm", "heft", "--json", "--no-store")
    assert code == 0, err
    r = json.loads(out)
    code, sim, _ = run(capsys, "simulate", *argv, "--placement", "single:gpu0", "--json")
    sim = json.loads(sim)
    shared = ("batch_size", "micro_batch_size", "batches", "in_flight", "schedule", "micro_batches")
    assert {k: r["problem"][k] for k in shared} == {k: sim[k] for k in shared} == {
        "batch_size": 128, "micro_batch_size": 32, "batches": 1, "in_flight": 1, "schedule": "gpipe",
        "micro_batches": 4}
    # HEFT plans one micro-batch; the objective is per whole batch
    assert r["planned_for"] == "micro-batch" and r["planned_makespan_s"] < r["best_objective_s"]
    code, text, _ = run(capsys, "optimize", *argv, "--algorithm", "heft", "--no-store")
    assert "(batch 128, gpipe schedule, 4 micro-batches of 32)" in text
    assert "(its own plan for one micro-batch of 32, not the whole batch)" in text
    code, out, _ = run(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "heft",
                       "--json", "--no-store")
    r = json.loads(out)
    assert r["planned_for"] == "batch" and r["problem"]["schedule"] == "thesis"
    assert (r["problem"]["batch_size"], r["problem"]["micro_batches"]) == (128, 1)


@pytest.mark.slow
def test_a_result_file_is_a_placement_for_benchmark(capsys, tmp_path):
    """`placement benchmark --placement` takes the optimizer's --out file too."""
    pytest.importorskip("torch")
    from pathlib import Path
    model = f"{Path(__file__).resolve().parent / 'torch_models.py'}:SmallCNN"
    net = tmp_path / "net.json"
    assert run(capsys, "import-model", model, "--input-shape", "2,3,8,8", "--out", str(net))[0] == 0
    devices = tmp_path / "one-cpu.json"
    devices.write_text(json.dumps({"format": "placement-devices/1", "name": "one", "devices": [
        {"name": "cpu0", "kind": "cpu", "peak_flops": 1e11, "memory_bytes": 1e10, "mem_bandwidth": 1e10}],
        "channels": []}))
    result = tmp_path / "result.json"
    code, _, err = run(capsys, "optimize", "--network", str(net), "--devices", str(devices), "--algorithm", "random",
                       "--budget", "5", "--out", str(result), "--no-store")
    assert code == 0, err
    code, out, err = run(capsys, "benchmark", "--model", model, "--input-shape", "2,3,8,8", "--placement",
                         str(result), "--devices", "cpu", "--runner", "inprocess", "--steps", "1", "--warmup", "1",
                         "--no-store", "--json")
    assert code == 0, err
    assert json.loads(out)["status"] == "ok"


@pytest.mark.slow
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
