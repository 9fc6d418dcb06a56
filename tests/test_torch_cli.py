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


@pytest.mark.workers
def test_torch_is_imported_only_when_used():
    code = ("import sys, placement_core, placement_core.cli, placement_core.cost.timings, "
            "placement_core.model.coarsen, placement_core.torch.devspec\n"
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


@pytest.mark.workers
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


@pytest.mark.workers
def test_calibrate_then_e5(capsys, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path / "home"))
    code, out, err = run(capsys, "calibrate", "--model", SMALL, "--input-shape", "2,3,8,8", "--batch-size", "4",
                         "--devices", "cpu:2", "--steps", "2", "--rounds", "1", "--fit-placements", "0",
                         "--max-transfer", "1MB", "--out", tmp_path / "cal")
    assert code == 0, err
    # --max-transfer: the link is measured from 1 kB up to 1 MB only (10^3, 10^3.5, ..., 10^6 bytes)
    channels = json.loads((tmp_path / "cal" / "timings.json").read_text())["channels"]
    assert channels["cpu0-cpu1"]["sizes"] == [1000, 3162, 10000, 31622, 100000, 316227, 1000000]
    # the two CPU ranks are the same hardware: one set of op times, the fastest of both (--separate: two)
    timings = json.loads((tmp_path / "cal" / "timings.json").read_text())
    assert timings["pooled"] == [["cpu0", "cpu1"]]
    assert all(t["cpu0"] == t["cpu1"] for t in timings["ops"].values())
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
    # the calibrated profile again on the placements that split no op (the split ops' cost model apart)
    whole = [r for r in result["rows"] if r["status"] == "ok" and r["kind"] != "sharded"]
    assert len(whole) < result["metrics"]["calibrated"]["median"]["n"]
    assert result["metrics"]["calibrated, whole ops"]["median"]["n"] == len(whole)
    for name in ("results.csv", "scatter.png", "placements.json", "report.md"):
        assert (tmp_path / "e5" / name).stat().st_size > 0
    report = (tmp_path / "e5" / "report.md").read_text()
    assert "placement experiment e5 --model" in report
    assert "identical devices share the fastest of their measurements: cpu0, cpu1" in report
    # the curve is used where the link's times rise with size; measured under load they may not (fit_curve: ())
    curve = channels["cpu0-cpu1"]["transfer_curve"]
    assert ("the simulator uses the measured transfer curve" in report) == bool(curve) and "Load average" in report
    assert "| calibrated, whole ops | **median** |" in report


@pytest.mark.workers
def test_calibrate_separate_keeps_identical_devices_apart(capsys, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path / "home"))
    code, out, err = run(capsys, "calibrate", "--model", SMALL, "--input-shape", "2,3,8,8", "--batch-size", "4",
                         "--devices", "cpu:2", "--steps", "1", "--rounds", "1", "--fit-placements", "0",
                         "--max-transfer", "4kB", "--separate", "--out", tmp_path / "cal")
    assert code == 0, err
    timings = json.loads((tmp_path / "cal" / "timings.json").read_text())
    assert timings["pooled"] == [] and set(timings["measured"]) == {"cpu0", "cpu1"}


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
    (["benchmark", "--model", SMALL, "--devices", "cpu"], "nothing to measure"),
    (["benchmark", "--model", SMALL, "--input-shape", "2,3,8,8", "--placement", "single:cpu0", "--devices", "cpu",
      "--top", "3"], "--top: --top goes with --run"),
    (["benchmark", "--model", SMALL, "--run", "1", "--placement", "single:cpu0", "--devices", "cpu"],
     "either --placement or --run"),
    (["benchmark", "--model", SMALL, "--run", "99", "--devices", "cpu"], "there is no run 99"),
    (["calibrate", "--model", SMALL, "--input-shape", "2,3,8,8", "--devices", "cpu", "--max-transfer", "2kB"],
     "--max-transfer must be at least 3.16 kB"),
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
@pytest.mark.slow
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



def _columns(text: str) -> list[dict]:
    """Rows of a `table` printout, split at the columns its dashed line marks (labels hold spaces)."""
    lines = text.splitlines()
    k = next(i for i, line in enumerate(lines) if line.startswith("---"))
    spans, pos = [], 0
    for dashes in lines[k].split("  "):
        spans.append((pos, pos + len(dashes)))
        pos += len(dashes) + 2
    cut = lambda line: [line[a:b].strip() for a, b in spans[:-1]] + [line[spans[-1][0]:].strip()]  # noqa: E731
    header = cut(lines[k - 1])
    rows = []
    for line in lines[k + 1:]:
        if not line.strip() or line.startswith("Kendall"):
            break
        rows.append(dict(zip(header, cut(line))))
    return rows


