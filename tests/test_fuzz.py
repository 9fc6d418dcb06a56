"""Hardening: malformed and adversarial files at every loader and at the CLI.

Documents are valid ones mutated at random (fields deleted, values replaced by
wrong types, NaN, huge numbers, unicode, empty lists, duplicates, unknown
names). Every outcome must be a loaded object or an InputError -- never another
exception -- and at the CLI exit status 2 with one `error:` line, no traceback,
and nothing written to the run store. Further down: Exprimo layer chains that
outgrow the size limits, subnormal device numbers, timing tables and group
files, special files (FIFOs, devices, sockets) and algorithm parameters.
"""

import copy
import json
import math
import os

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement_core.formats.catalog import devices_from_data, network_from_data
from placement_core.cli import main
from placement_core.model.devices import devices_to_dict
from placement_core.base.errors import InputError
from placement_core.model.placement import placement_from_dict
from placement_core.problem import Problem
from placement_core.store import RunStore
from test_exprimo_and_cost import NET as EXPRIMO_NET
from test_devices import EXPRIMO as EXPRIMO_DEVICES

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from fuzz_campaign import _paths  # noqa: E402  the long campaign walks documents the same way
from helpers import examples

NETWORK = {"format": "placement-network/1", "name": "n", "batch_size": 4, "ops": [
    {"name": "x", "kind": "input", "output_bytes": 400, "shape": [4, 100]},
    {"name": "fc1", "kind": "linear", "inputs": ["x"], "fwd_flops": 8000, "bwd_flops": 16000, "output_bytes": 40,
     "param_bytes": 4040, "mem_bytes": 4480, "shape": [4, 10]},
    {"name": "act", "kind": "activation", "inputs": ["fc1"], "output_bytes": 40, "mem_bytes": 80},
    {"name": "fc2", "kind": "linear", "inputs": [{"op": "act", "bytes": 40}, "x"], "fwd_flops": 80,
     "output_bytes": 8, "param_bytes": 88, "times": {"gpu": {"fwd": 1e-6, "bwd": 2e-6}}},
]}
DEVICES = {"format": "placement-devices/1", "name": "d", "devices": [
    {"name": "cpu0", "kind": "cpu", "peak_flops": 1e12, "memory_bytes": 1e10, "mem_bandwidth": 5e10},
    {"name": "gpu0", "kind": "gpu", "peak_flops": 1e13, "memory_bytes": 1e9, "mem_bandwidth": 9e11},
], "channels": [{"name": "pcie", "bandwidth": 16e9, "latency": 1e-5, "routes": [["cpu0", "gpu0"], ["gpu0", "cpu0"]]}]}
PLACEMENT = {"format": "placement/1", "assignment": {"x": "cpu0", "fc1": "gpu0", "act": "gpu0", "fc2": "cpu0"}}

WEIRD = st.one_of(
    st.none(), st.booleans(), st.integers(-10**30, 10**30), st.floats(allow_nan=True, allow_infinity=True),
    # integers beyond a float (JSON allows them; float() overflows above ~1.8e308) and beyond SQLite's 64 bits
    st.sampled_from([10**400, -10**400, 2**1024, 2**63, -2**63 - 1]), st.integers(-10**400, 10**400),
    st.text(max_size=30), st.sampled_from(["", "x", "cpu0", "gpu0", "fc1", "💥", "a" * 600, "SAME", "-1"]),
    st.lists(st.integers(-3, 3), max_size=4), st.just([]), st.just({}), st.just([[]]),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
)


@st.composite
def mutated(draw, base):
    doc = copy.deepcopy(base)
    paths = list(_paths(doc))
    for _ in range(draw(st.integers(1, 4))):
        paths = list(_paths(doc))
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "delete", "duplicate", "empty"]))
        if not path:
            if action == "replace":
                doc = copy.deepcopy(draw(WEIRD))
            continue
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        if action == "replace":
            parent[key] = copy.deepcopy(draw(WEIRD))
        elif action == "delete":
            del parent[key]
        elif action == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[key]))
        elif action == "empty" and isinstance(parent[key], (list, dict)):
            parent[key] = type(parent[key])()
        if not isinstance(doc, (dict, list)):
            break
    return doc


