"""Calibrated timing tables through the CLI (`--timings`): whole batches, micro-batches, the run store.

The table below is written by hand (no torch needed), so every step time is a sum worked out here.
"""

import json

import pytest

from placement_core.cli import main
from placement_core.store import RunStore

NETWORK = {"format": "placement-network/1", "name": "tiny", "batch_size": 4, "ops": [
    {"name": "x", "kind": "input", "output_bytes": 64, "shape": [4, 4]},
    {"name": "a", "kind": "linear", "inputs": ["x"], "fwd_flops": 128, "bwd_flops": 256, "output_bytes": 64,
     "param_bytes": 80, "mem_bytes": 208, "shape": [4, 4]},
    {"name": "b", "kind": "linear", "inputs": ["a"], "fwd_flops": 128, "bwd_flops": 256, "output_bytes": 64,
     "param_bytes": 80, "mem_bytes": 208, "shape": [4, 4]},
]}
DEVICES = {"format": "placement-devices/1", "name": "two", "devices": [
    {"name": "cpu0", "kind": "cpu", "peak_flops": 1e11, "memory_bytes": 1e9, "mem_bandwidth": 1e10},
    {"name": "cpu1", "kind": "cpu", "peak_flops": 1e11, "memory_bytes": 1e9, "mem_bandwidth": 1e10},
], "channels": [{"name": "link", "bandwidth": 1e9, "latency": 0.0, "routes": [["cpu0", "cpu1"], ["cpu1", "cpu0"]]}]}


def times(fwd, bwd, update):
    return {dev: {"fwd": fwd, "bwd": bwd, "update": update} for dev in ("cpu0", "cpu1")}


TIMINGS = {"format": "placement-timings/1", "network": "tiny", "input_shape": [1, 4], "batch_size": 4,
           "ops": {"x": times(0.0, 0.0, 0.0), "a": times(1.0, 2.0, 0.5), "b": times(3.0, 4.0, 0.25)}}


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path / "home"))
    paths = {}
    for name, doc in (("net", NETWORK), ("devices", DEVICES), ("timings", TIMINGS)):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(doc))
    return paths


