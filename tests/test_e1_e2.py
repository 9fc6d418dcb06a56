"""``placement experiment e1`` and ``e2`` on short runs (a few sizes, a small model), and the protocol pieces
they and E5 share: shuffled rounds, identical devices pooled in calibration."""

import csv
import json
import statistics
from pathlib import Path

import pytest

from placement_core.cli import main
from placement_core.model.devices import devices_from_dict
from placement_core.analysis.calibration_fit import ETA_COMM, fit_curve, fit_link, pool_identical

MODELS = str(Path(__file__).resolve().parent / "torch_models.py")
SMALL = f"{MODELS}:SmallCNN"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.workers
def test_e1_keeps_every_sample_and_fits_both_link_models_to_the_medians(capsys, tmp_path):
    pytest.importorskip("torch")
    md = tmp_path / "e1.md"
    md.write_text("old table\n\n## Discussion\n\nkept by hand\n")
    code, out, err = run(capsys, "experiment", "e1", "--devices", "cpu:2", "--sizes", "4,64kB,1MiB", "--repeats", "2",
                         "--rounds", "2", "--nominal", "16GB", "--out", tmp_path / "e1", "--markdown", md, "--json")
    assert code == 0, err
    result = json.loads(out)
    with open(tmp_path / "e1" / "samples.csv") as f:
        samples = list(csv.DictReader(f))
    by_size = {}
    for row in samples:
        by_size.setdefault(int(row["bytes"]), []).append((int(row["round"]), float(row["seconds"])))
    assert sorted(by_size) == [4, 64000, 1048576]
    assert all(sorted(r for r, _ in v) == [0, 0, 1, 1] for v in by_size.values())  # 2 rounds x 2 repeats
    medians = {s: statistics.median(t for _, t in v) for s, v in by_size.items()}
    for row in result["sizes"]:
        assert row["n"] == 4 and row["median_s"] == pytest.approx(medians[row["bytes"]], rel=1e-6)
        assert row["bandwidth_median"] == pytest.approx(row["bytes"] / row["median_s"])
    sizes = sorted(medians)
    latency, bandwidth = fit_link(sizes, [medians[s] for s in sizes])
    assert result["latency_s"] == pytest.approx(latency, rel=1e-6)
    graph = devices_from_dict(json.loads((tmp_path / "e1" / "devices.json").read_text()))
    link = graph.channels[0]
    assert graph.names == ["cpu0", "cpu1"] and link.bandwidth == pytest.approx(bandwidth / ETA_COMM, rel=1e-6)
    expected = fit_curve(sizes, [medians[s] for s in sizes])
    assert [x for p in link.transfer_curve for x in p] == pytest.approx([x for p in expected for x in p], rel=1e-6)
    text = md.read_text()
    assert text.startswith("# Experiment E1") and text.endswith("## Discussion\n\nkept by hand\n")
    assert "placement experiment e1 --devices cpu:2" in text and "| 4 B | 4 |" in text and "](e1/e1.png)" in text
    assert "% of the nominal 16 GB/s" in text and (tmp_path / "e1" / "e1.png").stat().st_size > 0


@pytest.mark.parametrize("argv, message", [
    (["--devices", "cpu:3"], "E1 measures one link, between two devices; got 3"),
    (["--devices", "cpu:2", "--runner", "inprocess"], "both devices are the same torch device"),
    (["--sizes", "4,lots"], "expected a size"),
    (["--sizes", "4"], "at least two message sizes"),
])
def test_e1_bad_requests_are_one_line(capsys, tmp_path, argv, message):
    pytest.importorskip("torch")
    code, out, err = run(capsys, "experiment", "e1", *argv, "--out", tmp_path / "o", "--markdown", tmp_path / "m.md")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "m.md").exists()


