"""Issue 29 (3): op times measured at the micro-batch and shard sizes placements use, and the simulator using
the measurements (interpolated) instead of a proportional time. Every figure is worked by hand."""

from __future__ import annotations

import json

import pytest

from placement_core.analysis.calibration_fit import CalibrationSettings, build_calibration, fastest, fixed_fit
from placement_core.base.errors import InputError
from placement_core.cost.timings import at_fraction, check_timings, scaled, timing_table
from placement_core.model.graph import Graph, Op

from test_timings_cli import simulate, times  # noqa: F401
from test_timings_cli import files  # noqa: F401 (a fixture)

T = {"fwd": 10.0, "fwd_fixed": 2.0, "fwd_at": {"0.5": 7.0, "0.25": 5.0}, "bwd": 4.0, "update": 1.0}


@pytest.mark.parametrize("k, expected", [
    (1.0, 10.0), (0.5, 7.0), (0.25, 5.0),  # measured
    (0.75, 8.5), (0.375, 6.0),  # between measurements
    (0.125, 2.0 + 3.0 * 0.5),  # below the smallest: from the fixed part (2) to it (5 at 0.25)
    (2.0, 2.0 + 8.0 * 2.0),  # above the whole: the fixed part's line
])
def test_times_between_measured_fractions_are_interpolated(k, expected):
    assert scaled(T, k)["fwd"] == pytest.approx(expected)
    assert scaled(T, k)["bwd"] == pytest.approx(4.0 * k)  # no points, no fixed part: proportional
    assert at_fraction(10.0, 2.0, None, k) == pytest.approx(2.0 + 8.0 * k)  # the first version's line


def test_the_fixed_part_is_the_least_squares_intercept():
    # batch 8: 10 s; 4: 7 s; 2: 5 s. Means 14/3 and 22/3; Sxx = 56/3, Sxy = 46/3; slope 23/28; intercept 3.5
    assert fixed_fit(10.0, 8, {4: 7.0, 2: 5.0}) == pytest.approx(3.5)
    assert fixed_fit(10.0, 32, {16: 7.5}) == pytest.approx(5.0)  # one point: the line through both
    assert fixed_fit(10.0, 8, {4: 2.0, 2: 1.0}) == 0.0 and fixed_fit(10.0, 8, {4: 12.0, 2: 14.0}) == 10.0


def test_calibration_keeps_every_measured_batch():
    """Batch 8 measured at 4 and 2 too, two rounds (the least of each figure counts); the step is the ops'
    sum, so nothing is scaled."""
    from placement_core.torch.devspec import parse_devices
    graph = Graph("tiny", [Op("x", "input", shape=(8, 4)), Op("a", "linear", inputs=("x",), shape=(8, 4))], 8)

    def measured(fwd4):
        return {"ops": {"x": {"fwd": 0.0, "bwd": 0.0, "update": 0.0},
                        "a": {"fwd": 10.0, "bwd": 20.0, "update": 0.0, "fwd_at": {"4": fwd4, "2": 5.0},
                              "bwd_at": {"4": 10.0, "2": 5.0}}},
                "half_batch": 4, "fit_batches": [4, 2], "step_s": 30.0, "steps_s": [30.0], "gemm_flops": 1e9,
                "copy_bandwidth": 1e9, "memory_bytes": 1e9, "model": "cpu", "threads": 1, "cores": [0]}
    one = fastest([measured(7.5), measured(7.0)])
    assert one["fit_batches"] == [2, 4] and one["ops"]["a"]["fwd_at"] == {"2": 5.0, "4": 7.0}
    cal = build_calibration(graph, "test", (1, 4), parse_devices("cpu:1"), {"cpu0": one}, {}, CalibrationSettings())
    entry = cal.timings["ops"]["a"]["cpu0"]
    assert entry["fwd_fixed"] == pytest.approx(3.5) and entry["bwd_fixed"] == 0.0
    assert entry["fwd_at"] == {"0.25": 5.0, "0.5": 7.0} and entry["bwd_at"] == {"0.25": 5.0, "0.5": 10.0}
    report = cal.report["devices"]["cpu0"]
    assert report["fit_batches"] == [2, 4]
    # the line 3.5 + 6.5 b / 8 misses the forward by 0.25 s at batch 4 and 0.125 s at 2; the backward not at all
    assert report["line_error"] == pytest.approx({"2": 0.125 / 10.0, "4": 0.25 / 17.0})
    check_timings(cal.timings)  # what it writes reads back


def test_micro_batches_take_the_measured_time(capsys, tmp_path, files):  # noqa: F811
    """GPipe, 2 micro-batches of 2 on one device: a (forward 1, backward 2) proportional, b's forward measured
    at half the batch (2.5 s, not 1.5), its backward proportional. Per micro-batch 0.5 + 2.5 + 1 + 2 = 6;
    two, and the updates 0.5 + 0.25."""
    doc = {"format": "placement-timings/1", "network": "tiny", "input_shape": [1, 4], "batch_size": 4,
           "ops": {"x": times(0.0, 0.0, 0.0), "a": times(1.0, 2.0, 0.5), "b": times(3.0, 4.0, 0.25)}}
    for dev in ("cpu0", "cpu1"):
        doc["ops"]["b"][dev].update(fwd_at={"0.5": 2.5, "0.25": 2.0})
    path = tmp_path / "at.json"
    path.write_text(json.dumps(doc))
    code, out, err = simulate(capsys, files, "--timings", str(path), "--schedule", "gpipe", "--micro-batches", "2")
    assert code == 0, err
    assert json.loads(out)["makespan_s"] == pytest.approx(2 * 6.0 + 0.75)


def test_a_group_sums_its_members_times_at_the_fractions_all_have():
    graph = Graph("g", [Op("ab", "linear")], 4)
    doc = {"format": "placement-timings/1", "network": "g", "batch_size": 4,
           "ops": {"a": {"cpu0": {"fwd": 1.0, "bwd": 2.0, "fwd_at": {"0.5": 0.75, "0.25": 0.5}}},
                   "b": {"cpu0": {"fwd": 3.0, "bwd": 1.0, "fwd_at": {"0.5": 2.0}}}}}
    table = timing_table(check_timings(doc), graph, groups={"ab": ["a", "b"]})
    assert table["ab"]["cpu0"]["fwd_at"] == {"0.5": 2.75}  # 0.25: b was not measured there
    assert "bwd_at" not in table["ab"]["cpu0"]


@pytest.mark.parametrize("points, words", [({"1.5": 1.0}, "not a fraction"), ({"x": 1.0}, "not a fraction"),
                                           ({"0.5": -1.0}, "fwd_at.0.5"), ([1, 2], "fwd_at"),
                                           ({str(i / 20): 1.0 for i in range(1, 18)}, "at most 16")])
def test_bad_points_are_named(points, words):
    doc = {"format": "placement-timings/1", "network": "g", "batch_size": 4,
           "ops": {"a": {"cpu0": {"fwd": 1.0, "bwd": 2.0, "fwd_at": points}}}}
    with pytest.raises(InputError, match=words):
        check_timings(doc)
