"""The `placement` command: listing, simulate (table, JSON, trace) and one-line errors."""

import json
import subprocess
import sys

import pytest

from placement_core.formats.catalog import builtin_devices, builtin_networks, load_network, user_devices
from placement_core.cli import main
from test_exprimo_and_cost import NET


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_lists(capsys):
    code, out, _ = run(capsys, "networks", "--json")
    assert code == 0
    assert [r["name"] for r in json.loads(out)] == ["alexnet", "gpt2", "inception_v3", "resnet50", "vgg16", "vit_b_16"]
    code, out, _ = run(capsys, "devices")
    assert code == 0 and "malvik-4gpu-limited-resnet50" in out and "nvlink-8gpu" in out


@pytest.mark.parametrize("network", builtin_networks())
# the shipped presets: a `local` this machine's user calibrated is not in the test's placement home
@pytest.mark.parametrize("devices", [d for d in builtin_devices() if d not in user_devices()])
def test_simulate_every_network_on_every_preset(capsys, network, devices):
    code, out, err = run(capsys, "simulate", "--network", network, "--devices", devices, "--placement", "random:3",
                         "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["makespan_s"] > 0 and r["batch_time_s"] == r["makespan_s"]
    assert isinstance(r["feasible"], bool)
    for d in r["devices"].values():
        assert set(d) >= {"busy_s", "peak_memory_bytes", "memory_bytes", "overflow_bytes"}
        assert 0 <= d["busy_s"] <= r["makespan_s"]
        assert d["overflow_bytes"] == max(0.0, d["peak_memory_bytes"] - d["memory_bytes"])
    assert r["feasible"] == all(d["overflow_bytes"] == 0 for d in r["devices"].values())
    for c in r["channels"].values():
        assert c["bytes"] >= 0 and c["busy_s"] >= 0


def test_simulate_table_and_options(capsys):
    code, out, _ = run(capsys, "simulate", "--network", "resnet50", "--devices", "malvik", "--placement",
                       "single:gpu0", "--batch-size", "32", "--batches", "4", "--in-flight", "2")
    assert code == 0
    assert "resnet50 (176 ops, batch 32, fp32) on malvik" in out
    assert "4 batch(es), 2 in flight" in out
    assert "gpu0" in out and "peak memory" in out and "fits in memory" in out
    code, out, _ = run(capsys, "simulate", "--network", "resnet50", "--devices", "malvik", "--placement",
                       "single:gpu0", "--json", "--forward-only")
    fwd_only = json.loads(out)
    code, out, _ = run(capsys, "simulate", "--network", "resnet50", "--devices", "malvik", "--placement",
                       "single:gpu0", "--json")
    full = json.loads(out)
    assert fwd_only["forward_only"] and fwd_only["makespan_s"] < full["makespan_s"] / 2


def test_simulate_single_device_equals_sum_of_op_times(capsys):
    """Default profile, ResNet-50 on one V100: the CLI's makespan is the sum of the roofline times."""
    from placement_core import Problem, load_devices
    p = Problem(load_network("resnet50"), load_devices("malvik"))
    expected = p.costs.fwd[:, 1].sum() + p.costs.bwd[:, 1].sum() + p.costs.update[:, 1].sum()
    code, out, _ = run(capsys, "simulate", "--network", "resnet50", "--devices", "malvik", "--placement",
                       "single:gpu0", "--json")
    assert json.loads(out)["makespan_s"] == pytest.approx(expected, rel=1e-12)


def test_trace_file_is_chrome_trace_json(capsys, tmp_path):
    path = tmp_path / "trace.json"
    code, _, _ = run(capsys, "simulate", "--network", "alexnet", "--devices", "malvik", "--placement", "random:1",
                     "--trace", str(path))
    assert code == 0
    data = json.loads(path.read_text())
    events = data["traceEvents"]
    names = {(e["pid"], e["args"]["name"]) for e in events if e.get("name") == "thread_name"}
    assert names == {(1, "cpu0"), (1, "gpu0"), (1, "gpu1"), (2, "pcie0"), (2, "pcie1")}
    spans = [e for e in events if e["ph"] == "X"]
    ops = [e for e in spans if e["pid"] == 1]
    graph = load_network("alexnet")
    n_params = sum(1 for o in graph.ops if o.param_bytes > 0)
    assert len(ops) == 2 * len(graph) + n_params  # forward, backward, update
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in spans)
    assert any(e["ph"] == "C" for e in events)  # memory counters


