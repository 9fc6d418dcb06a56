"""Calibration: the link fit by hand, a real two-rank calibration, and the 'local' preset it saves."""

import math
from pathlib import Path

import pytest

from placement_core.formats.catalog import builtin_devices, load_devices
from placement_core.base.errors import InputError
from placement_core.model.graph import Graph, Op
from placement_core.model.placement import single_device
from placement_core.problem import Problem
from placement_core.analysis.calibration_fit import fit_link
from placement_core.cost.timings import load_timings, timing_table

MODELS = str(Path(__file__).resolve().parent / "torch_models.py")
SOURCE = f"{MODELS}:Branchy"
SHAPE = (2, 3, 8, 8)


def test_link_fit_recovers_latency_and_bandwidth():
    sizes = [1e3, 1e4, 1e5, 1e6, 1e7, 1e8]
    latency, bandwidth = fit_link(sizes, [50e-6 + s / 2e9 for s in sizes])
    assert latency == pytest.approx(50e-6) and bandwidth == pytest.approx(2e9)
    # a link that never gets faster than its latency has no negative latency
    latency, bandwidth = fit_link([1e3, 1e6], [1e-6, 1e-3])
    assert latency == 0 and bandwidth == pytest.approx(1e9)


def test_curve_fit_keeps_the_measured_points_and_removes_dips():
    from placement_core.analysis.calibration_fit import fit_curve, isotonic
    # pool adjacent violators by hand: 3, 1 -> 2, 2 (equal weights)
    assert isotonic([1.0, 3.0, 1.0, 4.0]) == [1.0, 2.0, 2.0, 4.0]
    # sizes out of order, a dip at 1e5 (noise: a larger message never arrives sooner) pooled with 1e4 in log
    # time: the geometric mean of 2e-5 and 1e-5 is sqrt(2) * 1e-5
    curve = fit_curve([1e6, 1e3, 1e4, 1e5], [1e-4, 1e-5, 2e-5, 1e-5])
    assert [b for b, _ in curve] == [1e3, 1e4, 1e5, 1e6]
    assert [t for _, t in curve] == pytest.approx([1e-5, 2 ** 0.5 * 1e-5, 2 ** 0.5 * 1e-5, 1e-4])
    # a flat tail is trimmed so that the last segment rises; all flat: no curve
    assert fit_curve([1e3, 1e4, 1e5], [1e-5, 3e-5, 3e-5]) == ((1e3, 1e-5), (1e5, 3e-5))
    assert fit_curve([1e3, 1e4], [1e-5, 1e-5]) == ()


@pytest.fixture(scope="module")
def calibration(tmp_path_factory):
    pytest.importorskip("torch")
    from placement_core.analysis.calibration_fit import CalibrationSettings
    from placement_core.torch.calibrate import calibrate
    return calibrate(SOURCE, SHAPE, "cpu:2", batch_size=4, name="branchy",
                     settings=CalibrationSettings(sizes=(1000, 100_000, 10_000_000), steps=3, min_time=0.01,
                                                          rounds=2, fit_placements=3, fit_rounds=1, fit_steps=2))