@pytest.mark.workers
def test_e2_records_every_step_from_the_first(capsys, tmp_path):
    pytest.importorskip("torch")
    md = tmp_path / "e2.md"
    code, out, err = run(capsys, "experiment", "e2", "--model", SMALL, "--input-shape", "2,3,8,8", "--batch-size", "4",
                         "--configurations", "3", "--steps", "14", "--rounds", "2", "--window", "3",
                         "--out", tmp_path / "e2", "--markdown", md)
    assert code == 0, err
    with open(tmp_path / "e2" / "steps.csv") as f:
        rows = list(csv.DictReader(f))
    # single:cpu0, single:cpu1 and one mix; 2 rounds of 14 steps each, step 0 (not a dropped warm-up) included
    assert sorted({r["configuration"] for r in rows}) == ["mix #0", "single:cpu0", "single:cpu1"]
    assert len(rows) == 3 * 2 * 14 and {int(r["step"]) for r in rows} == set(range(14))
    assert all(float(r["seconds"]) > 0 for r in rows)
    text = md.read_text()
    assert "## Warm-up" in text and "## Statistic" in text and "| trimmed |" in text
    assert "recommended warm-up:" in out and (tmp_path / "e2" / "e2.png").stat().st_size > 0
    # the recorded steps analysed again, without measuring: the same report
    code, again, err = run(capsys, "experiment", "e2", "--reanalyse", tmp_path / "e2", "--window", "3",
                           "--markdown", tmp_path / "again.md")
    assert code == 0, err
    assert (tmp_path / "again.md").read_text() == text
    code, _, err = run(capsys, "experiment", "e2", "--reanalyse", tmp_path, "--markdown", tmp_path / "x.md")
    assert code == 2 and "holds no recorded E2 run" in err
    code, _, err = run(capsys, "experiment", "e2", "--devices", "cpu:2")
    assert code == 2 and "--model: the model to run is needed" in err
    code, out, err = run(capsys, "experiment", "e2", "--model", SMALL, "--input-shape", "2,3,8,8", "--steps", "20",
                         "--out", tmp_path / "e2", "--markdown", md)
    assert code == 2 and "--steps: 20 steps leave too few windows" in err


def test_shuffled_rounds_visit_every_placement_once_per_round_and_return_them_in_order(monkeypatch):
    from placement_core.torch import benchmark as bench
    from placement_core.torch.devspec import parse_devices
    seen = []

    def fake_job(spec, world, settings, merged, progress, total):
        for k, r in spec["items"]:
            seen.append((k, r))
            merged[(k, r)] = {"status": "ok", "steps_s": [float(k)], "warmup_s": [0.0], "losses": [],
                              "bytes_per_step": 0.0, "messages_per_step": 0.0}
        return ""
    monkeypatch.setattr(bench, "_one_job", fake_job)
    devs = parse_devices("cpu:2")
    out = bench._run_items({}, devs, "inprocess", bench.BenchmarkSettings(rounds=3, shuffle=True, seed=4), 6, None)
    rounds = [[k for k, r in seen if r == rnd] for rnd in range(3)]
    assert all(sorted(order) == list(range(6)) for order in rounds)
    assert len({tuple(order) for order in rounds}) > 1  # the rounds' orders differ
    assert [res.steps_s for res in out] == [[float(k)] * 3 for k in range(6)]
    seen.clear()
    bench._run_items({}, devs, "inprocess", bench.BenchmarkSettings(rounds=2), 3, None)
    assert seen == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]


def test_identical_devices_share_their_fastest_figures():
    from placement_core.torch.devspec import parse_devices
    devs = parse_devices("cpu:2,cuda:0")

    def m(conv, step, model="EPYC", threads=1):
        return {"ops": {"conv": {"fwd": conv, "bwd": 2 * conv, "update": 0.0}}, "step_s": step, "steps_s": [step],
                "gemm_flops": 1 / conv, "copy_bandwidth": 1e10, "memory_bytes": 8e9, "model": model,
                "threads": threads, "cores": [0]}
    measured = {"cpu0": m(0.5, 3.0), "cpu1": m(0.25, 4.0), "gpu0": m(0.01, 0.1, model="H100")}
    pooled, groups = pool_identical(devs, measured)
    assert groups == [["cpu0", "cpu1"]]
    for name in ("cpu0", "cpu1"):
        assert pooled[name]["ops"]["conv"] == {"fwd": 0.25, "bwd": 0.5, "update": 0.0}
        assert pooled[name]["step_s"] == 3.0 and pooled[name]["gemm_flops"] == 4.0
    assert pooled["gpu0"] is measured["gpu0"]
    # ranks with different core counts are different devices
    measured["cpu1"] = dict(measured["cpu1"], cores=[0, 1], threads=2)
    assert pool_identical(devs, measured)[1] == []