def _tau_by_counting(x, y) -> float:
    """Kendall's tau-b from the pairs, written out: (concordant - discordant) / sqrt(untied x * untied y)."""
    import math
    c = d = tx = ty = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            sx, sy = (x[i] > x[j]) - (x[i] < x[j]), (y[i] > y[j]) - (y[i] < y[j])
            c += sx * sy > 0
            d += sx * sy < 0
            tx += sx != 0
            ty += sy != 0
    return (c - d) / math.sqrt(tx * ty)


@pytest.mark.workers
def test_benchmark_the_top_k_of_a_stored_run(capsys, tmp_path):
    """`benchmark --run ID --top K`: the K best distinct placements of a MAP-Elites run, ordered by simulated
    objective, measured, ranked both ways with Kendall tau, and stored with the run."""
    pytest.importorskip("torch")
    import csv
    import io

    import numpy as np

    from placement_core.store import RunStore

    net = tmp_path / "small.json"
    assert run(capsys, "import-model", SMALL, "--input-shape", "1,3,8,8", "--batch-size", "4", "--out", net)[0] == 0
    code, out, err = run(capsys, "optimize", "--network", net, "--devices", "malvik", "--algorithm", "map-elites",
                         "--budget", "300", "--seed", "1")
    assert code == 0, err
    with RunStore() as store:
        [rec] = store.runs()
        problem = store.problem(rec.id)
        # brute force: every placement the run keeps, simulated again, distinct, best first
        kept = [rec.best_placement] + [r["placement"] for r in store.archive_rows(rec.id)]
    objectives = sorted(problem.evaluate(x) for x in {tuple(map(int, x)) for x in kept})
    code, out, err = run(capsys, "benchmark", "--model", SMALL, "--run", rec.id, "--top", "3", "--devices", "cpu:2",
                         "--map", "cpu0=cpu0,gpu0=cpu1,gpu1=cpu1", "--steps", "2", "--warmup", "1")
    assert code == 0, err
    rows = _columns(out)
    assert [r["simulated rank"] for r in rows] == ["1", "2", "3"] and rows[0]["placement"] == f"best of run {rec.id}"
    sim = [float(r["simulated objective (ms)"]) for r in rows]
    mea = [float(r["measured median (ms)"]) for r in rows]
    assert sim == pytest.approx([o * 1e3 for o in objectives[:3]], rel=1e-8)
    assert [int(r["measured rank"]) for r in rows] == [sorted(mea).index(m) + 1 for m in mea]
    tau_line = "Kendall tau (simulated objective vs measured median, 3 placement(s)): "
    printed_tau = float(out.split(tau_line)[1].split()[0])
    assert printed_tau == pytest.approx(_tau_by_counting(sim, mea), abs=1e-6)
    # they are stored with the run: placement runs benchmarks lists them under its id, with their labels
    code, out_csv, err = run(capsys, "runs", "benchmarks")
    assert code == 0, err
    listed = list(csv.DictReader(io.StringIO(out_csv)))
    assert [(r["run"], r["placement"]) for r in listed] == [(str(rec.id), r["placement"]) for r in rows]
    assert [float(r["measured_median_s"]) * 1e3 for r in listed] == pytest.approx(mea, rel=1e-8)

    # --json: the same, with each placement over the run's devices (distinct) and the warning that gpu0 and gpu1
    # (when both used) share cpu1
    code, out, err = run(capsys, "benchmark", "--model", SMALL, "--run", rec.id, "--top", "3", "--devices", "cpu:2",
                         "--map", "cpu0=cpu0,gpu0=cpu1,gpu1=cpu1", "--steps", "1", "--warmup", "1", "--json",
                         "--no-store")
    assert code == 0, err
    r = json.loads(out)
    placements = [p["placement"] for p in r["placements"]]
    assert len({tuple(sorted(p.items())) for p in placements}) == 3
    assert [p["simulated_objective_s"] for p in r["placements"]] == pytest.approx(objectives[:3], rel=1e-12)
    for p in r["placements"]:
        x = np.array([problem.devices.names.index(p["placement"][op.name]) for op in problem.graph.ops])
        assert problem.evaluate(x) == pytest.approx(p["simulated_objective_s"], rel=1e-12)
    got = [(p["simulated_objective_s"], p["measured_median_s"]) for p in r["placements"]]
    assert r["kendall_tau"] == pytest.approx(_tau_by_counting(*zip(*got)), abs=1e-12)
    used = {d for p in placements for d in p.values()}
    assert set(r["mapping"]) == used and r["mapping"].get("gpu0", "cpu1") == "cpu1"
    assert {"gpu0", "gpu1"} <= used  # this run's three best use both GPUs, which --map put on cpu1
    assert "gpu0 and gpu1 both run on cpu1 (cpu): the measured times then serialise work" in r["warning"]
