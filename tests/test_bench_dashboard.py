"""benchmarks/dashboard.py's network path, run once in Chromium: the first load (the Network page's picture),
the switch to Inception-V3 and its explorable graph opened; every figure present and no action failed. The
figures themselves are machine speed, checked by nobody here (docs/dashboard.md "Speed")."""

from __future__ import annotations

import importlib.util
import json

import pytest
from browser_util import ROOT, missing

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]


def test_the_dashboard_benchmark_measures_the_network_actions(capsys):
    if missing():
        pytest.skip(missing())
    spec = importlib.util.spec_from_file_location("bench_dashboard", ROOT / "benchmarks" / "dashboard.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--only", "network,graph", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "errors" not in out, out.get("errors")
    for key in ("cold_start_s", "first_load_s", "switch_network_s", "open_graph_s", "graph_redraw_fit_ms",
                "graph_redraw_labels_ms"):
        assert out[key] > 0, key
