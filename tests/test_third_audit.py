"""Issue 32, the third audit's failures: every bad input a clean refusal (exit 2, one `error:` line, no
traceback, nothing half-written). The run store's salvage has its own file (test_store_salvage.py)."""

import json
import os

import pytest

from placement_core.cli import main


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def refused(code, out, err, *words):
    assert code == 2, (code, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, (w, err)
    return err


# -- 1. an Exprimo assignment that splits one layer over more than 64 devices ------------------------------

EXPRIMO_NET = {"name": "t", "layers": {
    "data": {"type": "Input", "parents": [], "tensor": [8, 8, 8, 3]},
    "conv1": {"type": "Convolution", "parents": ["data"], "filter": [3, 3, -1, 128], "strides": [1, 1, 1, 1],
              "padding": "SAME"},
    "fc": {"type": "InnerProduct", "parents": ["conv1"], "num_outputs": 10}}}


@pytest.mark.parametrize("count", [65, 66, 500])
def test_an_exprimo_layer_over_more_than_64_devices_is_refused(capsys, tmp_path, count):
    net, pl = tmp_path / "net.json", tmp_path / "pl.json"
    net.write_text(json.dumps(EXPRIMO_NET))
    pl.write_text(json.dumps({"data": 0, "conv1": [1, 2] * (count // 2) + [1] * (count % 2), "fc": 1}))
    err = refused(*cli(capsys, "simulate", "--network", net, "--devices", "malvik", "--placement", pl), "conv1", "64")
    assert f"{pl}: conv1: layer 'conv1' lists {count} devices" in err
    # 64 devices is the limit, and allowed
    pl.write_text(json.dumps({"data": 0, "conv1": [1, 2] * 32, "fc": 1}))
    assert cli(capsys, "simulate", "--network", net, "--devices", "malvik", "--placement", pl)[0] == 0


# -- 7. the experiments' usage mistakes: one line, not argparse's usage block ----------------------------------

@pytest.mark.parametrize("experiment", ["e3", "generalization", "traversal", "post", "assisted", "seeding"])
@pytest.mark.parametrize("argv", [["--bogus"], ["--budget"], ["--budget", "-5"], ["--seeds", "x"],
                                  ["--budget", "1" * 40]])
def test_experiment_usage_mistakes_are_one_line(capsys, experiment, argv):
    if experiment == "traversal" and argv[0] == "--seeds":
        argv = ["--episodes", "x"]
    if experiment in ("generalization", "traversal") and argv[0] == "--seeds":
        argv = ["--seed", "-1"]
    if experiment == "seeding" and argv[0] == "--budget":
        argv = ["--bayes"] + argv[1:]
    err = refused(*cli(capsys, "experiment", experiment, *argv))
    assert "usage:" not in err and f"placement experiment {experiment} --help" in err


# -- 8. outputs checked before the work, defaults that work outside the repository ------------------------------

def test_sharding_checks_its_report_path_before_the_searches(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside the repository: no docs/ here
    err = refused(*cli(capsys, "experiment", "sharding", "--networks", "alexnet", "--budget", "10", "--out", "res",
                       "--markdown", "docs/sharding-results.md"), "--markdown", "docs")
    assert not (tmp_path / "res").exists()  # nothing done, nothing written
    assert "alexnet:" not in err
    code, out, err = cli(capsys, "experiment", "sharding", "--networks", "alexnet", "--budget", "10")
    assert code == 0, err
    assert (tmp_path / "sharding-results" / "results.csv").is_file() and (tmp_path / "sharding-results.md").is_file()
    code, out, err = cli(capsys, "experiment", "sharding", "--networks", "alexnet", "--budget", "10", "--out",
                         "other/deeper", "--markdown", "other/report.md")
    assert code == 0, err
    assert (tmp_path / "other" / "report.md").is_file()
    assert sorted(os.listdir(tmp_path)) == ["other", "sharding-results", "sharding-results.md"]


def test_e3_checks_its_report_before_the_runs(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.md").write_bytes(b"\xff\xfe not text")
    for argv, words in ((["--out", "res"], ["docs/e3.md"]), (["--markdown", "bad.md"], ["bad.md", "UTF-8"]),
                        (["--markdown", "nowhere/e3.md"], ["nowhere"])):
        refused(*cli(capsys, "experiment", "e3", "--budget", "10", "--seeds", "1", "--networks", "alexnet",
                     "--algorithms", "random", "--versions", "normal", "--workers", "1", *argv), *words)
    assert sorted(os.listdir(tmp_path)) == ["bad.md"]


# -- 8. `placement benchmark --placement FILE` with split ops, in text -------------------------------------------

SMALL_CNN = str(__import__("pathlib").Path(__file__).resolve().parent / "torch_models.py") + ":SmallCNN"
CNN_OPS = ["x", "conv1", "relu", "pool", "flatten", "fc"]


def _sharded_placement(tmp_path):
    entries = dict({op: "cpu0" for op in CNN_OPS}, conv1={"devices": ["cpu0", "cpu1"], "split": "channel"},
                   fc={"devices": ["cpu0", "cpu1"], "split": "batch"})
    path = tmp_path / "sharded.json"
    path.write_text(json.dumps({"format": "placement/1", "assignment": entries}))
    return path


def test_benchmark_text_output_of_a_split_placement(capsys, tmp_path, monkeypatch):
    """The measurement is replaced by a canned one (a real one takes 14 s): what failed was the text after it."""
    pytest.importorskip("torch")
    import placement_core.torch.benchmark as bench
    seen = []

    def measured(model, shape, placements, devs, **kw):
        seen.append(placements)
        return [bench.BenchmarkResult("ok", kw["runner"], [{"name": d.name, "torch": d.torch, "peak_memory_bytes": None,
                                                            "memory_limit_bytes": None} for d in devs],
                                      steps_s=[0.01, 0.012], warmup_s=[0.02])]
    monkeypatch.setattr(bench, "benchmark", measured)
    code, out, err = cli(capsys, "benchmark", "--model", SMALL_CNN, "--input-shape", "2,3,8,8", "--batch-size", 4,
                         "--devices", "cpu:2", "--placement", _sharded_placement(tmp_path), "--home", tmp_path / "h")
    assert code == 0, err
    assert "(uses cpu0, cpu1)" in out and "median_step_s: 0.011000" in out
    assert seen[0][0]["conv1"] == {"devices": ["cpu0", "cpu1"], "split": "channel"}


def test_a_pipelined_benchmark_refuses_split_ops(capsys, tmp_path):
    pytest.importorskip("torch")
    refused(*cli(capsys, "benchmark", "--model", SMALL_CNN, "--input-shape", "2,3,8,8", "--batch-size", 4,
                 "--devices", "cpu:2", "--placement", _sharded_placement(tmp_path), "--schedule", "gpipe",
                 "--micro-batches", 2, "--no-store"), "--placement", "conv1", "split")


# -- 2. policy files: every field checked, with its bounds, before anything is built ----------------------------

POLICIES = __import__("pathlib").Path(__file__).resolve().parents[1] / "assets" / "policies"


def _policy(name="placeto-nmt-malvik-4gpu"):
    return json.loads((POLICIES / f"{name}.json").read_text())


@pytest.mark.parametrize("field, value, words", [
    ("hidden", -1, ["config.hidden", "from 1 to 1024", "-1"]),
    ("hidden", 10**9, ["config.hidden"]),
    ("rounds", 10**9, ["config.rounds", "from 1 to 64"]),
    ("rounds", 1e9, ["config.rounds"]),
    ("head", 0, ["config.head", "from 1 to 4096"]),
    ("head", True, ["config.head"]),
    ("start", "nowhere", ["config.start", "fastest"]),
    ("extra", 1, ["config.extra", "unknown field"]),
])
@pytest.mark.timeout(60)
def test_policy_config_out_of_bounds_is_one_clean_line(capsys, tmp_path, field, value, words):
    """A negative size exited 1 (torch's RuntimeError), rounds 1e9 ran unbounded, head 0 printed torch's warnings."""
    pytest.importorskip("torch")
    doc = _policy()
    doc["config"][field] = value
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    refused(*cli(capsys, "optimize", "--algorithm", "placeto", "--policy", path, "--network", "alexnet",
                 "--devices", "malvik-4gpu", "--budget", 0, "--home", tmp_path / "h"), f"{path}: ", *words)
    _no_runs(tmp_path / "h")


def _no_runs(home):
    from placement_core.store import RunStore
    if (home / "runs.sqlite").exists():
        with RunStore(home=home) as store:
            assert store.runs() == []


def _mutations():
    gdp = _policy("gdp-mix-malvik-4gpu")
    placeto = _policy()
    yield "gdp heads", gdp, ("config", "heads"), 3, "config.heads"  # 3 heads do not divide 32 hidden units
    yield "gdp devices", gdp, ("config", "devices"), 0, "config.devices"
    yield "gdp devices huge", gdp, ("config", "devices"), 10**6, "config.devices"
    yield "gdp attention", gdp, ("config", "attention_layers"), 10**4, "config.attention_layers"
    yield "gdp no devices", gdp, ("config", "devices"), None, "config.devices"
    yield "config", placeto, ("config",), [], "config"
    yield "devices count", placeto, ("devices", "count"), -3, "devices.count"
    yield "devices name", placeto, ("devices", "name"), "", "devices.name"
    yield "devices hash", placeto, ("devices", "hash"), {"a": 1}, "devices.hash"
    yield "devices extra", placeto, ("devices", "what"), 1, "devices.what"
    yield "training nan", placeto, ("training", "episodes"), float("nan"), "training.episodes"
    yield "training huge", placeto, ("training", "final_ratio"), 10**400, "training.final_ratio"
    yield "training list", placeto, ("training", "family"), [1, 2], "training.family"
    yield "tensor shape", placeto, ("tensors", "embed.weight", "shape"), [16, 8], "tensors.embed.weight.shape"
    yield "tensor missing", placeto, ("tensors", "keep"), None, "tensors.keep"
    yield "tensor extra", placeto, ("tensors", "bonus"), {"shape": [], "data": "AACAPw=="}, "tensors.bonus"
    yield "tensor field", placeto, ("tensors", "keep", "dtype"), "f4", "tensors.keep"


@pytest.mark.parametrize("case", list(_mutations()), ids=lambda c: c[0])
def test_policy_fields_are_validated_without_torch(case):
    """The torch-free check (policies/policy_file.py) names the field; nothing is built."""
    from placement_core.base.errors import InputError
    from placement_core.policies.policy_file import policy_from_dict
    _, doc, path, value, field = case
    doc = json.loads(json.dumps(doc))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if value is None:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    with pytest.raises(InputError) as e:
        policy_from_dict(doc, source="p.json")
    assert e.value.message.startswith(f"p.json: {field}: ") and "\n" not in e.value.message, e.value.message


@pytest.mark.parametrize("method, config", [
    ("placeto", {"hidden": 3, "rounds": 2, "head": 5, "start": "heft"}),
    ("placeto", {"hidden": 16, "rounds": 3, "head": 64, "start": "fastest"}),
    ("gdp", {"devices": 3, "hidden": 8, "layers": 1, "heads": 4, "attention_layers": 1}),
    ("gdp", {"devices": 5, "hidden": 32, "layers": 3, "heads": 2, "attention_layers": 2}),
])
def test_the_torch_free_tensor_shapes_are_the_networks_own(method, config):
    pytest.importorskip("torch")
    from placement_core.policies.policy_file import check_config, tensor_shapes
    from placement_core.torch.policies.policy_io import build_net
    built = {k: tuple(v.shape) for k, v in build_net(method, check_config(method, config)).state_dict().items()}
    assert built == tensor_shapes(method, check_config(method, config))


def test_every_shipped_policy_still_loads():
    from placement_core.policies.policy_file import read_policy
    for path in POLICIES.glob("*.json"):
        assert read_policy(path)["tensors"]


def test_gdp_training_refuses_an_odd_hidden_size(capsys, tmp_path):
    pytest.importorskip("torch")
    refused(*cli(capsys, "train-policy", "--method", "gdp", "--hidden", 3, "--family", "nmt", "--count", 2,
                 "--devices", "malvik-4gpu", "--episodes", 2, "--rollouts", 2, "--out", tmp_path / "p.json",
                 "--no-store"), "--hidden", "even")
    assert not (tmp_path / "p.json").exists()


# -- 3. surrogate model files: every field checked, with its bounds --------------------------------------------

@pytest.fixture(scope="module")
def surrogate_case(tmp_path_factory):
    """A stored run (AlexNet on malvik) and a small valid model file of it, made without a fit."""
    import numpy as np

    from placement_core.store import RunStore
    from placement_core.surrogate.model import SurrogateSpec, model_to_dict, sample_placements
    pytest.importorskip("sklearn")
    home = tmp_path_factory.mktemp("surrogate")
    assert main(["optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "random", "--budget", "20",
                 "--home", str(home), "--quiet"]) == 0
    with RunStore(home=home) as store:
        problem = store.problem(1)
    X = sample_placements(problem, [], 24, np.random.default_rng(0))
    doc = model_to_dict(problem, SurrogateSpec(), X, problem.evaluate_many(X), target="simulated", run_id=1,
                        validation={"kendall_tau": 0.5, "pearson_r": 0.9, "mape": 3.0, "n": 24, "folds": 5})
    return home, json.loads(json.dumps(doc))


SURROGATE_DAMAGE = [
    ("placements", 0, 0, 2**31, "placements[0][0]"),
    ("placements", 3, 5, -1, "placements[3][5]"),
    ("placements", 3, 5, 3, "placements[3][5]"),  # malvik has 3 devices: indices 0..2
    ("placements", 1, 0, 1.0, "placements[1][0]"),
    ("placements", 1, 0, True, "placements[1][0]"),
    ("placements", 2, None, [0, 1], "placements[2]"),
    ("targets", 4, None, -1.0, "targets[4]"),
    ("targets", 4, None, 0, "targets[4]"),
    ("targets", 4, None, 10**400, "targets[4]"),
    ("targets", 4, None, "fast", "targets[4]"),
    ("spec", "seed", None, 2**32, "spec.seed"),
    ("spec", "seed", None, -1, "spec.seed"),
    ("spec", "seed", None, 1.5, "spec.seed"),
    ("spec", "learner", None, "svm", "spec.learner"),
    ("spec", "encoding", None, 7, "spec.encoding"),
    ("spec", "simulated", None, "yes", "spec.simulated"),
    ("spec", "extra", None, 1, "spec.extra"),
    ("validation", "kendall_tau", None, 10**400, "validation.kendall_tau"),
    ("validation", "what", None, 1, "validation.what"),
    ("run", None, None, -4, "run"),
    ("target", None, None, "guessed", "target"),
    ("network_hash", None, None, "abc", "network_hash"),
    ("network", None, None, "", "network"),
    ("problem", "schedule", None, "sideways", "problem.schedule"),
    ("bonus", None, None, 1, "bonus"),
]


@pytest.mark.parametrize("damage", SURROGATE_DAMAGE, ids=lambda d: f"{d[-1]}={d[3]!r}"[:40])
def test_a_damaged_surrogate_file_is_one_clean_line(capsys, tmp_path, surrogate_case, damage):
    home, doc = surrogate_case
    doc = json.loads(json.dumps(doc))
    key, a, b, value, field = damage
    if a is None:
        doc[key] = value
    elif b is None:
        doc[key][a] = value
    else:
        doc[key][a][b] = value
    path = tmp_path / "model.json"
    path.write_text(json.dumps(doc, allow_nan=True))
    refused(*cli(capsys, "surrogate", "score", "--model", path, "--run", 1, "--test", 10, "--home", home),
            f"{path}: {field}: ")


def test_a_valid_surrogate_file_still_scores(capsys, tmp_path, surrogate_case):
    home, doc = surrogate_case
    path = tmp_path / "model.json"
    path.write_text(json.dumps(doc))
    code, out, err = cli(capsys, "surrogate", "score", "--model", path, "--run", 1, "--test", 10, "--home", home,
                         "--json")
    assert code == 0, err
    assert json.loads(out)["n_train"] == 24


@pytest.mark.parametrize("argv, words", [(["--seed", str(2**32)], ["--seed", "4,294,967,295"]),
                                         (["--samples", "2000000000"], ["--samples", "at most"])])
@pytest.mark.timeout(60)
def test_surrogate_fit_bounds_its_seed_and_samples(capsys, tmp_path, surrogate_case, argv, words):
    home, _ = surrogate_case
    refused(*cli(capsys, "surrogate", "fit", "--run", 1, "--out", tmp_path / "m.json", "--home", home, *argv), *words)
    assert not (tmp_path / "m.json").exists()


# -- 4. seeding: bounded work, and interruptible ------------------------------------------------------------

def _chain(tmp_path, ops):
    layers = [{"name": "x", "kind": "input", "output_bytes": 400, "shape": [4, 100]}]
    layers += [{"name": f"l{i}", "kind": "linear", "inputs": [layers[-1]["name"] if i == 0 else f"l{i - 1}"],
                "fwd_flops": 8000, "output_bytes": 400, "param_bytes": 4040} for i in range(ops - 1)]
    path = tmp_path / f"chain{ops}.json"
    path.write_text(json.dumps({"format": "placement-network/1", "name": f"chain{ops}", "batch_size": 4,
                                "ops": layers}))
    return path


@pytest.mark.timeout(60)
@pytest.mark.parametrize("init, ops, words", [
    ("random:100000", 2000, ["100,000 initial placements", "at most random:10000", "20,000,000"]),
    ("heft,random:100000", 2000, ["at most random:9999"]),
    ("bayes:100000", 3, ["bayes:100000", "at most bayes:1000"]),
    ("bayes:1001", 3, ["at most bayes:1000"]),
    ("bayes:300", 176, ["at most bayes:284"]),
])
def test_seeding_work_is_bounded_before_it_starts(capsys, tmp_path, init, ops, words):
    """random:100000 on a large network tried to allocate 37 GiB; bayes:100000 ran past 120 s on 3 ops."""
    refused(*cli(capsys, "optimize", "--network", _chain(tmp_path, ops), "--devices", "malvik", "--algorithm", "ga",
                 "--budget", 10, "--init", init, "--home", tmp_path / "h"), "--init", *words)
    _no_runs(tmp_path / "h")


def test_the_limits_leave_the_documented_starts_alone(tmp_path):
    from placement_core import load_devices, load_network
    from placement_core.optimize.seeding import check_init, parse_init
    from placement_core.problem import Problem
    for net in ("resnet50", "inception_v3"):
        p = Problem(load_network(net), load_devices("malvik-4gpu-limited-resnet50"))
        check_init(p, parse_init("heft,heft-nocomm,heft-memory,min-cut,m-etf,m-topo,expert,single,random:10000,"
                                 "bayes:100"))


@pytest.mark.timeout(60)
def test_ctrl_c_during_seeding_is_a_clean_stop(capsys, tmp_path):
    import _thread
    import signal
    import threading
    # Python's own SIGINT handler, as a fresh `placement` process has it (a module earlier in the full run may
    # leave one of its own installed, which took the interrupt and let the seeding finish: exit 0)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, _thread.interrupt_main)
    timer.start()
    try:
        # 100,000 random placements of 150 ops: seconds of seeding on any machine (of 40 ops it took under the
        # timer's 0.5 s on a fast day)
        code, out, err = cli(capsys, "optimize", "--network", _chain(tmp_path, 150), "--devices", "malvik",
                             "--algorithm", "ga", "--budget", 10, "--init", "random:100000", "--home", tmp_path / "h")
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert code == 130 and out == "" and err == "error: interrupted\n"
    _no_runs(tmp_path / "h")


# -- 9. a budget that would run for years: said before it starts; Ctrl-C a clean stop that resumes -------------

def _interrupt_after(seconds):
    import _thread
    import signal
    import threading
    timer = threading.Timer(seconds, _thread.interrupt_main, args=(signal.SIGINT,))
    timer.start()
    return timer


def _interrupt_past(home, run_id, evaluations):
    """Ctrl-C once run ``run_id`` has a checkpoint past ``evaluations`` (not after a fixed time: on a loaded
    machine a resume may not have reached its first batch after a second)."""
    import _thread
    import signal
    import threading
    import time

    from placement_core.store import RunStore
    done = threading.Event()

    def watch():
        while not done.wait(0.05):
            try:
                with RunStore(home=home) as store:
                    state = store.load_checkpoint(run_id)
            except Exception:  # noqa: BLE001 - the store is being written: look again
                continue
            if state is not None and state["evaluations"] > evaluations:
                _thread.interrupt_main(signal.SIGINT)
                return
    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    thread.cancel = done.set  # the same call as a Timer's
    return thread


@pytest.mark.timeout(60)
def test_a_huge_budget_says_how_long_and_ctrl_c_stops_it_for_a_resume(capsys, tmp_path):
    from placement_core.store import RunStore
    home = tmp_path / "h"
    timer = _interrupt_after(1.0)
    try:
        code, out, err = cli(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "ga",
                             "--budget", 1_000_000_000, "--home", home)
    finally:
        timer.cancel()
    assert code == 0, err
    note, stopping = [line for line in err.splitlines() if line][:2]
    assert note.startswith("note: 1,000,000,000 evaluations at about ") and "evaluations/s" in note
    # an hour or more on any machine (10^9 AlexNet evaluations at over 10^5 a second is still 1.5 hours)
    assert any(unit in note for unit in ("minutes", "hours", "days", "years")) and "--resume" in note
    assert stopping.startswith("stopping after this batch")
    assert "stopped after " in out and "`placement optimize --resume 1` continues it" in out
    with RunStore(home=home) as store:
        first = store.get(1)
        assert first.status == "stopped" and first.evaluations > 0
        assert store.load_checkpoint(1)["evaluations"] == first.evaluations  # it resumes where it stopped
    timer = _interrupt_past(home, 1, first.evaluations)
    try:
        code, out, err = cli(capsys, "optimize", "--resume", 1, "--home", home)
    finally:
        timer.cancel()
    assert code == 0, err
    with RunStore(home=home) as store:
        again = store.get(1)
    assert again.status == "stopped" and again.evaluations > first.evaluations


def test_a_short_budget_says_nothing(capsys, tmp_path):
    code, out, err = cli(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "ga",
                         "--budget", 200, "--no-store")
    assert code == 0 and err == ""


# -- 6. Dask: a bad address, something else on the port, a scheduler lost mid-run ------------------------------

@pytest.mark.parametrize("address", ["not a url", "tcp://", "tcp://127.0.0.1", "tcp://127.0.0.1:99999", ":8786",
                                     "tcp://[::1", "\x1b[31m:1"])
def test_a_bad_dask_address_is_one_line(capsys, tmp_path, address):
    pytest.importorskip("distributed")
    err = refused(*cli(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "ga",
                       "--budget", 100, "--dask", address, "--home", tmp_path / "h"), "dask")
    assert "\x1b" not in err
    _no_runs(tmp_path / "h")


@pytest.mark.timeout(60)
def test_a_server_that_is_not_dask_is_one_line(capsys, tmp_path):
    """It answered with bytes Dask read as a frame length: MemoryError, Unable to allocate 3.07 EiB."""
    pytest.importorskip("distributed")
    import socket
    import threading
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()

    def answer():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello" * 20)
    threading.Thread(target=answer, daemon=True).start()
    try:
        err = refused(*cli(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "ga",
                           "--budget", 100, "--dask", f"tcp://127.0.0.1:{server.getsockname()[1]}",
                           "--home", tmp_path / "h"), "dask")
    finally:
        server.close()
    assert "MemoryError" not in err or "not a Dask scheduler" in err
    _no_runs(tmp_path / "h")


@pytest.fixture
def dask_scheduler(tmp_path):
    """A real scheduler and two workers (one would leave every batch here), each its own process."""
    pytest.importorskip("distributed")
    import subprocess
    import sys
    import time
    file = tmp_path / "scheduler.json"
    bin_dir = __import__("pathlib").Path(sys.executable).parent
    scheduler = subprocess.Popen([str(bin_dir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                                  "--no-dashboard", "--scheduler-file", str(file)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = None
    try:
        for _ in range(300):
            if file.exists() and file.stat().st_size:
                break
            time.sleep(0.05)
        address = json.loads(file.read_text())["address"]
        worker = subprocess.Popen([str(bin_dir / "dask"), "worker", address, "--nworkers", "2", "--nthreads", "1",
                                   "--no-dashboard"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        from distributed import Client
        with Client(address, timeout="20s") as client:
            client.wait_for_workers(2, timeout=60)  # counted when the run connects: fewer, and it stays here
        yield address, scheduler
    finally:
        for p in (scheduler, worker):
            if p is not None:
                p.kill()
                p.wait()


@pytest.mark.dask
@pytest.mark.timeout(120)
def test_a_lost_scheduler_interrupts_the_run_and_it_resumes(capsys, tmp_path, dask_scheduler):
    import threading
    import time

    from placement_core.store import RunStore
    address, scheduler = dask_scheduler
    home = tmp_path / "h"

    def kill_after_a_checkpoint():
        for _ in range(600):
            if (home / "runs.sqlite").exists():
                with RunStore(home=home) as store:
                    if store.runs() and store.load_checkpoint(1) is not None:
                        break
            time.sleep(0.05)
        scheduler.kill()
    killer = threading.Thread(target=kill_after_a_checkpoint, daemon=True)
    killer.start()
    # batches of 20,000 placements: worth shipping to the workers, so work is out when the scheduler dies
    err = refused(*cli(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "ga",
                       "--param", "population=20000", "--budget", 10**7, "--dask", address, "--home", home, "--quiet"),
                  "lost the Dask scheduler", "run 1 is interrupted", "placement optimize --resume 1")
    killer.join()
    with RunStore(home=home) as store:
        lost = store.get(1)
        assert lost.status == lost.display_status == "interrupted" and lost.evaluations > 0
    timer = _interrupt_past(home, 1, lost.evaluations)
    try:
        code, out, err = cli(capsys, "optimize", "--resume", 1, "--home", home, "--quiet")
    finally:
        timer.cancel()
    assert code == 0, err
    with RunStore(home=home) as store:
        again = store.get(1)
    assert again.status == "stopped" and again.evaluations > lost.evaluations


# -- what the fuzz campaign (benchmarks/fuzz_campaign.py) found ------------------------------------------------

@pytest.mark.parametrize("seeds", ["9" * 30, "0-99999999999999", "100001"])
def test_sweep_seeds_are_counted_before_a_list_is_made(capsys, seeds):
    """--seeds 10^30 was an OverflowError (and 10^8 a list longer than memory)."""
    refused(*cli(capsys, "sweep", "--network", "alexnet", "--devices", "malvik", "--algorithm", "ga", "--seeds",
                 seeds, "--budget", 10, "--no-store"), "--seeds", "100,000")


def test_a_stored_time_no_calendar_holds_is_shown_as_unknown(capsys, tmp_path):
    """A flipped byte made a run's created time 1e300: `runs list` exited 1 (timestamp out of range)."""
    import sqlite3
    assert cli(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "random",
               "--budget", 10, "--home", tmp_path, "--quiet")[0] == 0
    with sqlite3.connect(tmp_path / "runs.sqlite") as c:
        c.execute("UPDATE runs SET created=1e300")
    code, out, err = cli(capsys, "runs", "list", "--home", tmp_path, "--json")
    assert code == 0, err
    assert json.loads(out)[0]["created"] == "?"


def test_the_sharding_experiment_refuses_a_learned_placer_before_its_searches(capsys, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    err = refused(*cli(capsys, "experiment", "sharding", "--networks", "alexnet", "--budget", 10, "--algorithm",
                       "placeto"), "--algorithm", "placeto")
    assert os.listdir(tmp_path) == []


def test_a_long_sweep_says_how_long(capsys):
    code, out, err = cli(capsys, "sweep", "--network", "alexnet", "--devices", "malvik", "--algorithm", "ga,heft",
                         "--seeds", 2, "--budget", 10**9, "--no-store", "--seconds", 0.5)
    assert code == 0 and err == ""  # a time budget: nothing to say
    from placement_core.cli.optimize_cmds import say_how_long
    from placement_core import Problem, load_devices, load_network
    say_how_long(Problem(load_network("alexnet"), load_devices("malvik")), ["ga", "heft", "ga", "heft"], 10**9, 1,
                 True, runs=4)
    note = capsys.readouterr().err
    assert note.startswith("note: 2 runs of 1,000,000,000 evaluations at about ") and note.count("\n") == 1