fuzz = settings(max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", 300)), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _load_network(doc):
    try:
        return network_from_data(doc, source="fuzz.json")
    except InputError as e:
        assert e.message and "Traceback" not in e.message
        return None


@fuzz
@given(mutated(NETWORK))
def test_network_loader(doc):
    g = _load_network(doc)
    if g is not None:  # whatever loads must also simulate
        devs = devices_from_data(DEVICES)
        Problem(g, devs).evaluate(np.zeros(len(g), dtype=np.int32))


@pytest.mark.fuzz
@fuzz
@given(mutated(EXPRIMO_NET))
def test_exprimo_network_loader(doc):
    g = _load_network(doc)
    if g is not None:
        devs = devices_from_data(DEVICES)
        Problem(g, devs, profile="exprimo-2020").evaluate(np.ones(len(g), dtype=np.int32))


@fuzz
@given(st.one_of(mutated(DEVICES), mutated(EXPRIMO_DEVICES)))
def test_device_loader(doc):
    try:
        devs = devices_from_data(doc, source="fuzz.json")
    except InputError as e:
        assert e.message
        return
    g = network_from_data(NETWORK)
    for d in range(len(devs)):
        Problem(g, devs).evaluate(np.full(len(g), d, dtype=np.int32))
    assert devices_from_data(devices_to_dict(devs)).devices == devs.devices


@fuzz
@given(mutated(PLACEMENT))
def test_placement_loader(doc):
    g, devs = network_from_data(NETWORK), devices_from_data(DEVICES)
    try:
        pl = placement_from_dict(doc, g, devs, source="fuzz.json")
    except InputError as e:
        assert e.message
        return
    assert pl.shape == (len(g),) and pl.min() >= 0 and pl.max() < len(devs)


@fuzz
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_raw_bytes_upload(content):
    from placement_core.formats.catalog import devices_from_upload, network_from_upload
    for loader in (network_from_upload, devices_from_upload):
        try:
            loader(content, "upload.json")
        except InputError as e:
            assert e.source == "upload.json"


@pytest.mark.fuzz
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(net=mutated(NETWORK), devs=mutated(DEVICES), pl=mutated(PLACEMENT), command=st.sampled_from(["simulate",
                                                                                                        "optimize"]))
def test_cli_never_shows_a_traceback(tmp_path_factory, capsys, net, devs, pl, command):
    tmp = tmp_path_factory.mktemp("fuzz")
    files = {}
    for name, doc in (("net", net), ("devs", devs), ("pl", pl)):
        path = tmp / f"{name}.json"
        path.write_text(json.dumps(doc, allow_nan=True))
        files[name] = str(path)
    home = tmp / "home"
    argv = [command, "--network", files["net"], "--devices", files["devs"], "--home", str(home)]
    if command == "simulate":
        argv = argv[:-2] + ["--placement", files["pl"], "--json"]
    else:
        argv += ["--algorithm", "random", "--budget", "20", "--json"]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code in (0, 2), err
    if code == 2:
        assert out == "" and err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
        if command == "optimize" and (home / "runs.sqlite").exists():
            with RunStore(home=home) as store:
                assert store.runs() == []  # a rejected input writes nothing
    else:
        result = json.loads(out)
        assert math.isfinite(result.get("makespan_s", result.get("best_objective_s")))


# -- the dashboard's upload path: the same mutated files through the pages' file uploaders --------------

@pytest.fixture(scope="module")
def app():
    from apptest_util import start
    return start()


@pytest.mark.fuzz
@settings(max_examples=int(__import__("os").environ.get("FUZZ_APP_EXAMPLES", 25)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(net=mutated(NETWORK), devs=mutated(DEVICES), pl=mutated(PLACEMENT))
def test_dashboard_uploads_never_show_a_traceback(app, net, devs, pl):
    """Every upload ends as a loaded file or an error message; a rejected file leaves the state as it was."""
    from apptest_util import goto

    at = app
    for page, key, doc, state_key in (("network", "net_upload", net, "graph"),
                                      ("devices", "dev_upload", devs, "devices"),
                                      ("trace", "trace_upload", pl, "placement")):
        goto(at, page)
        before = at.session_state[state_key]
        at.file_uploader(key=key).upload("fuzz.json", json.dumps(doc, allow_nan=True).encode(),
                                         "application/json").run()
        assert not at.exception, [e.value for e in at.exception]
        errors = [e.value for e in at.error]
        if errors:
            assert all("Traceback" not in e and "fuzz.json" in e for e in errors), errors
            after = at.session_state[state_key]
            assert after is before or (isinstance(after, np.ndarray) and np.array_equal(after, before))


# -- integers too large for a float (JSON has no limit; float() overflows above ~1.8e308) ----------------

HUGE = 10**400


def _with(doc, path, value):
    doc = copy.deepcopy(doc)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return doc


@pytest.mark.parametrize("kind, path, field", [
    ("network", ("ops", 1, "fwd_flops"), "ops[1].fwd_flops"),
    ("network", ("ops", 0, "output_bytes"), "ops[0].output_bytes"),
    ("network", ("ops", 3, "times", "gpu", "fwd"), "ops[3].times.gpu.fwd"),
    ("network", ("ops", 3, "inputs", 0, "bytes"), "ops[3].inputs[0].bytes"),
    ("devices", ("devices", 0, "peak_flops"), "devices[0].peak_flops"),
    ("devices", ("channels", 0, "latency"), "channels[0].latency"),
    ("devices", ("devices", 1, "message_overhead"), "devices[1].message_overhead"),
    ("exprimo-devices", ("devices", 1, "peak_gflops"), "devices[1].peak_gflops"),
    ("exprimo-devices", ("comm_channels", 0, "bandwidth"), "comm_channels[0].bandwidth"),
])
@pytest.mark.parametrize("sign", [1, -1])
def test_huge_integers_are_field_errors(capsys, tmp_path, kind, path, field, sign):
    """10**400 is valid JSON but no float: a field error at the loader and at the CLI (it used to exit 1)."""
    base = {"network": NETWORK, "devices": DEVICES, "exprimo-devices": EXPRIMO_DEVICES}[kind]
    doc = _with(base, path, sign * HUGE)
    f = tmp_path / "in.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(InputError) as e:
        (network_from_data if kind == "network" else devices_from_data)(doc, source=str(f))
    problem = "is implausibly large (about 1e400 > " if sign > 0 else "must not be negative, got about -1e400"
    assert e.value.message.startswith(f"{f}: {field}: {problem}")
    net, devs = (str(f), "malvik") if kind == "network" else ("alexnet", str(f))
    code = main(["simulate", "--network", net, "--devices", devs, "--placement", "single:cpu0"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err == f"error: {e.value.message}\n"


# -- Exprimo networks: our format's size limits, layer by layer -----------------------------------------------

DIM = st.one_of(st.integers(1, 64), st.integers(1, 2**31 - 1), st.sampled_from([2**20, 2**30, 2**31 - 1]))


@st.composite
def exprimo_chain(draw):
    """An Input and up to six layers that grow (or reshape) the tensor, sizes anywhere up to 2^31 - 1."""
    layers = {"data": {"type": "Input", "parents": [], "tensor": [1, draw(DIM), draw(DIM), draw(DIM)]}}
    prev = "data"
    for i in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["UpSampling2D", "Convolution", "InnerProduct", "Concatenate", "Reshape",
                                     "Pooling"]))
        if kind == "UpSampling2D":
            spec = {"ksize": [1, draw(DIM), draw(DIM), 1]}
        elif kind == "Convolution":
            spec = {"filter": [1, 1, -1, draw(DIM)], "strides": [1, 1, 1, 1], "padding": "SAME"}
        elif kind == "InnerProduct":
            spec = {"num_outputs": draw(DIM)}
        elif kind == "Concatenate":
            spec = {"dim": 3}
        elif kind == "Reshape":
            spec = {"output_shape": [-1, draw(DIM)]}
        else:
            spec = {"ksize": [1, 1, 1, 1], "strides": [1, 1, 1, 1], "padding": "VALID"}
        parents = [prev, prev] if kind == "Concatenate" else [prev]
        layers[f"l{i}"] = {"type": kind, "parents": parents, **spec}
        prev = f"l{i}"
    return {"name": "chain", "layers": layers}


@fuzz
@given(exprimo_chain(), st.one_of(st.none(), st.integers(1, 2**31 - 1), st.integers(2**31, 2**40)))
def test_exprimo_size_limits(doc, batch):
    """Whatever loads stays inside our format's limits, so both cost profiles give finite times."""
    from placement_core.base.errors import MAX_QUANTITY
    from placement_core.formats.network import MAX_DIM
    try:
        g = network_from_data(doc, source="chain.json", batch_size=batch)
    except InputError as e:
        assert e.message.startswith("chain.json: ") and len(e.message) < 1500
        return
    for op in g.ops:
        assert all(0 <= d <= MAX_DIM for d in op.shape), op
        assert max(op.fwd_flops, op.bwd_flops, op.output_bytes, op.param_bytes, op.mem_bytes) <= MAX_QUANTITY
        for flops, mem in op.exprimo.values():
            assert flops <= MAX_QUANTITY and all(b <= MAX_QUANTITY for b in mem)
    devs = devices_from_data(DEVICES)
    for profile in ("default", "exprimo-2020"):
        ev = Problem(g, devs, profile=profile).simulate(np.ones(len(g), dtype=np.int32))
        assert math.isfinite(ev.objective) and math.isfinite(ev.result.makespan)


# -- subnormal and tiny device numbers ----------------------------------------------------------------------

TINY = st.one_of(st.floats(min_value=0, max_value=2, allow_subnormal=True),
                 st.sampled_from([5e-324, 1e-320, 2.2250738585072014e-308, 1e-300, 1e-9, 0.999999, 1.0]))
DEVICE_NUMBERS = [("devices", 0, "peak_flops"), ("devices", 1, "mem_bandwidth"), ("devices", 0, "memory_bytes"),
                  ("devices", 1, "clock_hz"), ("channels", 0, "bandwidth"), ("channels", 0, "latency"),
                  ("devices", 0, "message_overhead")]
EXPRIMO_NUMBERS = [("devices", 1, "peak_gflops"), ("devices", 1, "memory"), ("devices", 1, "mem_bandwidth"),
                   ("devices", 0, "clock"), ("comm_channels", 0, "bandwidth")]
# the largest quantities our format accepts, on every op
HEAVY = _with(_with(NETWORK, ("ops", 1, "fwd_flops"), 1e24), ("ops", 1, "mem_bytes"), 1e24)


@fuzz
@given(st.one_of(st.tuples(st.just(DEVICES), st.lists(st.sampled_from(DEVICE_NUMBERS), min_size=1, max_size=3)),
                 st.tuples(st.just(EXPRIMO_DEVICES), st.lists(st.sampled_from(EXPRIMO_NUMBERS), min_size=1,
                                                              max_size=3))),
       st.data())
def test_tiny_device_numbers(case, data):
    """Either a field error or finite times, even for 1e24 FLOPs at the lowest efficiency the CLI takes."""
    base, paths = case
    doc = base
    for path in paths:
        doc = _with(doc, path, data.draw(TINY))
    try:
        devs = devices_from_data(doc, source="tiny.json")
    except InputError as e:
        assert e.message.startswith("tiny.json: ") and ("small" in e.message or "positive" in e.message)
        return
    g = network_from_data(HEAVY)
    for eff in (None, 1e-3):
        p = Problem(g, devs, comp_efficiency=eff, comm_efficiency=eff)
        for d in range(len(devs)):
            assert math.isfinite(p.evaluate(np.full(len(g), d, dtype=np.int32)))
        assert math.isfinite(p.evaluate(np.arange(len(g), dtype=np.int32) % len(devs)))


# -- --timings tables and NET.groups.json -------------------------------------------------------------------

def _timings_case():
    from test_timings_cli import DEVICES as T_DEVICES
    from test_timings_cli import NETWORK as T_NETWORK
    from test_timings_cli import TIMINGS
    groups = {"format": "placement-groups/1", "network": "tiny", "groups": {"x": ["x"], "a": ["a"], "b": ["b"]}}
    return T_NETWORK, T_DEVICES, TIMINGS, groups


@pytest.mark.fuzz
@fuzz
@given(mutated(_timings_case()[2]), st.one_of(st.none(), mutated(_timings_case()[3])))
def test_timing_tables(timings, groups):
    """A mutated timings.json (and NET.groups.json beside the network): an InputError or a table of finite times."""
    import tempfile
    from pathlib import Path

    from placement_core.cli.common import load_cli_timings
    net, devs, _, _ = _timings_case()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        (tmp / "net.json").write_text(json.dumps(net))
        (tmp / "t.json").write_text(json.dumps(timings, allow_nan=True))
        if groups is not None:
            (tmp / "net.groups.json").write_text(json.dumps(groups, allow_nan=True))
        g = network_from_data(net)
        try:
            table = load_cli_timings(str(tmp / "t.json"), str(tmp / "net.json"), g)
        except InputError as e:
            assert e.message and "\n" not in e.message
            return
    for per_device in table.values():
        for phases in per_device.values():
            assert all(type(t) in (int, float) and math.isfinite(t) and t >= 0 for t in phases.values()), table
    p = Problem(g, devices_from_data(devs), timings=table, timings_batch=g.batch_size)
    assert math.isfinite(p.evaluate(np.zeros(len(g), dtype=np.int32)))


# -- special files as --network, --devices, --placement, --timings: never a hang, never read whole -----------

SPECIAL = ["fifo", "/dev/null", "/dev/zero", "/dev/urandom", "directory", "symlink to fifo", "symlink loop",
           "dangling symlink", "socket", "/proc/self/maps", "empty", "name too long"]


def _special(kind, tmp):
    import socket
    path = tmp / "special.json"
    if kind.startswith("/"):
        return kind, None
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "symlink to fifo":
        os.mkfifo(tmp / "real")
        path.symlink_to(tmp / "real")
    elif kind == "symlink loop":
        path.symlink_to(path)
    elif kind == "dangling symlink":
        path.symlink_to(tmp / "nowhere")
    elif kind == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))
        return str(path), s
    elif kind == "empty":
        path.write_text("")
    elif kind == "name too long":
        path = tmp / ("n" * 256)
    return str(path), None


@pytest.mark.timeout(60)
@pytest.mark.parametrize("option", ["--network", "--devices", "--placement", "--timings"])
@pytest.mark.parametrize("kind", SPECIAL)
def test_special_files(capsys, tmp_path, kind, option):
    path, keep = _special(kind, tmp_path)
    argv = {"--network": "alexnet", "--devices": "malvik", "--placement": "single:gpu0"}
    argv[option] = path
    try:
        code = main(["simulate", *[x for kv in argv.items() for x in kv]])
    finally:
        if keep is not None:
            keep.close()
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1, err
    assert "unexpected" not in err


# -- --param values: finite, bounded, storable ---------------------------------------------------------------

def _algorithm_params():
    from placement_core.optimize import ALGORITHMS
    return [(a, k) for a, cls in ALGORITHMS.items() for k in cls.PARAMS]


PARAM_VALUES = st.one_of(
    st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e999", "1e308", "5e-324", "-0", "0",
                     "1", "2", "0.5", "1_000", " 7 ", "0x10", "²", "٣", "true", "", "1" * 5000,
                     str(2**63 - 1), str(2**63), "100000", "100001", "10000000000"]),
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**70, 2**70), st.sampled_from([10**400, -10**400]),
    st.text(max_size=12), st.booleans())


