"""benchmarks/e5_resimulate.py on the committed ResNet-18 series of 2026-11-28, first run (stored without a
shared resource): the stored data-parallel step comes back, and the all-reduce's share of the ranks' cores
adds what a closed form says it costs: the all-reduce's alone time at the bucket's bytes (docs/e5.md)."""

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchvision")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import e5_resimulate  # noqa: E402

RUN = ROOT / "docs/e5/resnet18-runs-2026-11-28"


def alone_seconds(nbytes: float) -> float:
    """The stored all-reduce curve's alone time at nbytes: beyond its last size, its last segment's slope."""
    (curve,) = [c for c in json.load(open(RUN / "run1/calibration/devices.json"))["collectives"]
                if c["op"] == "allreduce"]
    (b0, b1), (t0, t1) = curve["sizes"][-2:], curve["seconds"][-2:]
    return t1 + (nbytes - b1) * (t1 - t0) / (b1 - b0)


@pytest.mark.slow
def test_the_share_of_the_cores_costs_the_all_reduce_its_alone_time():
    (run,) = e5_resimulate.resimulate(RUN, "torchvision:resnet18", (2, 3, 32, 32), 32, runs={"run1"})
    stored, shared = run["as stored"], run["with the all-reduce's share of the cores"]
    # the stored all-reduce curve: 67.8 ms busy against 32.5 ms alone at 32 MB, b = 2.08, c = 1 / 1.08
    assert run["allreduce_busy_over_alone"] == pytest.approx(2.084, abs=1e-3)
    assert run["collective_demand"] == pytest.approx(1 / (run["allreduce_busy_over_alone"] - 1), rel=1e-12)
    (dp_before, measured), (dp_after, measured_again) = stored["data_parallel_s"], shared["data_parallel_s"]
    # docs/e5/resnet18-runs-2026-11-28/run1/report.md: data parallel 244.9 ms calibrated, 398.6 ms measured
    assert dp_before == pytest.approx(0.2449, abs=5e-4)
    assert measured == measured_again == pytest.approx(0.3986, abs=1e-4)
    # ResNet-18's 11,689,512 fp32 weights in one bucket: 46.76 MB, 44.3 ms alone by the curve. The ranks
    # (capacity 2) compute at 1 / (1 + c) of their speed while it runs at b times its alone time, so they
    # lose b A c / (1 + c) = A when c = 1 / (b - 1): the step grows by about A.
    a = alone_seconds(11_689_512 * 4)
    assert a == pytest.approx(0.0443, abs=5e-4)
    assert dp_after - dp_before == pytest.approx(a, rel=0.05)
