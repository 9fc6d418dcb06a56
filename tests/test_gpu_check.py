"""scripts/gpu-check.sh: says so and writes nothing without a GPU; otherwise runs each step as a user would and
writes a report that names every step, its exit and its figures, whatever failed."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import gpu_check  # noqa: E402


def test_without_a_gpu_it_says_so_writes_nothing_and_exits_0(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(gpu_check, "gpus", lambda: [])
    assert gpu_check.main(["--out", str(tmp_path / "gpu")]) == 0
    assert "no CUDA GPU here" in capsys.readouterr().out
    assert not (tmp_path / "gpu").exists()


def test_an_unknown_step_is_one_error_line(capsys):
    assert gpu_check.main(["--only", "import,warp"]) == 2
    assert capsys.readouterr().err.strip() == ("error: --only: unknown step 'warp'. Use some of: import, calibrate, "
                                               "single, split, sharded, pipeline, e5")


@pytest.mark.parametrize("n_gpus, devices, first", [(1, "cpu,cuda:0", "gpu0"), (2, "cuda:0,cuda:1", "gpu0")])
def test_one_gpu_pairs_with_the_host_cpu_and_two_gpus_pair_together(n_gpus, devices, first):
    assert gpu_check.device_sets(n_gpus, rehearse=False) == (devices, first)
    assert gpu_check.device_sets(n_gpus, rehearse=True) == ("cpu:2", "cpu0")


def test_the_report_names_every_step_its_exit_its_figures_and_what_a_failure_printed(tmp_path, monkeypatch):
    """Steps run through run_step (here a stand-in with canned outputs); the sharded step needs the import's
    network, e5 the calibration, and a missing one is reported as skipped rather than run."""
    seen = []

    def fake(name, argv, timeout, env):
        seen.append((name, timeout))
        if name == "import":
            Path(argv[argv.index("--out") + 1]).write_text(json.dumps(
                {"format": "placement-network/1", "name": "resnet18",
                 "ops": [{"name": "x", "kind": "input"}, {"name": "conv1", "kind": "conv", "inputs": ["x"]}]}))
        out = {"single": json.dumps({"median_step_s": 0.0123, "status": "ok", "peak_memory_bytes": {"gpu0": 2e8},
                                     "profiles": ["/w/profile/placement0-rank0.json"]})}.get(name, "")
        code = 1 if name == "split" else 0
        return {"step": name, "command": "placement " + " ".join(argv), "exit": code, "seconds": 1.0,
                "stdout": out, "stderr": "error: split: it broke\n" if code else ""}

    monkeypatch.setattr(gpu_check, "gpus", lambda: ["NVIDIA H200"])
    monkeypatch.setattr(gpu_check, "run_step", fake)
    assert gpu_check.main(["--out", str(tmp_path)]) == 1  # a step failed
    [work] = list(tmp_path.iterdir())
    assert work.name.endswith("-nvidia-h200")
    text = (work / "report.md").read_text()
    assert "GPUs: NVIDIA H200" in text and "devices used: cpu,cuda:0" in text
    assert "| single | 0 | 1.0 | median step 0.0123 s, status ok; peak gpu0 200.0 MB; profiled step: " \
           "placement0-rank0.json |" in text
    assert "| split | 1 |" in text and "error: split: it broke" in text
    # pipelined runs use CPU ranks only: on a GPU machine the step says why instead of failing
    assert "| pipeline | n/a |" in text and "Not run here: pipelined benchmarks run on CPU ranks only" in text
    assert "| e5 | skipped |" in text  # the stand-in calibration wrote nothing
    assert [n for n, _ in seen] == ["import", "calibrate", "single", "split", "sharded"]
    assert dict(seen)["calibrate"] == gpu_check.TIMEOUTS["calibrate"]
    sharded = json.loads((work / "sharded.json").read_text())
    assert sharded["assignment"] == {"x": "cpu0", "conv1": {"devices": ["cpu0", "gpu0"], "split": "batch"}}


def test_e5_splits_ops_only_over_devices_of_one_kind(tmp_path):
    """One GPU pairs with the host CPU, where E5 has no two devices of one kind to shard over (it refused
    --sharded 2 on the H200 run of 2026-11-28); two GPUs or two CPU ranks keep the sharded placements."""
    def sharded(devices):
        argv = gpu_check.commands(tmp_path, devices, "gpu0")["e5"]
        return argv[argv.index("--sharded") + 1]
    assert sharded("cpu,cuda:0") == "0"
    assert sharded("cuda:0,cuda:1") == "2" and sharded("cpu:2") == "2"
    assert gpu_check.not_applicable("pipeline", "cpu:2") is None
    assert gpu_check.not_applicable("pipeline", "cuda:0,cuda:1") and gpu_check.not_applicable("e5", "cpu,cuda:0") is None