def test_exprimo_files_are_detected(capsys, tmp_path):
    net = tmp_path / "tiny.json"
    net.write_text(json.dumps(NET))
    placement = tmp_path / "placement.json"
    placement.write_text(json.dumps({n: 1 for n in ["data", "conv1", "pool1", "mix/a", "mix/b", "mix/inner/d",
                                                       "mix/cat", "fc", "softmax"]}))
    code, out, err = run(capsys, "simulate", "--network", str(net), "--devices", "malvik", "--placement",
                         str(placement), "--profile", "exprimo-2020", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["ops"] == 9 and r["batch_size"] == 128  # the thesis' batch override
    assert r["devices"]["gpu0"]["busy_s"] == pytest.approx(r["makespan_s"])


@pytest.mark.parametrize("argv, text", [
    (["simulate", "--network", "nope", "--devices", "malvik", "--placement", "single:gpu0"],
     "network: 'nope' is neither a built-in network nor a file"),
    (["simulate", "--network", "resnet50", "--devices", "nope", "--placement", "single:gpu0"],
     "devices: 'nope' is neither a device preset nor a file"),
    (["simulate", "--network", "resnet50", "--devices", "malvik", "--placement", "single:tpu0"],
     "unknown device 'tpu0'. Use one of: cpu0, gpu0, gpu1"),
    (["simulate", "--network", "resnet50", "--devices", "malvik", "--placement", "random:x"],
     "random seed must be a non-negative integer"),
    (["simulate", "--network", "resnet50", "--devices", "malvik", "--placement", "nofile.json"],
     "no such placement file"),
    (["simulate", "--network", "resnet50", "--devices", "malvik", "--placement", "single:gpu0", "--batches", "0"],
     "argument --batches: expected an integer from 1 to 10000, got '0'"),
    (["simulate", "--network", "resnet50", "--devices", "malvik", "--placement", "single:gpu0",
      "--comm-efficiency", "2"], "expected a number in (0, 1]"),
    (["simulate", "--network", "resnet50", "--devices", "malvik"], "the following arguments are required: --placement"),
    (["frobnicate"], "invalid choice: 'frobnicate'"),
])
def test_bad_input_is_one_error_line_with_status_2(capsys, argv, text):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert text in err


@pytest.mark.parametrize("content, text", [
    ("{not json", "is not valid JSON: Expecting property name enclosed in double quotes at line 1, column 2"),
    ('{"format": "placement-network/1", "name": "x", "ops": [{"name": "a", "fwd_flops": NaN}]}',
     "contains NaN, which is not a number"),
    ('{"format": "placement-network/1", "name": "x", "ops": [{"name": "a", "inputs": ["b"]}, {"name": "b", '
     '"inputs": ["a"]}]}', "the network has a cycle: "),
    ('[1, 2]', "expected a network (a JSON object), got a list"),
])
def test_bad_network_files(capsys, tmp_path, content, text):
    path = tmp_path / "net.json"
    path.write_text(content)
    code, _, err = run(capsys, "simulate", "--network", str(path), "--devices", "malvik", "--placement", "random:1")
    assert code == 2 and err.startswith(f"error: {path}") and text in err and err.count("\n") == 1


@pytest.mark.slow
def test_console_script_runs_without_traceback(tmp_path):
    bad = tmp_path / "d.json"
    bad.write_text(json.dumps({"format": "placement-devices/1", "name": "x", "devices": [
        {"name": "a", "kind": "gpu", "peak_flops": 1, "memory_bytes": 1, "mem_bandwidth": 1},
        {"name": "b", "kind": "gpu", "peak_flops": 1, "memory_bytes": 1, "mem_bandwidth": 1}], "channels": []}))
    proc = subprocess.run([sys.executable, "-m", "placement_core", "simulate", "--network", "alexnet", "--devices",
                           str(bad), "--placement", "single:a"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (f"error: {bad}: channels: no route for a -> b, b -> a; any two devices may have "
                                   "to exchange a tensor. Add each missing [SRC, DST] pair to the routes of the "
                                   "channel that carries it")


# -- Exprimo placement files: Block names and stale keys are ignored, as Exprimo does -------------------

TINY_OPS = ["data", "conv1", "pool1", "mix/a", "mix/b", "mix/inner/d", "mix/cat", "fc", "softmax"]


def _exprimo_files(tmp_path, assignment):
    net = tmp_path / "tiny.json"
    net.write_text(json.dumps(NET))
    placement = tmp_path / "assignment.json"
    placement.write_text(json.dumps(assignment))
    return str(net), str(placement)


def test_exprimo_placements_ignore_keys_that_are_not_ops(capsys, tmp_path):
    """Exprimo's own files carry Block names (mix, mix/inner) and keys of other networks (res2a, Logits)."""
    ours = {**{n: 1 for n in TINY_OPS}, "data": 0, "conv1": 0}
    extra = {"mix": 2, "mix/inner": 2, "res2a_branch1": 2, "Logits": [0, 2]}  # applied, they would use gpu1
    net, placement = _exprimo_files(tmp_path, {**ours, **extra})
    argv = ["simulate", "--network", net, "--devices", "malvik", "--placement", placement, "--profile",
            "exprimo-2020"]
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0 and err == "", err
    r = json.loads(out)
    assert r["ignored_placement_keys"] == 4
    assert r["devices"]["gpu1"]["busy_s"] == 0 and r["devices"]["cpu0"]["busy_s"] > 0
    # the same as the placement without the extra keys
    (tmp_path / "plain").mkdir()
    net2, placement2 = _exprimo_files(tmp_path / "plain", ours)
    code, plain, _ = run(capsys, "simulate", "--network", net2, "--devices", "malvik", "--placement", placement2,
                         "--profile", "exprimo-2020", "--json")
    assert json.loads(plain)["makespan_s"] == r["makespan_s"] and json.loads(plain)["ignored_placement_keys"] == 0
    code, out, err = run(capsys, *argv)
    assert code == 0 and err == ""
    assert ("note: 4 key(s) of the placement file are not ops of the network and were ignored, as Exprimo does "
            "(Block names and stale keys): mix, mix/inner, res2a_branch1, Logits") in out
    assert "(Block names and stale keys)" not in run(capsys, "simulate", "--network", net2, "--devices", "malvik",
                                                     "--placement", placement2)[1]


@pytest.mark.parametrize("assignment, text", [
    # every op must still have a device
    ({**{n: 1 for n in TINY_OPS if n != "fc"}, "mix": 1}, "assignment.json: placement: no device for op(s) fc. "
                                                           "Assign every op of the network to a device"),
    ({"conv1_x": 0, "res2a": 1}, "assignment.json: none of its 2 keys ('conv1_x', 'res2a') is an op of network "
                                 "'tiny'. Use a placement made for this network"),
    # an op's own entry is still checked
    ({**{n: 1 for n in TINY_OPS}, "conv1": 9}, "assignment.json: conv1: device index 9 is out of range (0..2). Use an "
                                               "index from 0 to 2: device graph 'malvik' has 3 device(s) (cpu0, "
                                               "gpu0, gpu1)"),
    # a device list splits a convolution (docs/sharding.md); a one-entry list fails in Exprimo too
    ({**{n: 1 for n in TINY_OPS}, "conv1": [1]}, "layer 'conv1' has a one-device list [1], which Exprimo cannot build"),
    ({**{n: 1 for n in TINY_OPS}, "conv1": "gpu0"}, "conv1: expected a device index, got 'gpu0'"),
])
@pytest.mark.slow
def test_exprimo_placement_errors(capsys, tmp_path, assignment, text):
    net, placement = _exprimo_files(tmp_path, assignment)
    code, out, err = run(capsys, "simulate", "--network", net, "--devices", "malvik", "--placement", placement)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith(f"error: {tmp_path}/")
    assert text in err


def test_placement_1_files_stay_strict(capsys, tmp_path):
    """Our own format names every op: an unknown one is a mistake, not a Block name."""
    net, _ = _exprimo_files(tmp_path, {})
    placement = tmp_path / "p.json"
    placement.write_text(json.dumps({"format": "placement/1", "assignment": {**{n: "gpu0" for n in TINY_OPS},
                                                                             "mix": "gpu0"}}))
    code, out, err = run(capsys, "simulate", "--network", net, "--devices", "malvik", "--placement", str(placement))
    assert code == 2 and out == ""
    assert err == (f"error: {placement}: assignment.mix: op 'mix' is not in network 'tiny'. Use a placement made "
                   "for this network\n")


def test_unknown_placement_format_names_the_accepted_ones(capsys, tmp_path):
    placement = tmp_path / "p.json"
    placement.write_text(json.dumps({"format": "placement/7", "assignment": {}}))
    code, _, err = run(capsys, "simulate", "--network", "alexnet", "--devices", "malvik", "--placement",
                       str(placement))
    assert code == 2 and "format: unknown format 'placement/7'. Give a placement/1 placement, a placement-result/1 " \
                          "file (from `placement optimize --out`) or an Exprimo placement" in err


# -- files the CLI writes: checked before anything runs -------------------------------------------------

@pytest.mark.parametrize("target, text", [
    ("{tmp}/missing/t.json", "--trace: the folder '{tmp}/missing' does not exist. Create it first, or give a path in "
                             "an existing folder"),
    ("{tmp}", "--trace: is a directory. Give a file name, e.g. {tmp}/trace.json"),
    ("{tmp}/file.txt/t.json", "--trace: '{tmp}/file.txt' is not a folder. Give a path in an existing folder"),
])
def test_trace_file_errors(capsys, tmp_path, target, text):
    (tmp_path / "file.txt").write_text("x")
    target, text = target.format(tmp=tmp_path), text.format(tmp=tmp_path)
    code, out, err = run(capsys, "simulate", "--network", "alexnet", "--devices", "malvik", "--placement",
                         "random:1", "--trace", target)
    assert code == 2 and out == "" and err == f"error: {target}: {text}\n"


@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() == 0,
                    reason="root may write anywhere")
def test_trace_into_a_read_only_folder(capsys, tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    code, _, err = run(capsys, "simulate", "--network", "alexnet", "--devices", "malvik", "--placement", "random:1",
                       "--trace", str(folder / "t.json"))
    assert code == 2 and "--trace: the folder" in err and "is not writable" in err


def test_simulate_json_describes_the_pipeline(capsys):
    code, out, _ = run(capsys, "simulate", "--network", "alexnet", "--devices", "malvik", "--placement", "single:gpu0",
                       "--schedule", "1f1b", "--micro-batches", "8", "--json")
    r = json.loads(out)
    assert (r["schedule"], r["micro_batches"], r["batch_size"], r["micro_batch_size"], r["batches"],
            r["in_flight"]) == ("1f1b", 8, 128, 16, 1, 1)


@pytest.mark.parametrize("argv, message", [
    (["--batches", "99999999999"], "--batches: expected an integer from 1 to 10000"),
    (["--in-flight", "0"], "--in-flight: expected an integer from 1 to 10000"),
    (["--batch-size", "99999999999999999999"], "--batch-size: expected an integer from 1 to 2147483647"),
    (["--schedule", "gpipe", "--micro-batches", "20000"], "--micro-batches: expected an integer from 1 to 10000"),
])
def test_counts_are_bounded_before_anything_is_allocated(capsys, argv, message):
    code, out, err = run(capsys, "simulate", "--network", "alexnet", "--devices", "malvik", "--placement",
                         "single:gpu0", *argv)
    assert code == 2 and out == "" and message in err and len(err.strip().splitlines()) == 1


def test_exprimo_layer_sizes_beyond_2_to_the_31_are_field_errors(tmp_path, capsys):
    import copy
    net = copy.deepcopy(NET)
    fc = next(name for name, layer in net["layers"].items() if layer["type"] == "InnerProduct")
    net["layers"][fc]["num_outputs"] = 10**400
    path = tmp_path / "big.json"
    path.write_text(json.dumps(net))
    code, out, err = run(capsys, "simulate", "--network", str(path), "--devices", "malvik", "--placement", "single:gpu0")
    assert code == 2 and f"layers.{fc}.num_outputs: num_outputs must be a positive integer below 2^31" in err
