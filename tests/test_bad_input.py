"""Bad input that used to escape the contract (exit 1, a hang, a traceback, a raw terminal escape).

The contract (README): bad input ends with exit status 2 and one line ``error: FILE: FIELD: what is wrong.
What to do``. Each test here failed on the code before its fix; the numbers are worked out by hand.
"""

import copy
import json
import os
import resource
import subprocess
import sys

import pytest

from placement_core.formats.catalog import devices_from_data, network_from_data
from placement_core.cli import main
from placement_core.base.errors import InputError
from placement_core.store import RunStore
from test_devices import EXPRIMO as EXPRIMO_DEVICES
from test_fuzz import DEVICES, NETWORK
from test_timings_cli import DEVICES as T_DEVICES
from test_timings_cli import NETWORK as T_NETWORK
from test_timings_cli import TIMINGS


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(code, out, err):
    """Exit status 2, nothing on stdout, one ``error:`` line, no terminal control characters."""
    assert code == 2, err
    assert out == "" and err.startswith("error: ") and err.count("\n") == 1, err
    assert not any(ord(c) < 32 or 0x7f <= ord(c) < 0xa0 for c in err[:-1]), repr(err)
    return err[len("error: "):-1]


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def stored_runs(home):
    if not (home / "runs.sqlite").exists():
        return []
    with RunStore(home=home) as store:
        return store.runs()


# -- Exprimo networks get our format's size limits --------------------------------------------------------

def _upsampling_chain(n, k, tensor=(1, 8, 8, 3)):
    layers = {"data": {"type": "Input", "parents": [], "tensor": list(tensor)}}
    prev = "data"
    for i in range(n):
        layers[f"up{i}"] = {"type": "UpSampling2D", "parents": [prev], "ksize": [1, k, k, 1]}
        prev = f"up{i}"
    return {"name": "up", "layers": layers}


def test_exprimo_dimension_limit(capsys, tmp_path):
    """8 x 1000^k: up3 makes 8e12 > 2^40 = 1,099,511,627,776 rows (it used to give a 1e30 s makespan)."""
    doc = _upsampling_chain(6, 1000)
    with pytest.raises(InputError) as e:
        network_from_data(doc, source="up.json")
    assert e.value.field == "layers.up3"
    assert "8000000000000" in e.value.problem and "1099511627776" in e.value.problem
    path = write(tmp_path, "up.json", doc)
    msg = one_error_line(*run(capsys, "simulate", "--network", path, "--devices", "malvik",
                              "--placement", "single:gpu0"))
    assert msg.startswith(f"{path}: layers.up3: ")


def test_exprimo_quantity_limit():
    """Dimensions within 2^40 but 4 B x 128 x 2^32 x 2^32 x 2^10 = 9.67e24 output bytes > 1e24."""
    doc = _upsampling_chain(1, 2**12, tensor=(1, 2**20, 2**20, 2**10))
    expected = 4 * 128 * 2**32 * 2**32 * 2**10
    assert 9.6e24 < expected < 9.7e24
    with pytest.raises(InputError) as e:
        network_from_data(doc, source="up.json")
    assert e.value.field == "layers.up0"
    assert f"output_bytes {expected:g}" in e.value.problem and "1e+24" in e.value.problem
    # ksize 2^10 gives 4 x 128 x 2^30 x 2^30 x 2^10 = 6.0e23 bytes: within the limit
    small = _upsampling_chain(1, 2**10, tensor=(1, 2**20, 2**20, 2**10))
    g = network_from_data(small, source="up.json")
    assert g.op("up0").output_bytes == 4 * 128 * 2**30 * 2**30 * 2**10


def test_exprimo_batch_limit():
    with pytest.raises(InputError) as e:
        network_from_data(_upsampling_chain(1, 2), source="up.json", batch_size=2**31)
    assert e.value.field == "batch_size" and "2147483647" in e.value.problem


# -- subnormal and implausibly small device numbers --------------------------------------------------------

