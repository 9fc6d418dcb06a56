"""The two tiers of the suite (README, "Tests"): the fast one leaves out every heavy kind of test and still
runs at least half of them."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _collected(*args: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return [line for line in out.stdout.splitlines() if "::" in line]


@pytest.mark.slow
def test_the_fast_tier_leaves_out_the_heavy_kinds_and_keeps_at_least_half():
    everything, fast = _collected(), set(_collected("-m", "not slow"))
    heavy = set(_collected("-m", "browser or workers or dask or training or fuzz"))
    assert len(fast) >= len(everything) / 2
    assert heavy and not heavy & fast  # each heavy marker implies slow
    browser = {t for t in everything if t.startswith("tests/test_browser")}
    assert browser and browser <= heavy  # every real-browser test is marked, whether or not its file says so
    # a module-scoped fixture that starts workers makes every test using it heavy (tests/conftest.py)
    assert any(t.startswith("tests/test_torch_calibrate.py::") for t in heavy)
    assert not any(t.startswith("tests/test_torch_calibrate.py::test_calibrated_simulator") for t in fast)
