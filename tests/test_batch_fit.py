"""The part of an op's measured time that does not shrink with the batch (timings.FIXED): fitted by calibration
from a second measurement at half the batch, kept by micro-batches and batch or channel shards. Every
figure below is worked out by hand from the tables written here (no torch needed)."""

import json

import pytest

from placement_core.cli import main
from placement_core.model.devices import Channel, Device, DeviceGraph
from placement_core.base.errors import InputError
from placement_core.analysis.calibration_fit import CalibrationSettings, build_calibration, fastest, fixed_part
from placement_core.model.graph import Graph, Op
from placement_core.problem import Problem
from placement_core.model.sharding import Split
from placement_core.cost.timings import check_timings, scaled, timing_table

from test_timings_cli import NETWORK, files, simulate, times  # noqa: F401 (files is a fixture)


def test_a_fraction_of_the_work_keeps_the_fixed_part():
    t = {"fwd": 1.0, "fwd_fixed": 0.2, "bwd": 2.0, "update": 0.5}
    assert scaled(t, 0.5) == pytest.approx({"fwd": 0.2 + 0.8 * 0.5, "bwd": 1.0, "update": 0.5})
    assert scaled(t, 0.25, update=0.25) == pytest.approx({"fwd": 0.4, "bwd": 0.5, "update": 0.125})
    assert scaled({"fwd": 1.0, "fwd_fixed": 3.0}, 0.5) == {"fwd": 1.0}  # never more than the whole time


@pytest.mark.parametrize("t_half, fixed", [(7.5, 5.0), (5.0, 0.0), (4.0, 0.0), (10.0, 10.0), (11.0, 10.0)])
def test_the_fixed_part_is_the_intercept_through_both_measurements(t_half, fixed):
    """10 s at batch 32 and 7.5 s at 16: the line t = 5 + 5 b / 32. Kept within [0, 10]: a half batch faster than
    half the time, or slower than the whole, is noise around a proportional or a constant time."""
    assert fixed_part(10.0, t_half, 32, 16) == pytest.approx(fixed)


def test_micro_batches_keep_each_ops_fixed_part(capsys, tmp_path, files):  # noqa: F811
    """GPipe, 2 micro-batches of 2 on one device. a: forward 1 (0.2 fixed), backward 2 (0.4 fixed); b: forward 3
    (1 fixed), backward 4 (none). Per micro-batch 0.6 + 2 + 2 + 1.2 = 5.8; two, and the updates 0.5 + 0.25."""
    doc = {"format": "placement-timings/1", "network": "tiny", "input_shape": [1, 4], "batch_size": 4,
           "ops": {"x": times(0.0, 0.0, 0.0), "a": times(1.0, 2.0, 0.5), "b": times(3.0, 4.0, 0.25)}}
    for dev in ("cpu0", "cpu1"):
        doc["ops"]["a"][dev].update(fwd_fixed=0.2, bwd_fixed=0.4)
        doc["ops"]["b"][dev].update(fwd_fixed=1.0)
    path = tmp_path / "fixed.json"
    path.write_text(json.dumps(doc))
    code, out, err = simulate(capsys, files, "--timings", str(path), "--schedule", "gpipe", "--micro-batches", "2")
    assert code == 0, err
    assert json.loads(out)["makespan_s"] == pytest.approx(2 * 5.8 + 0.75)
    code, out, err = simulate(capsys, files, "--timings", str(path))  # the whole batch: the times as measured
    assert code == 0 and json.loads(out)["makespan_s"] == pytest.approx(10.75)


def test_batch_shards_keep_each_ops_fixed_part():
    """fc split by batch over two devices: each half takes 2 + 4/2 forward and 4 + 8/2 backward (12, not the 9
    of a proportional time), then the ring: latency 0.5 + (2 (n-1)/n) 600 bytes / 100 B/s."""
    devs = DeviceGraph("two", [Device(f"cpu{j}", "cpu", 1e12, 1e12, 1e12) for j in range(2)],
                       [Channel("l01", 100.0, 0.5, (("cpu0", "cpu1"),)), Channel("l10", 100.0, 0.5, (("cpu1", "cpu0"),))])
    ops = [Op("x", "input", output_bytes=100.0, shape=(8, 8)),
           Op("fc", "linear", inputs=("x",), output_bytes=100.0, param_bytes=600.0, shape=(8, 8))]
    table = {"x": {"cpu": {"fwd": 0.0, "bwd": 0.0, "update": 0.0}},
             "fc": {"cpu": {"fwd": 6.0, "fwd_fixed": 2.0, "bwd": 12.0, "bwd_fixed": 4.0, "update": 0.0}}}
    dp = Split("batch", (0, 1))
    p = Problem(Graph("g", ops, 8), devs, timings=table, splits=(dp,), comm_efficiency=1.0)
    ev = p.simulate([p.n_devices, p.n_devices])  # both ops on the split
    assert ev.result.busy == pytest.approx([12.0, 12.0])
    assert ev.result.makespan == pytest.approx(12.0 + 0.5 + 600.0 / 100.0)
    whole = Problem(Graph("g", ops, 8), devs, timings=table, comm_efficiency=1.0)
    assert whole.simulate([0, 0]).result.makespan == pytest.approx(18.0)  # one device: as measured


