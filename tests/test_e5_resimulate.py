"""benchmarks/e5_resimulate.py on the committed ResNet-18 series' first run: the stored calibration gives the
run's stored figures back, and the all-reduce's share of the ranks' cores slows data parallelism toward its
measured step (docs/e5.md)."""

import sys
from pathlib import Path

import pytest

pytest.importorskip("torchvision")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import e5_resimulate  # noqa: E402


@pytest.mark.slow
def test_the_stored_run_is_reproduced_and_the_share_moves_data_parallelism_toward_the_measurement():
    (run,) = e5_resimulate.resimulate(ROOT / "docs/e5/resnet18-runs-2026-11-28", "torchvision:resnet18", (2, 3, 32, 32), 32,
                                      runs={"run1"})
    stored, shared = run["as stored"], run["with the all-reduce's share of the cores"]
    # docs/e5/resnet18-runs-2026-11-28/summary.md: run 1, calibrated tau 0.464, MAPE 16.4 %, 34 placements
    assert stored["kendall_tau"] == pytest.approx(0.464, abs=5e-4) and stored["n"] == 34
    assert stored["mape_pct"] == pytest.approx(16.4, abs=0.05)
    # the stored all-reduce curve: 67.8 ms busy against 32.5 ms alone at 32 MB, b = 2.08, c = 1 / 1.08
    assert run["allreduce_busy_over_alone"] == pytest.approx(2.084, abs=1e-3)
    assert run["collective_demand"] == pytest.approx(1 / (run["allreduce_busy_over_alone"] - 1), rel=1e-12)
    (dp_before, measured), (dp_after, measured_again) = stored["data_parallel_s"], shared["data_parallel_s"]
    assert measured == measured_again == pytest.approx(0.3986, abs=1e-4)
    assert dp_before < dp_after <= measured * 1.01
    assert measured - dp_after < 0.1 * (measured - dp_before)
