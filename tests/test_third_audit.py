"""Issue 32, the third audit's failures: every bad input a clean refusal (exit 2, one `error:` line, no
traceback, nothing half-written). The run store's salvage has its own file (test_store_salvage.py)."""

import json
import os

import pytest

from placement_core.cli import main


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def refused(code, out, err, *words):
    assert code == 2, (code, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)
    return err


# -- 1. an Exprimo assignment that splits one layer over more than 64 devices ------------------------------

EXPRIMO_NET = {"name": "t", "layers": {
    "data": {"type": "Input", "parents": [], "tensor": [8, 8, 8, 3]},
    "conv1": {"type": "Convolution", "parents": ["data"], "filter": [3, 3, -1, 128], "strides": [1, 1, 1, 1],
              "padding": "SAME"},
    "fc": {"type": "InnerProduct", "parents": ["conv1"], "num_outputs": 10}}}


@pytest.mark.parametrize("count", [65, 66, 500])
def test_an_exprimo_layer_over_more_than_64_devices_is_refused(capsys, tmp_path, count):
    net, pl = tmp_path / "net.json", tmp_path / "pl.json"
    net.write_text(json.dumps(EXPRIMO_NET))
    pl.write_text(json.dumps({"data": 0, "conv1": [1, 2] * (count // 2) + [1] * (count % 2), "fc": 1}))
    err = refused(*cli(capsys, "simulate", "--network", net, "--devices", "malvik", "--placement", pl), "conv1", "64")
    assert f"{pl}: conv1: layer 'conv1' lists {count} devices" in err
    # 64 devices is the limit, and allowed
    pl.write_text(json.dumps({"data": 0, "conv1": [1, 2] * 32, "fc": 1}))
    assert cli(capsys, "simulate", "--network", net, "--devices", "malvik", "--placement", pl)[0] == 0


# -- 7. the experiments' usage mistakes: one line, not argparse's usage block ----------------------------------

@pytest.mark.parametrize("experiment", ["e3", "generalization", "traversal", "post", "assisted", "seeding"])
@pytest.mark.parametrize("argv", [["--bogus"], ["--budget"], ["--budget", "-5"], ["--seeds", "x"],
                                  ["--budget", "1" * 40]])
def test_experiment_usage_mistakes_are_one_line(capsys, experiment, argv):
    if experiment == "traversal" and argv[0] == "--seeds":
        argv = ["--episodes", "x"]
    if experiment in ("generalization", "traversal") and argv[0] == "--seeds":
        argv = ["--seed", "-1"]
    if experiment == "seeding" and argv[0] == "--budget":
        argv = ["--bayes"] + argv[1:]
    err = refused(*cli(capsys, "experiment", experiment, *argv))
    assert "usage:" not in err and f"placement experiment {experiment} --help" in err


# -- 8. outputs checked before the work, defaults that work outside the repository ------------------------------

def test_sharding_checks_its_report_path_before_the_searches(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside the repository: no docs/ here
    err = refused(*cli(capsys, "experiment", "sharding", "--networks", "alexnet", "--budget", "10", "--out", "res",
                       "--markdown", "docs/sharding-results.md"), "--markdown", "docs")
    assert not (tmp_path / "res").exists()  # nothing done, nothing written
    assert "alexnet:" not in err
    code, out, err = cli(capsys, "experiment", "sharding", "--networks", "alexnet", "--budget", "10")
    assert code == 0, err
    assert (tmp_path / "sharding-results" / "results.csv").is_file() and (tmp_path / "sharding-results.md").is_file()
    code, out, err = cli(capsys, "experiment", "sharding", "--networks", "alexnet", "--budget", "10", "--out",
                         "other/deeper", "--markdown", "other/report.md")
    assert code == 0, err
    assert (tmp_path / "other" / "report.md").is_file()
    assert sorted(os.listdir(tmp_path)) == ["other", "sharding-results", "sharding-results.md"]


def test_e3_checks_its_report_before_the_runs(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.md").write_bytes(b"\xff\xfe not text")
    for argv, words in ((["--out", "res"], ["docs/e3.md"]), (["--markdown", "bad.md"], ["bad.md", "UTF-8"]),
                        (["--markdown", "nowhere/e3.md"], ["nowhere"])):
        refused(*cli(capsys, "experiment", "e3", "--budget", "10", "--seeds", "1", "--networks", "alexnet",
                     "--algorithms", "random", "--versions", "normal", "--workers", "1", *argv), *words)
    assert sorted(os.listdir(tmp_path)) == ["bad.md"]


# -- 8. `placement benchmark --placement FILE` with split ops, in text -------------------------------------------

SMALL_CNN = str(__import__("pathlib").Path(__file__).resolve().parent / "torch_models.py") + ":SmallCNN"
CNN_OPS = ["x", "conv1", "relu", "pool", "flatten", "fc"]


def _sharded_placement(tmp_path):
    entries = dict({op: "cpu0" for op in CNN_OPS}, conv1={"devices": ["cpu0", "cpu1"], "split": "channel"},
                   fc={"devices": ["cpu0", "cpu1"], "split": "batch"})
    path = tmp_path / "sharded.json"
    path.write_text(json.dumps({"format": "placement/1", "assignment": entries}))
    return path


def test_benchmark_text_output_of_a_split_placement(capsys, tmp_path, monkeypatch):
    """The measurement is replaced by a canned one (a real one takes 14 s): what failed was the text after it."""
    pytest.importorskip("torch")
    import placement_core.torch.benchmark as bench
    seen = []

    def measured(model, shape, placements, devs, **kw):
        seen.append(placements)
        return [bench.BenchmarkResult("ok", kw["runner"], [{"name": d.name, "torch": d.torch, "peak_memory_bytes": None,
                                                            "memory_limit_bytes": None} for d in devs],
                                      steps_s=[0.01, 0.012], warmup_s=[0.02])]
    monkeypatch.setattr(bench, "benchmark", measured)
    code, out, err = cli(capsys, "benchmark", "--model", SMALL_CNN, "--input-shape", "2,3,8,8", "--batch-size", 4,
                         "--devices", "cpu:2", "--placement", _sharded_placement(tmp_path), "--home", tmp_path / "h")
    assert code == 0, err
    assert "(uses cpu0, cpu1)" in out and "median_step_s: 0.011000" in out
    assert seen[0][0]["conv1"] == {"devices": ["cpu0", "cpu1"], "split": "channel"}


def test_a_pipelined_benchmark_refuses_split_ops(capsys, tmp_path):
    pytest.importorskip("torch")
    refused(*cli(capsys, "benchmark", "--model", SMALL_CNN, "--input-shape", "2,3,8,8", "--batch-size", 4,
                 "--devices", "cpu:2", "--placement", _sharded_placement(tmp_path), "--schedule", "gpipe",
                 "--micro-batches", 2, "--no-store"), "--placement", "conv1", "split")