@fuzz
@given(st.sampled_from(_algorithm_params()), PARAM_VALUES)
def test_param_values(algorithm_param, value):
    """Param.parse returns a value inside its bounds that JSON (and so the run store) can hold, or an InputError."""
    from placement_core.optimize import ALGORITHMS
    from placement_core.optimize.base import MAX_INT_PARAM
    algorithm, key = algorithm_param
    p = ALGORITHMS[algorithm].PARAMS[key]
    try:
        v = p.parse(key, value)
    except InputError as e:
        assert e.message.startswith(f"{key}: ") and len(e.message) < 700
        return
    json.dumps(v, allow_nan=False)
    if p.type is float:
        assert math.isfinite(v)
    if p.type is int:
        assert -MAX_INT_PARAM - 1 <= v <= MAX_INT_PARAM
    if p.low is not None and p.type in (int, float):
        assert v >= p.low
    if p.high is not None and p.type in (int, float):
        assert v <= p.high


@pytest.mark.fuzz
@settings(max_examples=int(__import__("os").environ.get("FUZZ_CLI_EXAMPLES", 40)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.sampled_from([ap for ap in _algorithm_params() if ap[0] in ("ga", "map-elites", "cem", "annealing",
                                                                       "random")]),
       PARAM_VALUES)
def test_cli_param_values_never_break_the_store(tmp_path_factory, capsys, algorithm_param, value):
    """Exit 0 or 2; whatever was stored, `runs show` reads back (a stored NaN broke it for good)."""
    algorithm, key = algorithm_param
    tmp = tmp_path_factory.mktemp("param")
    net, devs = tmp / "net.json", tmp / "devs.json"
    net.write_text(json.dumps(NETWORK))
    devs.write_text(json.dumps(DEVICES))
    home = tmp / "home"
    text = value if isinstance(value, str) else repr(value)
    code = main(["optimize", "--network", str(net), "--devices", str(devs), "--algorithm", algorithm, "--budget",
                 "20", "--param", f"{key}={text}", "--home", str(home), "--quiet"])
    out, err = capsys.readouterr()
    assert code in (0, 2), err
    if code == 2:
        assert err.startswith("error: ") and err.count("\n") == 1
        return
    with RunStore(home=home) as store:
        [run] = store.runs()
    assert main(["runs", "show", str(run.id), "--home", str(home), "--json"]) == 0
    shown = json.loads(capsys.readouterr()[0])
    assert json.dumps(shown, allow_nan=False)


# -- the formats and commands added since the second audit (issue 32): policies, surrogate models, timing tables
# with fixed parts, sharded placements (ours and Exprimo's device lists), pipeline plans, damaged stores ---------

FUZZ_N = int(os.environ.get("FUZZ_EXAMPLES", 300))
fuzz_heavy = settings(max_examples=max(10, FUZZ_N // 5), deadline=None, suppress_health_check=[HealthCheck.too_slow])
SHARD_DEVICES = {**DEVICES, "devices": DEVICES["devices"] + [
    {"name": "gpu1", "kind": "gpu", "peak_flops": 1e13, "memory_bytes": 1e9, "mem_bandwidth": 9e11}],
    "channels": [{"name": "pcie", "bandwidth": 16e9, "latency": 1e-5, "routes": [
        [a, b] for a in ("cpu0", "gpu0", "gpu1") for b in ("cpu0", "gpu0", "gpu1") if a != b]}]}
SHARDED = {"format": "placement/1", "assignment": {
    "x": "cpu0", "fc1": {"devices": ["gpu0", "gpu1"], "split": "channel", "sizes": [4, 6]},
    "act": {"devices": ["gpu0", "gpu1"], "split": "batch"}, "fc2": "gpu1"}}
EXPRIMO_LISTS = {"data": 0, "conv1": [1, 2, 1], "pool1": 1, "mix/a": 2, "mix/b": [1, 2], "mix/cat": 1, "fc": [2, 1],
                 "softmax": 0, "mix": 1}


def _policy_doc(method: str, config: dict) -> dict:
    """A small policy file of ``config`` (zeros for weights), built without torch."""
    from placement_core.policies.policy_file import check_config, policy_to_dict, tensor_shapes
    shapes = tensor_shapes(method, check_config(method, config))
    return policy_to_dict(method, config, {k: np.zeros(s, dtype=np.float32) for k, s in shapes.items()},
                          devices={"name": "d", "count": 3, "hash": "ab" * 32},
                          training={"family": "nmt", "episodes": 10, "seed": 0, "final_ratio": 0.9})


POLICY_DOCS = [_policy_doc("placeto", {"hidden": 2, "rounds": 2, "head": 3, "start": "heft"}),
               _policy_doc("gdp", {"hidden": 2, "layers": 1, "heads": 1, "attention_layers": 1, "head": 2}),
               _policy_doc("gdp", {"devices": 3, "hidden": 2, "layers": 1, "heads": 2, "attention_layers": 1})]


@pytest.mark.fuzz
@fuzz
@given(st.sampled_from(range(len(POLICY_DOCS))).flatmap(lambda i: mutated(POLICY_DOCS[i])))
def test_policy_loader(doc):
    """A policy file is refused with its field named, or every tensor has the shape its config's network has;
    with torch, what loads builds (nothing is built before the check: a negative size was a RuntimeError)."""
    from placement_core.policies.policy_file import policy_from_dict, tensor_shapes
    try:
        data = policy_from_dict(doc, source="p.json")
    except InputError as e:
        assert e.message.startswith("p.json: ") and "\n" not in e.message, e.message
        return
    assert {k: v.shape for k, v in data["tensors"].items()} == tensor_shapes(data["method"], data["config"])
    assert all(np.isfinite(v).all() for v in data["tensors"].values())
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    from placement_core.torch.policies.policy_io import policy_from_data
    policy_from_data(data, source="p.json")


def _surrogate_case():
    from placement_core.surrogate.model import SurrogateSpec, model_to_dict
    problem = Problem(network_from_data(NETWORK), devices_from_data(DEVICES))
    X = np.array([[a, b, c, d] for a in (0, 1) for b in (0, 1) for c in (0, 1) for d in (0, 1)], dtype=np.int32)[:8]
    doc = model_to_dict(problem, SurrogateSpec(), X, problem.evaluate_many(X), target="simulated", run_id=1,
                        validation={"kendall_tau": 0.5, "pearson_r": 0.9, "mape": 2.0, "n": 8, "folds": 5})
    return problem, json.loads(json.dumps(doc))


@pytest.mark.fuzz
@fuzz_heavy
@given(mutated(_surrogate_case()[1]))
def test_surrogate_model_loader(doc):
    """A model file is refused with its field named, or refits and predicts finite positive times (values
    beyond int32 and bad seeds were exits 1)."""
    pytest.importorskip("sklearn")
    from placement_core.surrogate.model import model_from_dict
    problem, _ = _surrogate_case()
    try:
        model, _ = model_from_dict(doc, "m.json", problem)
    except InputError as e:
        assert e.message.startswith("m.json: ") and "\n" not in e.message, e.message
        return
    y = model.predict(np.zeros((2, problem.n_ops), dtype=np.int32))
    assert np.isfinite(y).all() and (y > 0).all()


@pytest.mark.fuzz
@fuzz
@given(st.one_of(st.tuples(st.just("ours"), mutated(SHARDED)), st.tuples(st.just("exprimo"), mutated(EXPRIMO_LISTS))))
def test_sharded_placement_loader(case):
    """A split placement (ours, or Exprimo's device lists) is refused with the op named, or indexes a split
    table the simulator runs with finite times (more than 64 devices for one layer was an exit 1)."""
    from placement_core.model.placement import check_placement
    kind, doc = case
    if kind == "ours":
        g, devs = network_from_data(NETWORK), devices_from_data(SHARD_DEVICES)
    else:
        g, devs = network_from_data(EXPRIMO_NET, batch_size=2), devices_from_data(EXPRIMO_DEVICES)
    splits: list = []
    try:
        pl = placement_from_dict(doc, g, devs, source="s.json", splits=splits)
    except InputError as e:
        assert e.message.startswith("s.json") and "\n" not in e.message, e.message
        return
    check_placement(pl, g, devs, splits)
    p = Problem(g, devs, splits=tuple(splits), profile="exprimo-2020" if kind == "exprimo" else "default")
    assert math.isfinite(p.evaluate(pl))


TIMINGS_FIXED = {"format": "placement-timings/1", "network": "tiny", "input_shape": [1, 4], "batch_size": 4, "ops": {
    op: {dev: {"fwd": f, "bwd": 2 * f, "update": f / 4, "fwd_fixed": f / 3, "bwd_fixed": f / 2} for dev in ("cpu0", "cpu1")}
    for op, f in (("x", 0.0), ("a", 1e-3), ("b", 3e-3))}}


@pytest.mark.fuzz
@fuzz
@given(mutated(TIMINGS_FIXED), st.sampled_from([1, 2, 4]))
def test_timing_tables_with_fixed_parts(timings, micro):
    """A table with fwd_fixed/bwd_fixed: an InputError, or finite times whole and split into micro-batches."""
    import tempfile
    from pathlib import Path

    from placement_core.cli.common import load_cli_timings
    from placement_core.problem import ProblemSpec
    net, devs, _, _ = _timings_case()
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "net.json").write_text(json.dumps(net))
        (Path(tmp) / "t.json").write_text(json.dumps(timings, allow_nan=True))
        g = network_from_data(net)
        try:
            table = load_cli_timings(str(Path(tmp) / "t.json"), str(Path(tmp) / "net.json"), g)
        except InputError as e:
            assert e.message and "\n" not in e.message
            return
    spec = ProblemSpec(timings=table, timings_batch=g.batch_size,
                       **({"schedule": "gpipe", "micro_batches": micro} if micro > 1 else {}))
    p = spec.build(g, devices_from_data(devs))
    for x in (np.zeros(p.n_ops, dtype=np.int32), np.arange(p.n_ops, dtype=np.int32) % 2):
        assert math.isfinite(p.evaluate(x))


@pytest.mark.fuzz
@fuzz
@given(st.integers(-1, 12), st.one_of(st.none(), st.integers(-1, 6)), st.sampled_from(
    ["thesis", "gpipe", "1f1b", "interleaved-1f1b", "zb-h1"]), st.integers(0, 20), st.booleans())
def test_pipeline_plans(p, v, schedule, micro, forward_only):
    """``--placement stages:PxV`` under every schedule: a field error, or a plan the simulator runs."""
    from placement_core.analysis.pipeline import placement_option
    from placement_core.problem import ProblemSpec
    g, devs = network_from_data(NETWORK), devices_from_data(SHARD_DEVICES)
    spec_text = f"stages:{p}" + ("" if v is None else f"x{v}")
    try:
        spec = ProblemSpec(schedule=schedule, micro_batches=micro if schedule != "thesis" else 1,
                           virtual_stages=(v or 1) if schedule == "interleaved-1f1b" else 1,
                           forward_only=forward_only)
        x = placement_option(spec_text, g, devs)
        problem = spec.build(g, devs)
        ev = problem.simulate(x)
    except InputError as e:
        assert e.message and "\n" not in e.message
        return
    assert math.isfinite(ev.objective)


@settings(max_examples=int(os.environ.get("FUZZ_CLI_EXAMPLES", 40)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@pytest.mark.fuzz
@given(st.sampled_from(["policy", "surrogate", "sharded", "exprimo lists", "timings", "stages"]), st.data())
def test_cli_new_formats_never_show_a_traceback(tmp_path_factory, capsys, what, data):
    """Through the command line: exit 0, or 2 with one error line and no run stored."""
    tmp = tmp_path_factory.mktemp("new")
    home = tmp / "home"

    def write(name, doc):
        path = tmp / name
        path.write_text(json.dumps(doc, allow_nan=True))
        return str(path)
    net, devs = write("net.json", NETWORK), write("devs.json", SHARD_DEVICES)
    if what == "policy":
        pytest.importorskip("torch")
        argv = ["optimize", "--algorithm", "placeto", "--policy", write("p.json", data.draw(mutated(POLICY_DOCS[0]))),
                "--network", net, "--devices", devs, "--budget", "0", "--home", str(home), "--quiet"]
    elif what == "surrogate":
        pytest.importorskip("sklearn")
        assert main(["optimize", "--network", net, "--devices", write("d2.json", DEVICES), "--algorithm", "random",
                     "--budget", "10", "--home", str(home), "--quiet"]) == 0
        capsys.readouterr()
        argv = ["surrogate", "score", "--model", write("m.json", data.draw(mutated(_surrogate_case()[1]))), "--run",
                "1", "--test", "5", "--home", str(home)]
    elif what == "sharded":
        argv = ["simulate", "--network", net, "--devices", devs, "--placement",
                write("s.json", data.draw(mutated(SHARDED))), "--json"]
    elif what == "exprimo lists":
        argv = ["simulate", "--network", write("e.json", EXPRIMO_NET), "--devices", write("ed.json", EXPRIMO_DEVICES),
                "--placement", write("s.json", data.draw(mutated(EXPRIMO_LISTS))), "--json"]
    elif what == "timings":
        t_net, t_devs, _, _ = _timings_case()
        argv = ["simulate", "--network", write("tn.json", t_net), "--devices", write("td.json", t_devs), "--placement",
                "single:cpu1", "--timings", write("t.json", data.draw(mutated(TIMINGS_FIXED))), "--json"]
    else:
        argv = ["simulate", "--network", net, "--devices", devs, "--placement",
                f"stages:{data.draw(st.integers(-1, 5))}x{data.draw(st.integers(-1, 3))}",
                "--schedule", data.draw(st.sampled_from(["gpipe", "1f1b", "interleaved-1f1b", "zb-h1"])),
                "--micro-batches", str(data.draw(st.integers(1, 8)))]
    before = 1 if what == "surrogate" else 0
    code = main(argv)
    out, err = capsys.readouterr()
    assert code in (0, 2), err
    if code == 2:
        assert out == "" and err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
        if (home / "runs.sqlite").exists():
            with RunStore(home=home) as store:
                assert len(store.runs()) == before  # a rejected input writes nothing
    else:
        assert "Traceback" not in err


@pytest.fixture(scope="module")
def small_store(tmp_path_factory):
    from placement_core.store.recording import start_run
    home = tmp_path_factory.mktemp("small-store")
    problem = Problem(network_from_data(NETWORK), devices_from_data(DEVICES))
    with RunStore(home=home) as store:
        for i in range(5):
            start_run(store, problem, "ga", evaluations=40, seed=i, label=f"run {i} " + "x" * 800)
    return (home / "runs.sqlite").read_bytes()


DAMAGE = st.lists(st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1)), st.tuples(st.just("wipe"), st.floats(0, 1)),
    st.tuples(st.just("tear"), st.floats(0, 1)), st.tuples(st.just("header"), st.floats(0, 1)),
    st.tuples(st.just("flip"), st.floats(0, 1))), min_size=1, max_size=3)


@settings(max_examples=max(10, FUZZ_N // 10), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@pytest.mark.fuzz
@given(DAMAGE, st.integers(0, 2**32 - 1))
def test_the_doctor_on_damaged_stores(tmp_path_factory, capsys, small_store, damage, seed):
    """Whatever the damage: the doctor exits 0 or 3 (or 2 for nothing to read), never raises, and every run it
    saves is whole (its label, its problem); the store's other commands refuse in one line."""
    import random
    rng = random.Random(seed)
    d = bytearray(small_store)
    for kind, at in damage:
        if kind == "truncate":
            d = d[:int(len(d) * at)]
        elif kind in ("wipe", "tear") and len(d) >= 4096:
            page = int(at * (len(d) // 4096 - 1e-9))
            start = page * 4096 + (rng.randrange(4096) if kind == "tear" else 0)
            d[start:(page + 1) * 4096] = bytes(rng.randrange(256) for _ in range((page + 1) * 4096 - start))
        elif kind == "header":
            d[:100] = bytes(rng.randrange(256) for _ in range(100))
        elif kind == "flip" and d:
            for _ in range(1 + int(at * 20)):
                d[rng.randrange(len(d))] = rng.randrange(256)
    home = tmp_path_factory.mktemp("damaged")
    (home / "runs.sqlite").write_bytes(bytes(d))
    code = main(["runs", "doctor", "--home", str(home), "--out", str(home / "saved.sqlite")])
    out, err = capsys.readouterr()
    assert code in (0, 2, 3) and "Traceback" not in err, err
    if (home / "saved.sqlite").exists():
        with RunStore(path=home / "saved.sqlite") as saved:
            runs, damaged = saved.runs_checked()
            assert damaged == []
            for r in runs:
                saved.problem(r.id)
    for argv in (["runs", "list"], ["runs", "show", "1"]):
        code = main(argv + ["--home", str(home)])
        out, err = capsys.readouterr()
        assert code in (0, 2) and (code == 0 or (err.startswith("error: ") and err.count("\n") == 1)), err