@pytest.mark.parametrize("path, field", [
    (("devices", 0, "peak_flops"), "devices[0].peak_flops"),
    (("devices", 1, "mem_bandwidth"), "devices[1].mem_bandwidth"),
    (("devices", 1, "memory_bytes"), "devices[1].memory_bytes"),
    (("devices", 0, "clock_hz"), "devices[0].clock_hz"),
    (("channels", 0, "bandwidth"), "channels[0].bandwidth"),
])
@pytest.mark.parametrize("value", [5e-324, 1e-300, 0.5])
def test_subnormal_device_numbers(capsys, tmp_path, path, field, value):
    """Rates and sizes of at least 1 (FLOP/s, byte/s, byte, Hz) keep every time finite; 5e-324 gave inf."""
    doc = copy.deepcopy(DEVICES)
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    f = write(tmp_path, "devs.json", doc)
    with pytest.raises(InputError) as e:
        devices_from_data(doc, source=str(f))
    assert e.value.message.startswith(f"{f}: {field}: is implausibly small ({value!r} < 1)")
    net = write(tmp_path, "net.json", NETWORK)
    home = tmp_path / "home"
    msg = one_error_line(*run(capsys, "optimize", "--network", net, "--devices", f, "--algorithm", "random",
                              "--budget", "10", "--home", home))
    assert msg == e.value.message
    assert stored_runs(home) == []  # it used to record a run for bad input


@pytest.mark.parametrize("path, field, minimum", [
    (("devices", 1, "peak_gflops"), "devices[1].peak_gflops", "1e-09"),  # GFLOP/s: 1 FLOP/s
    (("devices", 1, "memory"), "devices[1].memory", "1e-09"),  # GB: 1 byte
    (("devices", 1, "mem_bandwidth"), "devices[1].mem_bandwidth", "1e-09"),  # GB/s: 1 byte/s
    (("devices", 1, "clock"), "devices[1].clock", "1e-06"),  # MHz: 1 Hz
    (("comm_channels", 0, "bandwidth"), "comm_channels[0].bandwidth", "8e-09"),  # Gbit/s: 1 byte/s
])
def test_subnormal_exprimo_device_numbers(path, field, minimum):
    doc = copy.deepcopy(EXPRIMO_DEVICES)
    doc[path[0]][path[1]][path[2]] = 5e-324
    with pytest.raises(InputError) as e:
        devices_from_data(doc, source="x.json")
    assert e.value.field == field and e.value.problem.startswith(f"is implausibly small (5e-324 < {minimum})")


def test_smallest_accepted_numbers_give_finite_times(capsys, tmp_path):
    """At the bounds (1e24 FLOPs, 1 FLOP/s, efficiency 1e-3) an op takes 1e24 / (1 x 1e-3) = 1e27 s."""
    net = {"format": "placement-network/1", "name": "n", "ops": [
        {"name": "a", "fwd_flops": 1e24, "bwd_flops": 1e24}]}
    devs = {"format": "placement-devices/1", "name": "slow", "devices": [
        {"name": "cpu0", "kind": "cpu", "peak_flops": 1, "memory_bytes": 1, "mem_bandwidth": 1}]}
    code, out, err = run(capsys, "simulate", "--network", write(tmp_path, "n.json", net), "--devices",
                         write(tmp_path, "d.json", devs), "--placement", "single:cpu0", "--comp-efficiency",
                         "0.001", "--json")
    assert code == 0, err
    assert json.loads(out)["makespan_s"] == pytest.approx(2e27, rel=1e-12)
    msg = one_error_line(*run(capsys, "simulate", "--network", "alexnet", "--devices", "malvik",
                              "--placement", "single:gpu0", "--comp-efficiency", "5e-324"))
    assert "0.001" in msg


# -- --timings: wrong types; empty groups -----------------------------------------------------------------

@pytest.mark.parametrize("key, value, expected", [
    ("batch_size", "4", "batch_size: must be an integer from 1 to 2147483647, got '4'"),
    ("batch_size", "abc", "batch_size: must be an integer from 1 to 2147483647, got 'abc'"),
    ("batch_size", 4.0, "batch_size: must be an integer from 1 to 2147483647, got 4.0"),
    ("batch_size", True, "batch_size: must be an integer from 1 to 2147483647, got True"),
    ("batch_size", [4], "batch_size: must be an integer from 1 to 2147483647, got [4]"),
    ("input_shape", 5, "input_shape: must be a list of integers from 0 to 1099511627776, got 5"),
    ("input_shape", "abc", "input_shape: must be a list of integers from 0 to 1099511627776, got 'abc'"),
    ("input_shape", [1, "4"], "input_shape: must be a list of integers from 0 to 1099511627776, got [1, '4']"),
    ("input_shape", [1, -4], "input_shape: must be a list of integers from 0 to 1099511627776, got [1, -4]"),
    ("network", 5, "network: expected a non-empty name, got a number"),
])
def test_timings_field_types(capsys, tmp_path, key, value, expected):
    doc = dict(TIMINGS, **{key: value})
    t = write(tmp_path, "timings.json", doc)
    msg = one_error_line(*run(capsys, "simulate", "--network", write(tmp_path, "net.json", T_NETWORK),
                              "--devices", write(tmp_path, "devs.json", T_DEVICES), "--placement", "single:cpu0",
                              "--timings", t))
    assert msg.startswith(f"{t}: {expected}"), msg