@pytest.mark.workers
def test_calibration_measures_every_op_and_the_link(calibration):
    devices, t = calibration.devices, calibration.timings
    assert devices.names == ["cpu0", "cpu1"] and [c.name for c in devices.channels] == ["cpu0-cpu1"]
    link = devices.channels[0]
    assert link.bandwidth > 0 and link.latency >= 0 and set(link.routes) == {("cpu0", "cpu1"), ("cpu1", "cpu0")}
    measured = t["channels"]["cpu0-cpu1"]
    assert len(measured["seconds"]) == 3 and all(s > 0 for s in measured["seconds"])
    # the size-dependent link model: the measured points (made non-decreasing), kept in the report, and in the
    # device graph when they reproduce the whole-step runs better than latency + bytes / bandwidth
    curve = tuple(tuple(p) for p in measured["transfer_curve"])
    assert [b for b, _ in curve] == [1000, 100_000, 10_000_000][-len(curve):] and len(curve) >= 2
    fit = t["overhead_fit"]
    assert set(fit["link_models"]) == {"curve", "affine"}
    errors = {m: v["log_error_after"] for m, v in fit["link_models"].items()}
    assert fit["link_model"] == min(errors, key=lambda m: (errors[m], m != "curve"))
    assert link.transfer_curve == (curve if fit["link_model"] == "curve" else ())
    assert curve[-1][1] >= max(measured["seconds"][:-1]) and curve[-1][1] == measured["seconds"][-1]
    for d in devices.devices:
        assert d.peak_flops > 0 and d.mem_bandwidth > 0 and d.memory_bytes > 0
    assert t["network"] == "branchy" and t["batch_size"] == 4
    for op in ("stem", "bn", "left", "right", "add", "fc"):
        for dev in ("cpu0", "cpu1"):
            assert t["ops"][op][dev]["fwd"] > 0 and t["ops"][op][dev]["bwd"] > 0
            # measured at half the batch too: the part of each time that does not shrink with it
            assert all(0 <= t["ops"][op][dev][f"{ph}_fixed"] <= t["ops"][op][dev][ph] for ph in ("fwd", "bwd"))
    assert t["ops"]["x"]["cpu0"] == {"fwd": 0.0, "bwd": 0.0, "update": 0.0}
    assert 0 <= t["measured"]["cpu0"]["fixed_share"] <= 1 and t["measured"]["cpu0"]["half_batch"] == 2
    # measured at batches 2 and 1 too (half and a quarter of 4; an eighth is no batch): the times a micro-batch
    # or a batch shard of that size takes, kept as fractions of the batch
    assert t["measured"]["cpu0"]["fit_batches"] == [1, 2]
    assert set(t["measured"]["cpu0"]["line_error"]) == {"1", "2"}
    for op in ("stem", "left", "fc"):
        assert set(t["ops"][op]["cpu0"]["fwd_at"]) == {"0.5", "0.25"}
        assert all(v > 0 for v in t["ops"][op]["cpu0"]["bwd_at"].values())
    assert t["ops"]["stem"]["cpu0"]["update"] > 0 and t["ops"]["relu"]["cpu0"]["update"] == 0
    # the CPU devices' message overhead fitted to whole steps of three calibration placements; the link keeps
    # the ping-pong's latency
    fit = t["overhead_fit"]
    assert fit == calibration.report["overhead_fit"]
    assert fit["placements"] == 3 and fit["devices"] == ["cpu0", "cpu1"]
    assert [d.message_overhead for d in devices.devices] == [fit["message_overhead_s"]] * 2
    assert fit["message_overhead_s"] >= 0 and "latency_fit" not in t
    assert link.latency == measured["latency_s"] and "ping_pong_latency_s" not in measured
    assert all(r["messages_per_step"] > 0 for r in fit["runs"])
    # a least-squares fit on log time, never worse there than no overhead (0 is on its grid) ...
    assert fit["log_error_after"] <= fit["log_error_before"]
    logs = [sum(math.log(r[k] / r["measured_s"]) ** 2 for r in fit["runs"]) for k in ("before_s", "after_s")]
    assert logs == pytest.approx([fit["log_error_before"], fit["log_error_after"]])
    # ... and never much worse in absolute terms
    errors = [sum(abs(r[k] - r["measured_s"]) for r in fit["runs"]) for k in ("before_s", "after_s")]
    assert errors[1] <= errors[0] * 1.5