def simulate(capsys, files, *extra):
    code = main(["simulate", "--network", str(files["net"]), "--devices", str(files["devices"]),
                 "--placement", "single:cpu0", "--json", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_measured_times_replace_the_formulas(capsys, files):
    code, out, err = simulate(capsys, files, "--timings", str(files["timings"]))
    assert code == 0, err
    # one device: every forward, backward and update in turn: 1 + 3 + 4 + 2 + 0.5 + 0.25
    assert json.loads(out)["makespan_s"] == pytest.approx(10.75) and json.loads(out)["measured_op_times"]
    code, out, _ = simulate(capsys, files)
    assert code == 0 and json.loads(out)["makespan_s"] < 1e-3  # the roofline's microseconds
    assert not json.loads(out)["measured_op_times"]
    code = main(["simulate", "--network", str(files["net"]), "--devices", str(files["devices"]),
                 "--placement", "single:cpu0", "--timings", str(files["timings"])])
    assert code == 0 and "profile default with measured op times" in capsys.readouterr().out


def test_micro_batches_scale_forward_and_backward_but_not_the_update(capsys, files):
    # GPipe, 2 micro-batches of 2 on one device: 2 x (0.5 + 1.5 + 2 + 1) + one update per batch 0.75
    code, out, err = simulate(capsys, files, "--timings", str(files["timings"]), "--schedule", "gpipe",
                              "--micro-batches", "2")
    assert code == 0, err
    assert json.loads(out)["makespan_s"] == pytest.approx(10.75)
    # a 3-stage pipeline shows the scaling: a on cpu0, b on cpu1, 2 micro-batches, 64/2 bytes at 0.25 GB/s
    # are ~0 s. cpu0: F1 0.5, F2 0.5; cpu1: F1 1.5 (0.5-2.0), F2 (2.0-3.5), B1 2 (3.5-5.5), B2 (5.5-7.5);
    # cpu0: B1 1 (5.5-6.5), B2 (7.5-8.5), then a's update 0.5 -> 9.0 (b's 0.25 ends at 7.75 on cpu1).
    placement = files["net"].with_name("split.json")
    placement.write_text(json.dumps({"format": "placement/1", "assignment": {"x": "cpu0", "a": "cpu0",
                                                                             "b": "cpu1"}}))
    code = main(["simulate", "--network", str(files["net"]), "--devices", str(files["devices"]), "--placement",
                 str(placement), "--json", "--timings", str(files["timings"]), "--schedule", "gpipe",
                 "--micro-batches", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["makespan_s"] == pytest.approx(9.0, abs=1e-6)


def test_a_table_for_another_batch_or_network_is_refused(capsys, files):
    code, out, err = simulate(capsys, files, "--timings", str(files["timings"]), "--batch-size", "8")
    assert code == 2 and out == ""
    assert err.startswith("error: --timings: the timings are for tiny at batch 4, not tiny at batch 8")
    assert len(err.strip().splitlines()) == 1
    code, _, err = simulate(capsys, files, "--timings", "nowhere")
    assert code == 2 and "no saved calibration 'nowhere' for tiny" in err and "placement calibrate" in err


def test_a_saved_calibration_is_found_by_its_preset_name(capsys, files, tmp_path):
    from placement_core.cost.timings import user_timings_path
    path = user_timings_path("tiny", [1, 4], 4, preset="local")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(TIMINGS))
    code, out, err = simulate(capsys, files, "--timings", "local")
    assert code == 0, err
    assert json.loads(out)["makespan_s"] == pytest.approx(10.75)


def test_optimized_runs_keep_their_timings_in_the_store(capsys, files, tmp_path):
    code = main(["optimize", "--network", str(files["net"]), "--devices", str(files["devices"]), "--algorithm",
                 "single", "--budget", "2", "--json", "--timings", str(files["timings"]), "--schedule", "gpipe",
                 "--micro-batches", "2"])
    out, err = capsys.readouterr()
    assert code == 0, err
    result = json.loads(out)
    assert result["best_objective_s"] == pytest.approx(10.75)
    with RunStore() as store:
        run = store.runs()[0]
        problem = store.problem(run.id)
    assert problem.evaluate([0, 0, 0]) == pytest.approx(10.75)


@pytest.mark.workers
def test_the_dashboard_offers_a_saved_calibration_and_simulates_with_it(tmp_path, monkeypatch):
    """Trace page: 'Op times' lists the calibration saved for ResNet-50 at batch 128; with it, every op on gpu0
    takes 1 ms forward + 2 ms backward (+ 1 ms update for ops with weights), a sum worked out here."""
    from apptest_util import assert_clean, goto, metrics, sidebar_text, start

    from placement_core import load_network
    from placement_core.cost.timings import user_timings_path

    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path / "home"))
    net = load_network("resnet50")
    ops = {op.name: {"gpu0": {"fwd": 1e-3, "bwd": 2e-3 if op.kind != "input" else 0.0, "update": 1e-3 if op.param_bytes else 0.0}}
           for op in net.ops}
    path = user_timings_path("resnet50", [1, 3, 224, 224], 128, preset="local")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"format": "placement-timings/1", "network": "resnet50", "batch_size": 128,
                                "input_shape": [1, 3, 224, 224], "ops": ops}))
    # the input op measures no backward (nothing to differentiate); weighted ops update once
    expected_ms = sum(1 + (2 if op.kind != "input" else 0) + (1 if op.param_bytes else 0) for op in net.ops)
    at = goto(start(), "trace")
    box = at.selectbox(key="trace_timings")
    assert box.options == ["from the cost profile", "measured: calibration 'local'"]
    before = metrics(at)["Time per batch"]
    box.set_value("local").run()
    assert_clean(at)
    # a what-if on the Trace page first; applied, it is what every page and the sidebar use
    assert at.session_state["trace_what_if"].timings == "local" and at.session_state["sim"].timings == ""
    assert metrics(at)["Time per batch"] == f"{expected_ms:.0f} ms" != before
    at.button(key="trace_apply").click().run()
    assert at.session_state["sim"].timings == "local"
    assert metrics(at)["Time per batch"] == f"{expected_ms:.0f} ms"
    assert "measured op times ('local')" in sidebar_text(at)
    # a batch the calibration was not measured at: the formulas apply again, and the page says so
    at.session_state["sim"] = at.session_state["sim"].with_(timings="local")
    goto(at, "network")
    at.number_input(key="net_batch").set_value(64).run()
    goto(at, "trace")
    assert "was not measured for resnet50 at batch 64" in "\n".join(w.value for w in at.warning)
    assert "measured op times" not in sidebar_text(at)
