"""E5's own statistics (Pearson r, Kendall τ-b, MAPE) on examples worked out by hand; scipy agrees where present.

No torch needed: ``placement_core.experiments.e5`` imports numpy only (torch when it runs).
"""

import math

import pytest

from placement_core.analysis.stats import kendall_tau, mape
from placement_core.analysis.stats import pearson_r as pearson
from placement_core.experiments.e5 import metrics


def test_pearson_by_hand():
    # x - mean = -2,-1,0,1,2; y - mean(4) = -2,0,1,0,1: Sxy = 4 + 2 = 6, Sxx = 10, Syy = 6
    assert pearson([1, 2, 3, 4, 5], [2, 4, 5, 4, 5]) == pytest.approx(6 / math.sqrt(60), rel=1e-12)
    assert pearson([1, 2, 3], [3, 5, 7]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(pearson([1, 2, 3], [4, 4, 4]))  # no spread: undefined
    assert math.isnan(pearson([1], [2]))


def test_kendall_tau_b_by_hand():
    # no ties: pairs (0,1) (0,2) (0,3) (1,3) (2,3) concordant, (1,2) discordant -> (5 - 1) / 6
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    # ties: pairs (0,1) (0,2) (0,3) concordant, (1,3) discordant, (1,2) tied in x only, (2,3) tied in y only:
    # tau-b = (C - D) / sqrt((n0 - tx) (n0 - ty)) = (3 - 1) / sqrt((6 - 1) (6 - 1)) = 0.4 (tau-a would be 1/3)
    assert kendall_tau([1, 2, 2, 3], [1, 3, 2, 2]) == pytest.approx(0.4)
    # a pair tied in both counts in neither: x ties (0,1) and (2,3), y ties (0,1); the 4 other pairs concordant:
    # (4 - 0) / sqrt((6 - 2) (6 - 1))
    assert kendall_tau([1, 1, 2, 2], [5, 5, 6, 7]) == pytest.approx(4 / math.sqrt(20))
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(kendall_tau([2, 2, 2], [1, 2, 3]))  # every pair tied in x
    assert math.isnan(kendall_tau([1], [1]))


def test_mape_by_hand():
    # |110 - 100| / 100 = 10 %, |90 - 100| / 100 = 10 %, |50 - 40| / 40 = 25 %: mean 15 %
    assert mape([110, 90, 50], [100, 100, 40]) == pytest.approx(15.0)
    assert mape([1.0, 2.0], [1.0, 2.0]) == 0.0
    # relative to the measured value, not the prediction: 200 against 100 is 100 %, 50 against 100 is 50 %
    assert mape([200, 50], [100, 100]) == pytest.approx(75.0)


def test_metrics_bundle():
    m = metrics([110, 90, 50], [100, 100, 40])
    assert m["n"] == 3 and m["mape_pct"] == pytest.approx(15.0)
    # predicted 110, 90, 50 against measured 100, 100, 40: pairs (0,2) and (1,2) concordant, (0,1) tied in y
    assert m["kendall_tau"] == pytest.approx(2 / math.sqrt(3 * 2))
    # x - mean(250/3) = 80/3, 20/3, -100/3; y - 80 = 20, 20, -40: Sxy = 6000/3, Sxx = 16800/9, Syy = 2400
    assert m["pearson_r"] == pytest.approx(2000 / math.sqrt(16800 / 9 * 2400), rel=1e-12)


CASES = [([1, 2, 3, 4, 5], [2, 4, 5, 4, 5]), ([1, 2, 2, 3], [1, 3, 2, 2]), ([1, 1, 2, 2], [5, 5, 6, 7]),
         ([3.1, 0.2, 7.5, 7.5, 1.0, 4.4], [2.0, 0.5, 9.0, 6.0, 1.0, 6.0]), ([110, 90, 50], [100, 100, 40])]


@pytest.mark.parametrize("x, y", CASES)
def test_agrees_with_scipy(x, y):
    stats = pytest.importorskip("scipy.stats")
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], rel=1e-9)
    assert kendall_tau(x, y) == pytest.approx(stats.kendalltau(x, y, variant="b")[0], rel=1e-9)