@pytest.mark.workers
def test_calibration_measures_collectives_and_contention(calibration):
    """All-reduce, all-gather and reduce-scatter over both ranks, alone and while both compute, stored in the
    device graph (docs/formats.md "collectives"); the ranks' slowdown computing together in the report, and a
    shared resource of capacity 2 / slowdown when it exceeds 10 %, with the all-reduce's share of the cores
    when computing ranks slow it (docs/torch.md)."""
    devices, report = calibration.devices, calibration.report
    curves = {c.op: c for c in devices.collectives}
    assert set(curves) == {"allreduce", "allgather", "reducescatter"}
    for c in curves.values():
        assert c.devices == ("cpu0", "cpu1") and len(c.sizes) == 5
        assert all(t > 0 for t in c.seconds) and list(c.seconds) == sorted(c.seconds)
        assert list(c.busy_seconds) == sorted(c.busy_seconds)
    contention = report["contention"]
    assert set(contention["alone_s"]) == {"cpu0", "cpu1"} and contention["slowdown"] > 0
    ar = curves["allreduce"]
    b = ar.busy_seconds[-1] / ar.seconds[-1]  # gloo sums on the ranks' cores: a computing rank slows it
    if contention["slowdown"] > 1.10 or b > 1.05:
        (res,) = devices.shared
        assert res.devices == ("cpu0", "cpu1")
        assert res.capacity == pytest.approx(2 / max(contention["slowdown"], 1.0) if contention["slowdown"] > 1.10
                                             else 2.0)
        assert res.collective_demand == (pytest.approx(min(1 / (b - 1), 10.0)) if b > 1.05 else 0.0)
    else:
        assert devices.shared == ()


def test_overhead_fit_recovers_a_known_overhead():
    """Steps 'measured' by the simulator itself with 300 us per message: the fit finds 300 us again."""
    from placement_core.model.devices import Channel, Device, DeviceGraph
    from placement_core.analysis.calibration_fit import (Calibration, fit_message_overhead, fit_placements, with_message_overhead)
    ops = [Op("x", "input", (), output_bytes=4000)] + [
        Op(f"op{i}", "conv", (f"op{i - 1}" if i else "x",), output_bytes=4000, param_bytes=100) for i in range(20)]
    graph = Graph("chain", ops, batch_size=4)
    devs = DeviceGraph("local", [Device("cpu0", "cpu", 1e10, 1e9, 1e10), Device("cpu1", "cpu", 1e10, 1e9, 1e10)],
                       [Channel("cpu0-cpu1", 1e9, 20e-6, (("cpu0", "cpu1"), ("cpu1", "cpu0")))])
    timings = {"format": "placement-timings/1", "network": "chain", "batch_size": 4,
               "ops": {op.name: {d: {"fwd": 0.0 if op.kind == "input" else 1e-3 * (1 + i % 3),
                                     "bwd": 0.0 if op.kind == "input" else 2e-3, "update": 1e-4}
                                 for d in ("cpu0", "cpu1")} for i, op in enumerate(ops)}}
    table = timing_table(timings, graph)
    truth = Problem(graph, with_message_overhead(devs, ["cpu0", "cpu1"], 3e-4), timings=table)
    runs = [(x, truth.simulate(x).result.batch_time, 0.0) for x in fit_placements(len(graph), 2, 6, seed=0)]
    fitted, fit = fit_message_overhead(Calibration(devs, timings), graph, ["cpu0", "cpu1"], runs)
    assert fit["message_overhead_s"] == pytest.approx(3e-4, rel=1e-3)
    assert [d.message_overhead for d in fitted.devices] == [fit["message_overhead_s"]] * 2
    assert fitted.channels == devs.channels  # the link is left as it was
    assert fit["log_error_after"] < 1e-8 < fit["log_error_before"]
    assert all(r["after_s"] == pytest.approx(r["measured_s"], rel=1e-4) for r in fit["runs"])
    # only the devices named get it: a CUDA device keeps 0
    _, fit_one = fit_message_overhead(Calibration(devs, timings), graph, ["cpu0"], runs)
    assert fit_one["devices"] == ["cpu0"]


