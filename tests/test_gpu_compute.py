"""benchmarks/gpu_compute.py: the measuring half runs (on a CPU at tiny sizes) and the predicting half
gives the roofline worked out by hand and the simulator's own single-GPU step."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_compute  # noqa: E402

H200 = gpu_compute.GPUS["h200"]


def test_a_large_gemm_is_compute_bound_at_the_measured_matmul_rate():
    """8192 x 8192 x 8192: the least wasteful tile is 64 x 64 (256 x 128 tiles leave 64 of 2,112 slots of 16
    waves empty, 64 x 64 tiles 116 of 16,500 slots of 125 waves), so the useful share is 16384 / 16500;
    time = 2 * 8192^3 / (792.1e12 * 16384 / 16500) at the H100's MAMF rate, 0.9 of the 989.4e12 peak without it."""
    c = {"batch": 1, "m": 8192, "n": 8192, "k": 8192}
    assert gpu_compute.predict_gemm(c, H200) == pytest.approx(2 * 8192 ** 3 / (792.1e12 * 16384 / 16500), rel=1e-12)
    plain = {k: v for k, v in H200.items() if k != "achieved_flops_by_precision"}
    expected = 2 * 8192 ** 3 / (0.9 * 989.4e12 * 16384 / 16500)
    assert gpu_compute.predict_gemm(c, plain) == pytest.approx(expected, rel=1e-12)


def test_a_thin_gemm_is_bound_by_its_bytes():
    """m = 8 rows through an 8192 x 8192 weight: 2 * 8 * 8192^2 FLOPs take 11.2 us at the measured rate with
    64 x 64 tiles (8 of 64 rows useful; 128 tiles in one wave of 132), but 2 * (8*8192 + 8192^2 + 8*8192)
    bytes at 4.8 TB/s (the default profile's memory term has no efficiency) take 28.0 us."""
    c = {"batch": 1, "m": 8, "n": 8192, "k": 8192}
    bytes_ = 2.0 * (8 * 8192 + 8192 * 8192 + 8 * 8192)
    assert gpu_compute.predict_gemm(c, H200) == pytest.approx(bytes_ / 4.8e12, rel=1e-12)


@pytest.mark.workers
def test_measure_on_a_cpu_then_predict_with_the_simulator(tmp_path):
    out = tmp_path / "m.json"
    run = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_compute.py"), "measure", "--device", "cpu",
                          "--dtype", "float32", "--small", "--out", str(out)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    data = json.loads(out.read_text())
    assert [g["name"] for g in data["gemms"]] == [c["name"] for c in gpu_compute.gemm_cases(small=True)]
    assert all(g["seconds"] > 0 for g in data["gemms"]) and data["steps"][0]["seconds"] > 0
    table = tmp_path / "t.json"
    assert gpu_compute.main(["predict", str(out), "--json", str(table)]) == 0
    rows = json.loads(table.read_text())
    [step] = rows["steps"]
    # the step's prediction is `placement simulate` of the same network on one H200, every op on it
    sim = subprocess.run([sys.executable, "-m", "placement_core", "simulate", "--network", step["network"],
                          "--batch-size", "2", "--devices", "dgx-h100:nodes=1", "--placement", "single:n0g0",
                          "--precision", "bf16", "--json"], capture_output=True, text=True, cwd=ROOT)
    h100 = json.loads(sim.stdout)["batch_time_s"]
    # same tensor cores as the H100, more HBM bandwidth: never slower, and a tiny network is memory bound
    assert 0 < step["predicted_s"] <= h100
    assert step["ratio"] == pytest.approx(step["seconds"] / step["predicted_s"])


def test_forward_times_by_kind_sum_the_layers_and_match_the_simulators_ops():
    step = {"network": "gpt:layers=2,hidden=128,heads=4,seq=64,vocab=1000", "batch": 2}
    pred = gpu_compute.predicted_forward(step, H200)
    assert {"embed", "l0.qkv", "l1.scores", "l1.add2", "ln_f", "logits", "loss"} <= set(pred)
    measured = {"l0.qkv": 1.0, "l1.qkv": 2.0, "logits": 5.0}
    kinds = gpu_compute.by_kind(measured, pred)
    assert kinds["qkv"] == (3.0, pytest.approx(pred["l0.qkv"] + pred["l1.qkv"]))
    assert kinds["logits"] == (5.0, pred["logits"]) and set(kinds) == {"qkv", "logits"}