def test_timings_empty_group(capsys, tmp_path):
    net = write(tmp_path, "net.json", T_NETWORK)
    groups = tmp_path / "net.groups.json"
    groups.write_text(json.dumps({"format": "placement-groups/1", "network": "tiny",
                                  "groups": {"x": ["x"], "a": [], "b": ["a", "b"]}}))
    msg = one_error_line(*run(capsys, "simulate", "--network", net, "--devices",
                              write(tmp_path, "devs.json", T_DEVICES), "--placement", "single:cpu0", "--timings",
                              write(tmp_path, "timings.json", TIMINGS)))
    assert msg.startswith(f"{groups}: groups.a: the group is empty")


# -- --placement random:SEED and path names -----------------------------------------------------------------

@pytest.mark.parametrize("seed", ["²", "٣", "", "-1", "1.5", "9" * 5000, str(2**63)])
def test_random_seeds(capsys, seed):
    msg = one_error_line(*run(capsys, "simulate", "--network", "alexnet", "--devices", "malvik",
                              "--placement", f"random:{seed}"))
    assert msg.startswith("--placement: random seed must be a non-negative integer up to 9223372036854775807, "
                          "got ")
    assert len(msg) < 300


def test_largest_random_seed(capsys):
    code, out, err = run(capsys, "simulate", "--network", "alexnet", "--devices", "malvik",
                         "--placement", f"random:{2**63 - 1}", "--json")
    assert code == 0, err


@pytest.mark.parametrize("option", ["--network", "--devices", "--placement", "--timings", "--trace"])
def test_path_component_too_long(capsys, tmp_path, option):
    long = str(tmp_path / ("a" * 300 + ".json"))
    argv = {"--network": "alexnet", "--devices": "malvik", "--placement": "single:gpu0"}
    argv[option] = long
    args = ["simulate"] + [x for kv in argv.items() for x in kv]
    msg = one_error_line(*run(capsys, *args))
    assert "is 305 bytes long, more than the limit of 255 for one file name" in msg, msg
    assert len(msg) < 700


# -- special files: FIFOs and devices never hang, /dev/zero is not read to the end ----------------------------

@pytest.mark.timeout(30)
def test_fifo_does_not_hang(capsys, tmp_path):
    fifo = tmp_path / "net.json"
    os.mkfifo(fifo)
    msg = one_error_line(*run(capsys, "simulate", "--network", fifo, "--devices", "malvik",
                              "--placement", "single:gpu0"))
    assert msg == f"{fifo}: is a FIFO (named pipe), not a regular file. Give a JSON file"


@pytest.mark.parametrize("device, what", [("/dev/null", "a character device"), ("/dev/zero", "a character device")])
def test_character_devices(capsys, device, what):
    msg = one_error_line(*run(capsys, "simulate", "--network", "alexnet", "--devices", device,
                              "--placement", "single:gpu0"))
    assert msg == f"{device}: is {what}, not a regular file. Give a JSON file"


