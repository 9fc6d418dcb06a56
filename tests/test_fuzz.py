"""Hardening: malformed and adversarial files at every loader and at the CLI.

Documents are valid ones mutated at random (fields deleted, values replaced by
wrong types, NaN, huge numbers, unicode, empty lists, duplicates, unknown
names). Every outcome must be a loaded object or an InputError -- never another
exception -- and at the CLI exit status 2 with one `error:` line, no traceback,
and nothing written to the run store.
"""

import copy
import json
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement_core.catalog import devices_from_data, network_from_data
from placement_core.cli import main
from placement_core.devices import devices_to_dict
from placement_core.errors import InputError
from placement_core.placement import placement_from_dict
from placement_core.problem import Problem
from placement_core.store import RunStore
from test_exprimo_and_cost import NET as EXPRIMO_NET
from test_devices import EXPRIMO as EXPRIMO_DEVICES

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


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, prefix + (i,))


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
    from placement_core.catalog import devices_from_upload, network_from_upload
    for loader in (network_from_upload, devices_from_upload):
        try:
            loader(content, "upload.json")
        except InputError as e:
            assert e.source == "upload.json"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
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
