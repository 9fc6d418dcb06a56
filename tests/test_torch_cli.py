"""The PyTorch commands: import-model, benchmark, calibrate, export-placement, experiment e5; errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from placement_core.cli import main

MODELS = str(Path(__file__).resolve().parent / "torch_models.py")
SMALL = f"{MODELS}:SmallCNN"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_torch_is_imported_only_when_used():
    code = ("import sys, placement_core, placement_core.cli, placement_core.torch.timings, "
            "placement_core.torch.coarsen, placement_core.torch.devspec\n"
            "placement_core.cli.build_parser()\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parent.parent)


def test_import_model(capsys, tmp_path):
    pytest.importorskip("torch")
    out_file = tmp_path / "small.json"
    code, out, err = run(capsys, "import-model", SMALL, "--input-shape", "2,3,8,8", "--batch-size", "8",
                         "--out", out_file, "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["ops"] == 6 and summary["batch_size"] == 8 and summary["method"] == "fx"
    assert summary["fwd_flops"] == 4 * (27648 + 512 + 512 + 2560)
    net = json.loads(out_file.read_text())
    assert net["format"] == "placement-network/1" and net["batch_size"] == 8
    code, out, err = run(capsys, "import-model", SMALL, "--input-shape", "2,3,8,8", "--groups", "3",
                         "--out", tmp_path / "coarse.json")
    assert code == 0, err
    assert "6 ops in 3 groups" in out
    groups = json.loads((tmp_path / "coarse.groups.json").read_text())["groups"]
    assert sorted(m for ms in groups.values() for m in ms) == sorted(["x", "conv1", "relu", "pool", "flatten", "fc"])


def test_benchmark_prints_median_steps_and_memory(capsys, tmp_path):
    pytest.importorskip("torch")
    assert run(capsys, "import-model", SMALL, "--input-shape", "2,3,8,8", "--groups", "3", "--out",
               tmp_path / "coarse.json")[0] == 0
    # a placement of the coarse groups, applied to the real model through coarse.groups.json
    placement = tmp_path / "p.json"
    groups = json.loads((tmp_path / "coarse.groups.json").read_text())["groups"]
    placement.write_text(json.dumps({"format": "placement/1", "network": "smallcnn", "devices": "local",
                                     "assignment": {g: ("cpu0", "cpu1")[k % 2] for k, g in enumerate(groups)}}))
    code, out, err = run(capsys, "benchmark", "--model", SMALL, "--network", tmp_path / "coarse.json",
                         "--placement", placement, "--devices", "cpu:2", "--steps", "3", "--warmup", "1")
    assert code == 0, err
    for key in ("median_step_s:", "steps_s:", "peak_memory_bytes", "cpu0", "cpu1"):
        assert key in out
    assert len(out.split("steps_s:")[1].splitlines()[0].split()) == 3
    code, out, err = run(capsys, "benchmark", "--model", SMALL, "--input-shape", "2,3,8,8", "--placement",
                         "single:cpu0", "--devices", "cpu", "--runner", "inprocess", "--steps", "2", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["status"] == "ok" and len(r["steps_s"]) == 2 and r["median_step_s"] > 0
    assert r["peak_memory_bytes"]["cpu0"] > 0
    # both measurements are in the run store, the dashboard's Benchmark page reads them from there
    from placement_core.store import RunStore
    with RunStore() as store:
        stored = store.benchmarks()
    assert [b["label"] for b in stored] == [str(placement), "single:cpu0"]
    assert [b["runner"] for b in stored] == ["ranks", "inprocess"] and stored[1]["id"] == r["benchmark_id"]
    assert stored[1]["measured_median_s"] == pytest.approx(r["median_step_s"])
    assert set(stored[0]["placement"].values()) == {"cpu0", "cpu1"} and stored[1]["batch_size"] == 2


def test_export_placement(capsys, tmp_path):
    pytest.importorskip("torch")
    code, out, err = run(capsys, "export-placement", "--model", SMALL, "--input-shape", "2,3,8,8",
                         "--placement", "single:cpu0", "--devices", "cpu")
    assert code == 0, err
    data = json.loads(out)
    assert set(data["ops"].values()) == {"cpu"} and data["modules"]["fc"] == "cpu"
    target = tmp_path / "placed.py"
    code, out, err = run(capsys, "export-placement", "--model", SMALL, "--input-shape", "2,3,8,8",
                         "--placement", "single:cpu0", "--devices", "cpu", "--format", "python", "--out", target)
    assert code == 0, err
    compile(target.read_text(), str(target), "exec")


def test_calibrate_then_e5(capsys, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path / "home"))
    code, out, err = run(capsys, "calibrate", "--model", SMALL, "--input-shape", "2,3,8,8", "--batch-size", "4",
                         "--devices", "cpu:2", "--steps", "2", "--rounds", "1", "--fit-placements", "0",
                         "--out", tmp_path / "cal")
    assert code == 0, err
    assert (tmp_path / "cal" / "devices.json").is_file() and (tmp_path / "cal" / "timings.json").is_file()
    assert (tmp_path / "home" / "devices" / "local.json").is_file()
    assert "cpu0-cpu1" in out and "latency" in out
    code, out, err = run(capsys, "devices")
    assert code == 0 and "local" in out
    code, out, err = run(capsys, "experiment", "e5", "--model", SMALL, "--input-shape", "2,3,8,8",
                         "--batch-size", "4", "--devices", "cpu:2", "--calibration", tmp_path / "cal",
                         "--out", tmp_path / "e5", "--generations", "2", "--random", "2", "--zones", "1",
                         "--splits", "1", "--steps", "2", "--warmup", "1", "--rounds", "1", "--json")
    assert code == 0, err
    result = json.loads(out)
    for profile in ("calibrated", "default"):
        m = result["metrics"][profile]["median"]
        assert -1 <= m["kendall_tau"] <= 1 and -1 <= m["pearson_r"] <= 1 and m["mape_pct"] >= 0
        assert m["n"] >= 5
    for name in ("results.csv", "scatter.png", "placements.json", "report.md"):
        assert (tmp_path / "e5" / name).stat().st_size > 0
    assert "placement experiment e5 --model" in (tmp_path / "e5" / "report.md").read_text()


@pytest.mark.parametrize("argv, message", [
    (["import-model", "resnet18", "--input-shape", "1,3,8,8", "--out", "x.json"], "model: cannot tell where"),
    (["import-model", f"{MODELS}:DataBranch", "--input-shape", "2,4", "--out", "x.json"], "cannot be traced"),
    (["import-model", SMALL, "--input-shape", "2,three", "--out", "x.json"], "--input-shape"),
    (["benchmark", "--model", SMALL, "--placement", "single:cpu0", "--devices", "cpu"], "--input-shape"),
    (["benchmark", "--model", SMALL, "--input-shape", "2,3,8,8", "--placement", "single:cpu0",
      "--devices", "tpu:1"], "unknown device 'tpu:1'"),
    (["benchmark", "--model", SMALL, "--input-shape", "2,3,8,8", "--placement", "single:gpu0",
      "--devices", "cpu:2"], "unknown device 'gpu0'"),
    (["benchmark", "--model", SMALL, "--input-shape", "2,3,8,8", "--placement", "single:cpu0",
      "--devices", "cpu", "--memory-limit", "lots"], "expected a size"),
    (["experiment", "e9"], "invalid choice"),
    # output paths and numbers are checked before any tracing, measuring or benchmarking
    (["import-model", SMALL, "--input-shape", "2,3,8,8", "--out", "/nonexistent/x.json"],
     "--out: the folder '/nonexistent' does not exist"),
    (["export-placement", "--model", SMALL, "--input-shape", "2,3,8,8", "--placement", "single:cpu0",
      "--devices", "cpu", "--out", "/"], "/: --out: is a directory"),
    (["export-placement", "--model", SMALL, "--input-shape", "2,3,8,8", "--placement", "single:cpu0",
      "--devices", "cpu", "--format", "python", "--out", "/nonexistent/p.py"], "does not exist"),
    (["calibrate", "--model", SMALL, "--input-shape", "2,3,8,8", "--devices", "cpu", "--out", __file__],
     "--out: is a file, not a folder"),
    (["experiment", "e5", "--model", SMALL, "--input-shape", "2,3,8,8", "--out", __file__],
     "--out: is a file, not a folder"),
    (["benchmark", "--model", SMALL, "--input-shape", "2,3,8,8", "--placement", "single:cpu0",
      "--devices", "cpu", "--seed", "99999999999999999999"], "--seed: expected an integer from 0 to"),
    (["benchmark", "--model", SMALL, "--input-shape", "2,3,8,8", "--placement", "single:cpu0",
      "--devices", "cpu", "--timeout", "-1"], "--timeout: expected a positive, finite number of seconds"),
])
def test_errors_are_one_line(capsys, argv, message):
    pytest.importorskip("torch")
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def test_cuda_request_on_a_cpu_machine(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    code, out, err = run(capsys, "benchmark", "--model", SMALL, "--input-shape", "2,3,8,8", "--placement",
                         "single:gpu0", "--devices", "cuda:0")
    assert code == 2 and "no usable CUDA GPU" in err


def test_exprimo_placement_keys_that_are_not_ops_are_ignored_with_a_note(capsys, tmp_path):
    pytest.importorskip("torch")
    place = tmp_path / "exprimo.json"
    # an Exprimo {layer: device index} file: every op, plus a Block name and a stale key
    ops = ["x", "conv1", "relu", "pool", "flatten", "fc"]
    place.write_text(json.dumps({**{op: 0 for op in ops}, "Block_1": 0, "old_layer": 1}))
    out_file = tmp_path / "p.json"
    code, out, err = run(capsys, "export-placement", "--model", SMALL, "--input-shape", "2,3,8,8", "--placement",
                         place, "--devices", "cpu", "--out", out_file)
    assert code == 0, err
    assert "note: 2 key(s) of the placement file are not ops" in err
    assert set(json.loads(out_file.read_text())["ops"].values()) == {"cpu"}