@pytest.mark.workers
@pytest.mark.timeout(60)
def test_dev_zero_in_a_real_process():
    """Before: read until memory ran out. Bounded here to 2 GiB of address space and 40 s."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))
    p = subprocess.run([sys.executable, "-m", "placement_core", "simulate", "--network", "/dev/zero", "--devices",
                        "malvik", "--placement", "single:gpu0"], capture_output=True, text=True, timeout=40,
                       preexec_fn=limit)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr == "error: /dev/zero: is a character device, not a regular file. Give a JSON file\n"


def test_size_limit_is_enforced_while_reading(monkeypatch, tmp_path):
    """/proc files report size 0; a stat() check alone read them whole."""
    from placement_core.base import jsonio
    monkeypatch.setattr(jsonio, "MAX_FILE_BYTES", 64)
    with pytest.raises(InputError) as e:
        jsonio.read_json("/proc/self/maps")
    assert e.value.message == "/proc/self/maps: is larger than 64 bytes. Give a smaller file"
    ok = tmp_path / "ok.json"
    ok.write_text(" " * 60 + "[1]")  # 63 bytes: within the limit
    assert jsonio.read_json(ok) == [1]
    ok.write_text(" " * 62 + "[1]")  # 65 bytes
    with pytest.raises(InputError):
        jsonio.read_json(ok)


# -- --param: no NaN, no infinity, bounded integers -----------------------------------------------------------

@pytest.mark.parametrize("param, expected", [
    ("mutation_rate=nan", "mutation_rate must be a finite number, got 'nan'"),
    ("rate_drift=inf", "rate_drift must be a finite number, got 'inf'"),
    ("rate_drift=-Infinity", "rate_drift must be a finite number, got '-Infinity'"),
    ("rate_drift=1e999", "rate_drift must be a finite number, got '1e999'"),
    ("tournament_size=10000000000", "tournament_size must be in [1, 100000], got 10000000000"),
    ("elite=99999999999999999999", "elite must be in [0, 9223372036854775807], got 99999999999999999999"),
])
def test_ga_params(capsys, tmp_path, param, expected):
    home = tmp_path / "home"
    msg = one_error_line(*run(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm",
                              "ga", "--budget", "10", "--param", param, "--home", home))
    assert expected in msg, msg
    assert stored_runs(home) == []


def test_map_elites_initial_size(capsys, tmp_path):
    """initial_size=10^10 asked for 10^10 x 23 int32 = 857 GiB for AlexNet."""
    msg = one_error_line(*run(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm",
                              "map-elites", "--budget", "10", "--param", "initial_size=10000000000",
                              "--home", tmp_path))
    assert "initial_size must be in [1, 100000], got 10000000000" in msg


def test_param_parse_values_from_the_dashboard():
    from placement_core.optimize import ALGORITHMS
    p = ALGORITHMS["ga"].PARAMS
    for bad in (float("nan"), float("inf"), 10**400):
        with pytest.raises(InputError):
            p["rate_drift"].parse("rate_drift", bad)
    for bad in (float("nan"), float("inf"), 10**400, "1" * 5000):
        with pytest.raises(InputError):
            p["population"].parse("population", bad)
    assert p["rate_drift"].parse("rate_drift", "0.25") == 0.25
    assert ALGORITHMS["cem"].PARAMS["steps"].parse("steps", str(2**63 - 1)) == 2**63 - 1


def test_nan_param_never_reaches_the_store(capsys, tmp_path):
    home = tmp_path / "home"
    one_error_line(*run(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "cem",
                        "--budget", "10", "--param", "smoothing=nan", "--home", home))
    assert stored_runs(home) == []
    code, out, err = run(capsys, "runs", "list", "--home", home)
    assert code == 0, err


# -- lone surrogates ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["simulate", "optimize"])
def test_lone_surrogate_in_a_network_name(capsys, tmp_path, command):
    doc = dict(NETWORK, name="\ud800bad")
    net = write(tmp_path, "net.json", doc)
    assert "\\ud800" in net.read_text()
    home = tmp_path / "home"
    argv = [command, "--network", net, "--devices", write(tmp_path, "d.json", DEVICES)]
    argv += ["--placement", "single:cpu0"] if command == "simulate" else ["--algorithm", "random", "--budget", "5",
                                                                           "--home", home]
    msg = one_error_line(*run(capsys, *argv))
    assert msg == (f"{net}: name: contains an unpaired surrogate '\\ud800', which is not Unicode text. "
                   "Save the file as UTF-8 JSON without lone \\ud800-\\udfff escapes")
    assert stored_runs(home) == []


def test_surrogate_pair_is_fine():
    g = network_from_data(json.loads(json.dumps(dict(NETWORK, name="\U0001f600"))))
    from placement_core.base.jsonio import parse_json
    assert parse_json('{"name": "\\ud83d\\ude00"}', "x") == {"name": "\U0001f600"}
    assert g.name == "\U0001f600"


def test_surrogates_in_keys_and_nested_strings():
    from placement_core.base.jsonio import parse_json
    with pytest.raises(InputError) as e:
        parse_json('{"ops": [{"name": "a", "times": {"\\udcff": {}}}]}', "x.json")
    assert e.value.field == "ops[0].times"
    with pytest.raises(InputError) as e:
        parse_json('[1, ["ok", "\\ude00"]]', "x.json")
    assert e.value.field == "[1][1]"


def test_undecodable_file_name_in_text_output(capsys, tmp_path):
    """argv carries undecodable bytes as surrogates (\\udcff); printing them to stdout used to fail."""
    name = os.fsdecode(b"\xff.json")
    placement = {"format": "placement/1", "assignment": {"x": "cpu0", "fc1": "gpu0", "act": "gpu0", "fc2": "cpu0"}}
    (tmp_path / name).write_text(json.dumps(placement))
    code, out, err = run(capsys, "simulate", "--network", write(tmp_path, "n.json", NETWORK), "--devices",
                         write(tmp_path, "d.json", DEVICES), "--placement", tmp_path / name)
    assert code == 0, err
    assert f"placement {tmp_path}/\\udcff.json: makespan" in out


# -- simulate --trace: estimated before it runs out of memory -------------------------------------------------

def test_trace_estimate_against_the_real_trace():
    """The estimate counts exactly the events the trace holds: whole batches in flight, forward only, a
    message overhead (send and receive slices), gpipe (one update per step)."""
    from dataclasses import replace

    from placement_core import Problem, load_devices, load_network
    from placement_core.model.devices import DeviceGraph
    from placement_core.model.placement import random_placement
    from placement_core.simulate import SimSettings
    from placement_core.simulate.chrome import chrome_trace
    from placement_core.problem import ProblemSpec
    from placement_core.simulate.tracesize import estimate_trace_events
    d = load_devices("malvik-4gpu")
    slow = DeviceGraph("slow", [replace(x, message_overhead=5e-5) for x in d.devices], list(d.channels))
    cases = [(Problem(load_network("alexnet"), d), d), (Problem(load_network("alexnet"), d,
                                                                 settings=SimSettings(units=3, units_in_flight=2)), d),
             (Problem(load_network("resnet50"), d, settings=SimSettings(units=2, forward_only=True)), d),
             (Problem(load_network("resnet50"), slow, settings=SimSettings(units=2, units_in_flight=2)), slow),
             (ProblemSpec(schedule="gpipe", micro_batches=4, profile="default", penalty="thesis").build(load_network("resnet50"), d), d)]
    for p, devs in cases:
        pl = random_placement(p.graph, devs, 5)
        estimate = estimate_trace_events(p, p.simulate(pl).result)
        events = len(chrome_trace(p.simulate(pl, trace=True).result, devs.names,
                                  [c.name for c in devs.channels])["traceEvents"])
        assert estimate == events, (p, estimate, events)


def test_trace_too_large_is_refused(capsys, tmp_path, monkeypatch):
    from placement_core.simulate import tracesize
    monkeypatch.setattr(tracesize, "MAX_TRACE_EVENTS", 10_000)
    trace = tmp_path / "t.json"
    # AlexNet on one GPU: 23 forward + 23 backward + 8 updates (its 8 layers with weights) = 54 tasks a batch,
    # each a slice and a memory counter, + 3 device counters at time 0: 2 * 54 * b + 3 events
    code, out, err = run(capsys, "simulate", "--network", "alexnet", "--devices", "malvik", "--placement",
                         "single:gpu0", "--batches", "92", "--trace", trace)
    assert code == 0, err
    assert len(json.loads(trace.read_text())["traceEvents"]) == 2 * 54 * 92 + 3 + 3 + 3 * 2 + 2  # + metadata
    trace.unlink()
    msg = one_error_line(*run(capsys, "simulate", "--network", "alexnet", "--devices", "malvik", "--placement",
                              "single:gpu0", "--batches", "93", "--trace", trace))
    assert msg == ("--trace: the trace would hold about 10,058 events (93 batch(es)), more than the limit of "
                   "10,000. Trace at most 92 batch(es) (--batches), or leave out --trace")
    assert not trace.exists()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_trace_of_ten_thousand_batches_is_refused_at_once(capsys, tmp_path):
    msg = one_error_line(*run(capsys, "simulate", "--network", "resnet50", "--devices", "malvik-4gpu",
                              "--placement", "random:1", "--batches", "10000", "--in-flight", "4", "--trace",
                              tmp_path / "t.json"))
    assert "more than the limit of 1,000,000" in msg and "--batches" in msg


# -- control characters and long lines in error messages ------------------------------------------------------

def test_escape_sequences_in_exprimo_layer_names(capsys, tmp_path):
    doc = {"layers": {"x\x1b[2J\ny": {"type": "Bogus"}}}
    net = write(tmp_path, "evil\x1b[31m.json", doc)
    msg = one_error_line(*run(capsys, "simulate", "--network", net, "--devices", "malvik",
                              "--placement", "single:gpu0"))
    assert msg.startswith(f"{tmp_path}/evil\\x1b[31m.json: layers.x\\x1b[2J\\ny.type: unknown layer type 'Bogus'")


def test_escape_sequences_in_usage_errors(capsys):
    msg = one_error_line(*run(capsys, "simulate", "--network", "alexnet", "--devices", "malvik", "--placement",
                              "single:gpu0", "--bogus\x1b]0;owned\x07"))
    assert "--bogus\\x1b]0;owned\\x07" in msg


def test_escape_sequences_in_text_output(capsys, tmp_path):
    net = write(tmp_path, "n.json", dict(NETWORK, name="\x1b[31mred\x1b[0m"))
    code, out, err = run(capsys, "simulate", "--network", net, "--devices", write(tmp_path, "d.json", DEVICES),
                         "--placement", "single:cpu0")
    assert code == 0, err
    assert "\x1b" not in out and out.startswith("\\x1b[31mred\\x1b[0m (4 ops, batch 4, fp32)")


@pytest.mark.workers
def test_long_cycle_is_one_short_line(capsys, tmp_path):
    """A 20,000-op cycle printed all 20,001 names (189,000 characters)."""
    ops = [{"name": f"op_number_{i}", "inputs": [f"op_number_{(i - 1) % 20000}"]} for i in range(20000)]
    net = write(tmp_path, "cycle.json", {"format": "placement-network/1", "name": "c", "ops": ops})
    msg = one_error_line(*run(capsys, "simulate", "--network", net, "--devices", "malvik",
                              "--placement", "single:gpu0"))
    assert len(msg) < 700
    # data-flow order from op_number_0: 0 -> 1 -> ... -> 19999 -> 0; six shown, then how many more
    assert (": ops: the network has a cycle of 20,000 ops: op_number_0 -> op_number_1 -> op_number_2 -> "
            "op_number_3 -> op_number_4 -> op_number_5 -> ... (19,994 more) -> op_number_0") in msg


def test_long_user_strings_are_capped():
    e = InputError("bad " + "x" * 5000, source="f.json", field="y" * 1000)
    assert len(e.message) < 1200
    assert e.message.endswith("... (4,504 more characters)")
    assert f"{'y' * 200}... (800 more characters): bad " in e.message


@pytest.mark.parametrize("label, shown", [("\udcff", "'\\udcff'"), ("a\x1b[2Jb", "'\\x1b'")])
def test_labels_are_plain_text(capsys, tmp_path, label, shown):
    """An undecodable byte in --label (argv's \\udcff) failed at the store and lost the run."""
    home = tmp_path / "home"
    msg = one_error_line(*run(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm",
                              "random", "--budget", "5", "--label", label, "--home", home))
    assert msg.startswith(f"argument --label: contains {shown}, a control character or an undecodable byte")
    assert stored_runs(home) == []


def test_user_presets_are_escaped_in_the_device_list(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path))
    (tmp_path / "devices").mkdir()
    doc = copy.deepcopy(DEVICES)
    doc["devices"][0]["name"] = "cpu\x1b[2J"
    doc["channels"][0]["routes"] = [["cpu\x1b[2J", "gpu0"], ["gpu0", "cpu\x1b[2J"]]
    (tmp_path / "devices" / "my\x1b]0;t\x07.json").write_text(json.dumps(doc))
    code, out, err = run(capsys, "devices")
    assert code == 0, err
    assert "\x1b" not in out and "\x07" not in out
    assert "my\\x1b]0;t\\x07" in out and "cpu\\x1b[2J, gpu0" in out


def test_nul_in_a_path():
    """A NUL (possible from the dashboard or a library caller, never from argv) raised ValueError from os.stat."""
    from placement_core.formats.catalog import load_devices, load_network
    from placement_core.base.jsonio import read_json
    for load in (read_json, load_network, load_devices):
        with pytest.raises(InputError) as e:
            load("net\x00.json")
        assert "net\\x00.json" in e.value.message and "contains a NUL character" in e.value.message