def test_a_fixed_part_larger_than_its_time_or_an_unknown_key_is_refused():
    doc = {"format": "placement-timings/1", "network": "tiny", "batch_size": 4,
           "ops": {"a": {"cpu0": {"fwd": 1.0, "fwd_fixed": 1.5}}}}
    with pytest.raises(InputError, match=r"ops\.a\.cpu0\.fwd_fixed: fwd_fixed is 1.5 s, more than the whole fwd"):
        check_timings(doc, source="t.json")
    doc["ops"]["a"]["cpu0"] = {"fwd": 1.0, "fwd_fix": 0.5}
    with pytest.raises(InputError, match="unknown phase 'fwd_fix'.*fwd_fixed"):
        check_timings(doc, source="t.json")


def test_a_group_of_ops_has_the_sum_of_their_fixed_parts():
    graph = Graph("g", [Op("ab", "linear")], 4)
    doc = {"format": "placement-timings/1", "network": "g", "batch_size": 4,
           "ops": {"a": {"cpu0": {"fwd": 1.0, "fwd_fixed": 0.25, "bwd": 2.0}},
                   "b": {"cpu0": {"fwd": 3.0, "fwd_fixed": 0.5, "bwd": 1.0, "bwd_fixed": 0.125}}}}
    table = timing_table(check_timings(doc), graph, groups={"ab": ["a", "b"]})
    assert table["ab"]["cpu0"] == {"fwd": 4.0, "bwd": 3.0, "update": 0.0, "fwd_fixed": 0.75, "bwd_fixed": 0.125}


def test_calibration_turns_two_batches_into_fixed_parts():
    """Measured at batch 4 and 2: a's forward 1.0 and 0.75 (fixed 0.5), backward 2.0 and 1.0 (none); the step is
    twice the ops' sum, so every time (fixed parts too) is scaled by 2. Rounds keep their fastest figures."""
    from placement_core.torch.devspec import parse_devices
    graph = Graph("tiny", [Op("x", "input", shape=(4, 4)), Op("a", "linear", inputs=("x",), shape=(4, 4))], 4)
    devs = parse_devices("cpu:1")

    def measured(fwd_half, half=2):
        return {"ops": {"x": {"fwd": 0.0, "bwd": 0.0, "update": 0.0, "fwd_half": 0.0, "bwd_half": 0.0},
                        "a": {"fwd": 1.0, "bwd": 2.0, "update": 0.0, "fwd_half": fwd_half, "bwd_half": 1.0}},
                "half_batch": half, "step_s": 6.0, "steps_s": [6.0], "gemm_flops": 1e9, "copy_bandwidth": 1e9,
                "memory_bytes": 1e9, "model": "cpu", "threads": 1, "cores": [0]}
    one = fastest([measured(0.9), measured(0.75)])
    cal = build_calibration(graph, "test", (1, 4), devs, {"cpu0": one}, {}, CalibrationSettings())
    assert cal.timings["ops"]["a"]["cpu0"] == pytest.approx({"fwd": 2.0, "bwd": 4.0, "update": 0.0,
                                                             "fwd_fixed": 1.0, "bwd_fixed": 0.0})
    assert cal.report["devices"]["cpu0"]["fixed_share"] == pytest.approx(1.0 / 6.0)
    # a round that could not run the half batch: no fixed parts at all
    cal = build_calibration(graph, "test", (1, 4), devs, {"cpu0": fastest([measured(0.75), measured(0.75, 0)])},
                            {}, CalibrationSettings())
    assert "fwd_fixed" not in cal.timings["ops"]["a"]["cpu0"] and "fixed_share" not in cal.report["devices"]["cpu0"]