def test_report_states_the_fitted_message_overhead_and_reads_old_latency_fits():
    from placement_core.experiments.e5 import E5Settings, report
    row = {"label": "single:cpu0", "kind": "single", "status": "ok", "measured_median_s": 0.2, "q1_s": 0.19,
           "q3_s": 0.21, "sim_calibrated_s": 0.19, "sim_default_s": 0.1, "messages_per_step": 0}
    m = {"pearson_r": 0.9, "kendall_tau": 0.8, "mape_pct": 5.0, "n": 1}
    metrics_ = {p: {"median": m, "min": m} for p in ("calibrated", "default")}
    measured = {"cpu0": {"step_s": 0.2, "ops_sum_s": 0.1, "scale": 2.0, "gemm_flops": 1e11, "copy_bandwidth": 1e10}}
    link = {"latency_s": 40e-6, "bandwidth": 3e9}
    doc = {"measured": measured, "channels": {"cpu0-cpu1": link},
           "overhead_fit": {"message_overhead_s": 2.5e-4, "devices": ["cpu0", "cpu1"], "placements": 6,
                            "log_error_before": 0.5, "log_error_after": 0.05, "runs": []}}
    text = report("net", "src", (1, 3, 8, 8), 4, "cpu:2", [row], metrics_, doc, E5Settings(), "cmd")
    assert ("- message overhead: 250 us of device time per message sent and per message received on cpu0, cpu1"
            in text)
    assert "fitted to 6 whole-step runs of calibration placements (squared log error 0.5 without it, 0.05 with it)" \
        in text
    assert "- cpu0-cpu1: latency 40 us (ping-pong), bandwidth 3.000 GB/s" in text
    # a calibration from before the overhead fitted the link latency instead
    old = {"measured": measured, "latency_fit": {"latency_s": 3e-4, "placements": 6, "runs": []},
           "channels": {"cpu0-cpu1": {**link, "latency_s": 3e-4, "ping_pong_latency_s": 40e-6}}}
    text = report("net", "src", (1, 3, 8, 8), 4, "cpu:2", [row], metrics_, old, E5Settings(), "cmd")
    assert "message overhead" not in text
    assert ("- cpu0-cpu1: latency 300 us (fitted to 6 whole-step runs of calibration placements; ping-pong: 40 us)"
            in text)


def test_e5_rows_carry_intervals_and_the_report_counts_ties(tmp_path):
    """Issue 29 (5): the hand-written network of test_timings_cli, with cpu1 1 % slower than cpu0 in a's forward
    and a 20 % spread on it: both single-device placements get an interval around their simulated time, the
    faster is tied with the slower, the report shows the band and the count, and the scatter draws it."""
    import numpy as np

    from test_uncertainty import problem as tiny_problem
    from test_timings_cli import TIMINGS

    from placement_core.experiments.e5 import Candidate, E5Settings, plot, report, with_intervals
    table = {op: {d: dict(v) for d, v in per.items()} for op, per in TIMINGS["ops"].items()}
    table["a"]["cpu1"]["fwd"] = 1.01
    p = tiny_problem(spread_a=0.2, table=table)
    cands = [Candidate("single:cpu0", "single", np.zeros(3, dtype=np.int32)),
             Candidate("single:cpu1", "single", np.ones(3, dtype=np.int32)),
             Candidate("split", "split", np.array([0, 0, 1], dtype=np.int32))]
    rows = [{"label": c.label, "kind": c.kind, "status": "ok", "measured_median_s": 10.0 + i, "q1_s": 9.9 + i,
             "q3_s": 10.1 + i, "sim_calibrated_s": p.simulate(c.placement).result.batch_time,
             "sim_default_s": 1.0, "messages_per_step": 0} for i, c in enumerate(cands)]
    with_intervals(p, cands, rows)
    for r in rows:
        assert r["sim_low_s"] < r["sim_calibrated_s"] < r["sim_high_s"]
    assert rows[0]["tied_with_next"] is True and rows[1]["sim_calibrated_s"] == pytest.approx(10.76)
    m = {"pearson_r": 0.9, "kendall_tau": 0.8, "mape_pct": 5.0, "n": 3}
    metrics_ = {q: {"median": m} for q in ("calibrated", "default")}
    text = report("tiny", "src", (1, 4), 4, "cpu:2", rows, metrics_, {}, E5Settings(), "cmd")
    ties = sum(r["tied_with_next"] for r in rows)
    assert f"{ties} of 3 placements cannot be told from the next faster one" in text
    assert f"| {rows[0]['sim_low_s'] * 1e3:.1f} – {rows[0]['sim_high_s'] * 1e3:.1f} |" in text
    pytest.importorskip("matplotlib")
    plot(rows, metrics_, tmp_path / "scatter.png", "tiny")
    assert (tmp_path / "scatter.png").stat().st_size > 0
    bare = [{k: v for k, v in r.items() if k not in ("sim_low_s", "sim_high_s", "tied_with_next")} for r in rows]
    with_intervals(tiny_problem(table=table), cands, bare)  # no spread recorded: nothing added
    assert "sim_low_s" not in bare[0] and "90 % interval" not in report("tiny", "src", (1, 4), 4, "cpu:2", bare,
                                                                        metrics_, {}, E5Settings(), "cmd")