@pytest.mark.slow
def test_the_link_model_that_reproduces_the_steps_is_kept():
    """Steps 'measured' by the simulator with one link model and 200 us per message: fitted with both models,
    the one they came from reproduces them exactly, so it is kept with its overhead; forcing a model keeps it."""
    from placement_core.model.devices import Channel, Device, DeviceGraph
    from placement_core.analysis.calibration_fit import (Calibration, fit_message_overhead, fit_placements, with_message_overhead)
    ops = [Op("x", "input", (), output_bytes=4000)] + [
        Op(f"op{i}", "conv", (f"op{i - 1}" if i else "x",), output_bytes=4000 * (1 + i % 4), param_bytes=100)
        for i in range(20)]
    graph = Graph("chain", ops, batch_size=4)
    hump = ((1e3, 5e-5), (8e3, 5e-5), (1e4, 1.5e-3), (1e7, 4e-3))  # a delayed-ack hump at 10 kB
    link = Channel("cpu0-cpu1", 1e9, 20e-6, (("cpu0", "cpu1"), ("cpu1", "cpu0")), transfer_curve=hump)
    devs = DeviceGraph("local", [Device("cpu0", "cpu", 1e10, 1e9, 1e10), Device("cpu1", "cpu", 1e10, 1e9, 1e10)],
                       [link])
    timings = {"format": "placement-timings/1", "network": "chain", "batch_size": 4,
               "ops": {op.name: {d: {"fwd": 0.0 if op.kind == "input" else 1e-3, "bwd": 0.0 if op.kind == "input"
                                     else 2e-3, "update": 1e-4} for d in ("cpu0", "cpu1")} for op in ops}}
    table = timing_table(timings, graph)
    xs = fit_placements(len(graph), 2, 6, seed=0)
    affine = DeviceGraph("local", list(devs.devices), [Channel(link.name, link.bandwidth, link.latency, link.routes)])
    for truth_devices, expected in ((affine, "affine"), (devs, "curve")):
        truth = Problem(graph, with_message_overhead(truth_devices, ["cpu0", "cpu1"], 2e-4), timings=table)
        runs = [(x, truth.simulate(x).result.batch_time, 0.0) for x in xs]
        fitted, fit = fit_message_overhead(Calibration(devs, timings), graph, ["cpu0", "cpu1"], runs, "auto")
        assert fit["link_model"] == expected and fit["message_overhead_s"] == pytest.approx(2e-4, rel=1e-3)
        assert fitted.channels[0].transfer_curve == (hump if expected == "curve" else ())
        other = "curve" if expected == "affine" else "affine"
        assert fit["link_models"][expected]["log_error_after"] < 1e-8 < fit["link_models"][other]["log_error_after"]
    # forced: the curve stays whatever the runs say; no curve at all: one model, "affine"
    fitted, fit = fit_message_overhead(Calibration(devs, timings), graph, ["cpu0", "cpu1"], runs, "affine")
    assert fit["link_model"] == "affine" and fitted.channels[0].transfer_curve == () and "link_models" not in fit
    _, fit = fit_message_overhead(Calibration(affine, timings), graph, ["cpu0", "cpu1"], runs, "auto")
    assert fit["link_model"] == "affine" and "link_models" not in fit
    with pytest.raises(InputError, match="link model"):
        fit_message_overhead(Calibration(devs, timings), graph, ["cpu0"], runs, "fancy")


def test_calibration_placements_vary_the_traffic():
    from placement_core.analysis.calibration_fit import fit_placements
    xs = fit_placements(40, 2, 6, seed=0)
    crossings = [int((x[1:] != x[:-1]).sum()) for x in xs]
    assert len(xs) == 6 and all(set(x.tolist()) <= {0, 1} for x in xs)
    assert min(crossings) >= 1 and max(crossings) > 3 * min(crossings)
    assert [x.tolist() for x in fit_placements(40, 2, 6, seed=0)] == [x.tolist() for x in xs]


