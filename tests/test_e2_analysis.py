"""E2's analysis (warm-up, statistic, outliers) and E5's repeated-run summary, on step times made up by hand.

No torch needed: the analysis is plain Python over lists of step times.
"""

import math

import pytest

from placement_core.experiments.e2 import (analyse, estimate, first_window_bias, outliers, profile,
                                           recommended_warmup, residuals, statistic_table, windows)


def test_statistics_by_hand():
    xs = [4.0, 1.0, 100.0, 2.0, 3.0]
    assert estimate(xs, "mean") == 22.0
    assert estimate(xs, "median") == 3.0
    assert estimate(xs, "min") == 1.0
    assert estimate(xs, "trimmed") == 3.0  # 20 % of 5 = 1 step off each end: mean of 2, 3, 4
    assert residuals([1.0, 2.0, 4.0]) == [-0.5, 0.0, 1.0]  # against the median, 2
    assert windows(list(range(12)), 2, 4) == [[2, 3, 4, 5], [6, 7, 8, 9]]


def warm_runs():
    """Four runs of 30 steps: step 0 twice the steady time, step 1 one and a half times, then 1.0 +- 0.1 %."""
    return [[2.0, 1.5] + [1.0 + (0.001 if (i + k) % 2 else -0.001) for i in range(28)] for k in range(4)]


def test_the_warm_up_is_where_the_average_residual_settles():
    runs = warm_runs()
    rows = profile(runs)
    # the median of each run is 1.0 - 0.001 or 1.0 + 0.001 (28 alternating values and 2.0, 1.5 above them)
    assert [round(r["mean_residual"], 2) for r in rows[:3]] == [1.0, 0.5, 0.0]
    assert rows[0]["slowest_share"] == 1.0 and rows[1]["slowest_share"] == 0.0
    assert recommended_warmup(runs) == 2
    # no warm-up effect at all: no warm-up
    assert recommended_warmup([r[2:] for r in runs]) == 0


def test_a_step_that_is_the_slowest_far_more_often_than_chance_is_a_warm_up_step():
    from placement_core.experiments.e2 import slowest_p_value
    # 4 runs of 20 steps at 1.0 +- 0.1 %; step 0 only 0.3 % slower (under the 0.5 % floor) but the slowest in
    # every run: chance (1/20)^4 = 6.25e-6
    runs = [[1.003] + [1.0 + (0.001 if (i + k) % 2 else -0.001) for i in range(19)] for k in range(4)]
    assert slowest_p_value(runs, 0) == pytest.approx(0.05 ** 4)
    assert slowest_p_value(runs, 1) == 1.0  # never the slowest: certain to be at least that often
    assert recommended_warmup(runs) == 1
    # the slowest in one run of four: 1 - (19/20)^4 = 0.185, no evidence
    runs[1][0] = runs[2][0] = runs[3][0] = 1.0
    assert slowest_p_value(runs, 0) == pytest.approx(1 - 0.95 ** 4)
    assert recommended_warmup(runs) == 0


def test_outliers_are_counted_where_they_fall():
    run = [1.0] * 20
    run[0], run[13] = 3.0, 1.5
    found = outliers([run, [1.0] * 20])
    # Q1 = Q3 = 1.0: everything above 1.0 is an outlier, two steps of 40
    assert found == {"count": 2, "share": 0.05, "in_first_three": 1, "largest": 3.0, "indices": [0, 13]}


def three_configs():
    """A (1.0) has one slow step (11.0) in its first window; B (2.0) and C (2.5) are steady. Each run: a
    warm-up step (100) and three windows of five steps."""
    a = [100.0] + [11.0, 1.0, 1.0, 1.0, 1.0] + [1.0] * 10
    b = [100.0] + [2.0] * 15
    c = [100.0] + [2.5] * 15
    return [[a], [b], [c]]


def test_the_statistic_that_orders_configurations_alike_in_every_window_wins():
    table = {r["statistic"]: r for r in statistic_table(three_configs(), 1, 5)}
    # mean: window 0 reads A = 3.0 (B 2.0 < C 2.5 < A), windows 1 and 2 read A = 1.0 (A < B < C).
    # Kendall tau between windows 0 and 1: (A,B) and (A,C) discordant, (B,C) concordant: -1/3; the same
    # for windows 0 and 2; windows 1 and 2 agree: 1. Mean (-1/3 - 1/3 + 1) / 3 = 1/9.
    assert table["mean"]["tau"] == pytest.approx(1 / 9)
    # the median, the minimum and the trimmed mean (one step off each end of five) never see the slow step
    for stat in ("median", "min", "trimmed"):
        assert table[stat]["tau"] == 1.0 and table[stat]["windows"] == 3
    # spread: A's mean moves (3, 1, 1: stdev sqrt(4/3) over mean 5/3), B's and C's do not; the median over
    # the three configurations is 0
    assert table["mean"]["spread"] == 0.0
    result = analyse(["A", "B", "C"], three_configs(), 5)
    assert result.statistic == "median"  # a tie between robust statistics goes to the first of them


def test_a_too_short_warm_up_reads_the_first_window_slow():
    run = [3.0] + [1.0] * 30
    rows = {r["warmup"]: r for r in first_window_bias([[run]], 5, "mean")}
    assert rows[0]["bias"] == pytest.approx(0.4)  # (3 + 4) / 5 against 1.0
    assert rows[1]["bias"] == 0.0 and rows[5]["bias"] == 0.0
    assert first_window_bias([[run]], 5, "median")[0]["bias"] == 0.0


def test_e5_series_summary_states_each_run_and_whether_the_target_held():
    from placement_core.experiments.e5 import E5Result, E5Settings
    from placement_core.experiments.e5_series import summary

    def result(tau, tau_min):
        m = {"pearson_r": 0.95, "kendall_tau": tau, "mape_pct": 5.0, "n": 28}
        return E5Result([], {"calibrated": {"median": m, "min": dict(m, kendall_tau=tau_min)},
                             "default": {"median": dict(m, kendall_tau=0.5), "min": m}}, {}, "median",
                        ((0.4, 0.5, 0.6), (0.7, 0.6, 0.6)))
    text = summary([result(0.84, 0.8), result(0.79, 0.9)], "torchvision:x", "cpu:2", E5Settings(), "cmd")
    assert "| [1](run1/report.md) | 28 | **0.840** | 0.950 | 5.0 % | min 0.800 | 0.500 | – | 0.40 → 0.70 |" in text
    # with placements that split ops, the calibrated τ over the others too
    whole = result(0.84, 0.8)
    whole.metrics["calibrated, whole ops"] = {"median": {"pearson_r": 0.9, "kendall_tau": 0.812, "mape_pct": 4.0,
                                                         "n": 24}}
    assert "| 0.500 | 0.812 (24) | 0.40 → 0.70 |" in summary([whole], "x", "cpu:2", E5Settings(), "")
    assert "τ over the runs: 0.790 – 0.840; τ ≥ 0.8 in 1 of 2 runs." in text
    assert "in every run" in summary([result(0.84, 0.8)], "x", "cpu:2", E5Settings(), "")
    assert not math.isnan(result(0.84, 0.8).metrics["calibrated"]["median"]["kendall_tau"])