def test_calibrated_simulator_reproduces_the_measured_single_device_step(calibration):
    from placement_core.torch.model_import import import_module
    from placement_core.torch.sources import load_model
    graph = import_module(load_model(SOURCE), SHAPE, name="branchy", batch_size=4)
    problem = Problem(graph, calibration.devices, timings=timing_table(calibration.timings, graph))
    for i, name in enumerate(calibration.devices.names):
        step = calibration.report["devices"][name]["step_s"]
        assert problem.simulate(single_device(graph, calibration.devices, i)).result.batch_time == pytest.approx(step)
    with pytest.raises(InputError, match="not branchy at batch 8"):
        timing_table(calibration.timings, graph.with_batch_size(8))


def test_saved_as_the_local_preset(calibration, tmp_path, monkeypatch):
    from placement_core.torch.calibrate import save_calibration
    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path / "home"))
    with pytest.raises(InputError, match="no calibrated 'local' preset yet"):
        load_devices("local")
    written = save_calibration(calibration, tmp_path / "out")
    assert (tmp_path / "out" / "devices.json") in written and (tmp_path / "out" / "timings.json") in written
    assert "local" in builtin_devices() and "malvik" in builtin_devices()
    assert load_devices("local").names == ["cpu0", "cpu1"]
    graph = Graph("branchy", [Op(n, "input" if n == "x" else "conv", () if n == "x" else ("x",),
                                 shape=(4, 3, 8, 8) if n == "x" else ())
                              for n in calibration.timings["ops"]], batch_size=4)
    table = load_timings("local", graph)
    assert set(table) == set(calibration.timings["ops"])
    with pytest.raises(InputError, match="no saved calibration 'other'"):
        load_timings("other", graph)
    groups = {"x": ["x"], "rest": [n for n in calibration.timings["ops"] if n != "x"]}
    coarse = Graph("branchy", [Op("x", "input", (), shape=(4, 3, 8, 8)), Op("rest", "conv", ("x",))], 4)
    summed = load_timings(str(tmp_path / "out" / "timings.json"), coarse, groups)
    total = sum(t["cpu1"]["bwd"] for t in calibration.timings["ops"].values())
    assert summed["rest"]["cpu1"]["bwd"] == pytest.approx(total)


def test_calibrating_a_gpu_measures_its_ops_and_its_link():
    """Runs wherever a GPU is at hand: the GPU rank must trace shapes on the CPU copy of the model."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from placement_core.analysis.calibration_fit import CalibrationSettings
    from placement_core.torch.calibrate import calibrate
    cal = calibrate(SOURCE, SHAPE, "cpu,cuda:0", batch_size=4, name="branchy",
                    settings=CalibrationSettings(sizes=(1000, 100_000), steps=3, min_time=0.01, rounds=1,
                                                 fit_placements=2, fit_rounds=1, fit_steps=2))
    assert cal.devices.names == ["cpu0", "gpu0"]
    assert all(cal.timings["ops"]["stem"][d]["fwd"] > 0 for d in cal.devices.names)
    assert all(c.bandwidth > 0 for c in cal.devices.channels)


@pytest.mark.workers
@pytest.mark.timeout(300)
def test_three_ranks_measure_every_pair_without_waiting_on_each_other():
    """Each pair's ping-pong synchronises only that pair (it used to wait on a barrier the third rank never
    entered, so calibrating three devices hung)."""
    pytest.importorskip("torch")
    from placement_core.analysis.calibration_fit import CalibrationSettings
    from placement_core.torch.calibrate import calibrate
    cal = calibrate(SOURCE, SHAPE, "cpu:3", batch_size=4, name="branchy",
                    settings=CalibrationSettings(sizes=(1000, 100_000), steps=2, min_time=0.005, rounds=1,
                                                 fit_placements=0, timeout=240))
    assert sorted(cal.timings["channels"]) == ["cpu0-cpu1", "cpu0-cpu2", "cpu1-cpu2"]
    assert all(len(c["seconds"]) == 2 and min(c["seconds"]) > 0 for c in cal.timings["channels"].values())
