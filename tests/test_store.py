"""The run store: recording, reopening, exporting, resuming after SIGKILL, concurrent writers."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from placement_core import Problem, load_devices, load_network
from placement_core.cli import main
from placement_core.base.errors import InputError
from placement_core.optimize import run
from placement_core.store.recording import load_archive, resume_run, start_run
from placement_core.problem import ProblemSpec
from placement_core.store import RunStore, problem_hashes


@pytest.fixture
def store(tmp_path):
    with RunStore(home=tmp_path) as s:
        yield s


@pytest.fixture(scope="module")
def problem():
    return Problem(load_network("alexnet"), load_devices("malvik-4gpu-limited-alexnet"))


def test_a_run_is_recorded_and_reopened(store, problem):
    run_id, result = start_run(store, problem, "map-elites", evaluations=1000, seed=3, label="first")
    rec = store.get(run_id)
    assert rec.status == "done" and rec.label == "first" and rec.algorithm == "map-elites" and rec.seed == 3
    assert rec.evaluations == 1000 and rec.best_objective == pytest.approx(result.best_objective)
    assert np.array_equal(rec.best_placement, result.best_placement)
    assert np.array_equal(store.history(run_id), result.history)
    elites = store.archive_rows(run_id)
    assert len(elites) == len(result.archive)
    assert elites[0]["objective"] == pytest.approx(result.best_objective)
    assert rec.extras["archive_dimensions"][2]["name"] == "cross_device_edges"
    # the stored problem is the same problem
    again = store.problem(run_id)
    assert again.evaluate(result.best_placement) == pytest.approx(result.best_objective)
    assert store.load_checkpoint(run_id) is None  # finished runs drop their checkpoint
    assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_pipeline_problems_round_trip(store):
    p = ProblemSpec(schedule="1f1b", micro_batches=8, penalty="placeto", comm_efficiency=0.5).build(load_network("resnet50"), load_devices("malvik-4gpu"))
    run_id, result = start_run(store, p, "random", evaluations=50, seed=1)
    q = store.problem(run_id)
    assert q.settings.schedule == "1f1b" and q.settings.micro_batches == 8 and q.penalty == "placeto"
    assert q.profile.comm_efficiency == 0.5
    assert q.evaluate(result.best_placement) == pytest.approx(result.best_objective)


def test_bad_input_writes_nothing(store, problem):
    for kwargs in ({"params": {"population": 1}}, {"params": {"nope": 1}}, {}):
        with pytest.raises(InputError):
            start_run(store, problem, "ga", seed=0, evaluations=None if not kwargs else 10, **kwargs)
    with pytest.raises(InputError):
        start_run(store, problem, "gradient-descent", evaluations=10)
    assert store.runs() == []


def test_checkpoints_and_resume_in_process(store, problem):
    full = run(problem, "ga", evaluations=2000, seed=11)
    stop = threading.Event()

    def progress(pr):
        if pr.evaluations >= 900:
            stop.set()

    run_id, partial = start_run(store, problem, "ga", evaluations=2000, seed=11, progress=progress, stop=stop,
                                checkpoint_every=100)
    assert partial.stopped and store.get(run_id).status == "stopped"
    assert store.load_checkpoint(run_id)["evaluations"] >= 900
    resumed = resume_run(store, run_id)
    assert np.array_equal(resumed.best_placement, full.best_placement)
    assert np.array_equal(resumed.history, full.history)
    assert store.get(run_id).status == "done"
    with pytest.raises(InputError, match="already finished"):
        resume_run(store, run_id)


def test_seed_placements_are_kept_for_a_resume_before_the_first_checkpoint(store, problem):
    seeds = np.stack([np.full(problem.n_ops, 1, dtype=np.int32), np.arange(problem.n_ops, dtype=np.int32) % 5])
    full = run(problem, "map-elites", evaluations=300, seed=4, initial=seeds)
    # a run interrupted before its first checkpoint: only its record exists
    run_id = store.create_run(problem, "map-elites", {}, 4, evaluations=300, initial=seeds)
    store.stop(run_id)
    assert np.array_equal(store.initial(run_id), seeds) and store.load_checkpoint(run_id) is None
    resumed = resume_run(store, run_id)
    assert np.array_equal(resumed.history, full.history)
    assert resumed.best_objective == full.best_objective
    # without the seeds the same seed gives another search: the stored seeds made the difference
    plain = run(problem, "map-elites", evaluations=300, seed=4)
    assert not np.array_equal(plain.history, full.history)


def test_a_stored_archive_reopens_as_the_same_archive(store, problem):
    run_id, result = start_run(store, problem, "map-elites", evaluations=800, seed=2,
                               params={"cross_edge_bins": 17})
    again = load_archive(store, run_id)
    orig = result.archive
    assert again.shape == orig.shape == (5, 5, 17)
    assert [d.name for d in again.descriptors] == [d.name for d in orig.descriptors]
    assert set(again.elites) == set(orig.elites)
    for niche, e in orig.elites.items():
        assert np.array_equal(again.elites[niche].placement, e.placement)
        assert again.elites[niche].objective == e.objective
        # re-binning the stored placement lands in the same niche
        bins, _ = again.describe(e.placement[None, :])
        assert tuple(int(b) for b in bins[0]) == niche
    ga_id, _ = start_run(store, problem, "ga", evaluations=100, seed=2)
    assert load_archive(store, ga_id) is None


def test_equal_inputs_have_equal_hashes(store, problem):
    run_id, _ = start_run(store, problem, "random", evaluations=10)
    assert store.input_hashes(run_id) == problem_hashes(problem.graph, problem.devices)
    other = problem_hashes(problem.graph.with_batch_size(64), problem.devices)
    assert other[0] != store.input_hashes(run_id)[0] and other[1] == store.input_hashes(run_id)[1]


def _store_without(column: str, path, problem):
    """A store with one run, as written before ``column`` existed."""
    with RunStore(path=path) as s:
        s.create_run(problem, "ga", {}, 0, evaluations=10)
    with sqlite3.connect(path) as c:
        c.execute(f"ALTER TABLE runs DROP COLUMN {column}")
    return path


def test_an_older_store_without_the_seed_column_is_upgraded(tmp_path, problem):
    path = _store_without("initial_hash", tmp_path / "runs.sqlite", problem)
    with RunStore(path=path) as s:
        assert s.initial(1) is None
        assert s.create_run(problem, "ga", {}, 0, evaluations=10, initial=np.zeros((1, problem.n_ops))) == 2
        assert s.initial(2).shape == (1, problem.n_ops)


def test_an_older_store_without_the_seeding_column_is_upgraded_and_a_seeding_kept(tmp_path, problem):
    path = _store_without("seeding", tmp_path / "runs.sqlite", problem)
    seeding = {"init": "heft,random:3", "placements": 4, "evaluations": 4, "best_label": "heft",
               "best_objective_s": 0.25, "with_current": True}
    with RunStore(path=path) as s:
        assert s.get(1).seeding is None
        assert s.create_run(problem, "ga", {}, 0, evaluations=10, seeding=seeding) == 2
        assert s.get(2).seeding == seeding and s.runs()[0].seeding == seeding


def _store_rows(path):
    with sqlite3.connect(path) as c:
        return c.execute("SELECT r.id, r.status, c.evaluations FROM runs r LEFT JOIN checkpoints c "
                         "ON c.run_id = r.id").fetchall()


@pytest.mark.workers
def test_sigkill_then_resume_matches_an_uninterrupted_run(tmp_path):
    home = tmp_path / "home"
    env = {**os.environ, "PLACEMENT_HOME": str(home)}
    argv = ["--network", "inception_v3", "--devices", "malvik-4gpu-limited-inception", "--algorithm", "ga",
            "--budget", "12000", "--seed", "5", "--quiet"]
    proc = subprocess.Popen([sys.executable, "-m", "placement_core", "optimize", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    db = home / "runs.sqlite"
    deadline = time.time() + 120
    rows = []
    while time.time() < deadline:
        if db.exists():
            try:
                rows = _store_rows(db)
            except sqlite3.OperationalError:
                rows = []
            if rows and rows[0][2] is not None and rows[0][2] >= 2000:
                break
        if proc.poll() is not None:
            pytest.fail(f"the run finished before it could be killed: {proc.stderr.read().decode()}")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # the store is readable and the run is visibly interrupted
    with RunStore(home=home) as store:
        rec = store.get(1)
        assert rec.status == "running" and rec.display_status == "interrupted"
        ckpt = store.load_checkpoint(1)
        assert 2000 <= ckpt["evaluations"] < 12000
        assert rec.evaluations == ckpt["evaluations"]  # nothing but the last interval is lost
    code = subprocess.run([sys.executable, "-m", "placement_core", "optimize", "--resume", "1", "--quiet",
                           "--json"], env=env, capture_output=True, text=True)
    assert code.returncode == 0, code.stderr
    resumed = json.loads(code.stdout)
    reference = run(Problem(load_network("inception_v3"), load_devices("malvik-4gpu-limited-inception")), "ga",
                    evaluations=12000, seed=5)
    assert resumed["evaluations"] == 12000
    assert resumed["best_objective_s"] == reference.best_objective
    assert resumed["history"] == [[int(e), b, c] for e, b, c in reference.history.tolist()]
    with RunStore(home=home) as store:
        assert store.get(1).status == "done"
        assert np.array_equal(store.get(1).best_placement, reference.best_placement)


def test_two_writers_at_once(tmp_path, problem):
    errors = []

    def worker(seed):
        try:
            with RunStore(home=tmp_path) as s:
                start_run(s, problem, "random", evaluations=2000, seed=seed, checkpoint_every=50)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with RunStore(home=tmp_path) as s:
        assert sorted(r.seed for r in s.runs()) == [1, 2]
        assert all(r.status == "done" for r in s.runs())


def test_corrupt_store_is_a_clear_error(tmp_path):
    (tmp_path / "runs.sqlite").write_bytes(b"this is not a database" * 100)
    with pytest.raises(InputError, match="cannot open the run store"):
        RunStore(home=tmp_path)


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_runs_and_exports(capsys, tmp_path):
    home = str(tmp_path / "h")
    code, out, err = cli(capsys, "optimize", "--network", "alexnet", "--devices", "malvik-4gpu-limited-alexnet",
                         "--algorithm", "map-elites", "--budget", "800", "--home", home, "--label", "demo")
    assert code == 0 and "stored as run 1" in out, err
    code, out, _ = cli(capsys, "runs", "list", "--home", home, "--json")
    [row] = json.loads(out)
    assert row["id"] == 1 and row["status"] == "done" and row["label"] == "demo" and row["evaluations"] == 800
    code, out, _ = cli(capsys, "runs", "show", "1", "--home", home, "--json")
    shown = json.loads(out)
    assert shown["archive_size"] > 5 and shown["history_points"] > 1

    placement = tmp_path / "p.json"
    assert cli(capsys, "runs", "export", "1", "--home", home, "--out", str(placement))[0] == 0
    doc = json.loads(placement.read_text())
    assert doc["format"] == "placement/1" and len(doc["assignment"]) == 23
    code, out, _ = cli(capsys, "simulate", "--network", "alexnet", "--devices", "malvik-4gpu-limited-alexnet",
                       "--placement", str(placement), "--json")
    assert json.loads(out)["objective_s"] == pytest.approx(row["best_objective_s"])

    devmap = tmp_path / "map.json"
    cli(capsys, "runs", "export", "1", "--home", home, "--what", "torch", "--out", str(devmap))
    mapping = json.loads(devmap.read_text())
    assert set(mapping) >= {"features.0", "classifier.6"}
    assert set(mapping.values()) <= {"cpu", "cuda:0", "cuda:1", "cuda:2", "cuda:3"}
    snippet = tmp_path / "place.py"
    cli(capsys, "runs", "export", "1", "--home", home, "--what", "snippet", "--out", str(snippet))
    ns = {}
    exec(snippet.read_text(), ns)  # valid Python defining DEVICE_MAP and place()
    # modules only: the input and torch.flatten are functions, not modules
    assert ns["DEVICE_MAP"] == {k: v for k, v in mapping.items() if k not in ("x", "flatten")}

    csv_path = tmp_path / "a.csv"
    cli(capsys, "runs", "export", "1", "--home", home, "--what", "archive", "--out", str(csv_path))
    lines = csv_path.read_text().splitlines()
    assert lines[0].startswith("most_used_device_bin,devices_used_bin,cross_device_edges_bin,most_used_device")
    assert len(lines) - 1 == shown["archive_size"]
    pq = pytest.importorskip("pyarrow.parquet")
    parquet = tmp_path / "a.parquet"
    cli(capsys, "runs", "export", "1", "--home", home, "--what", "archive", "--format", "parquet", "--out",
        str(parquet))
    table = pq.read_table(parquet)
    assert table.num_rows == shown["archive_size"] and "objective_s" in table.column_names

    trace = tmp_path / "t.json"
    cli(capsys, "runs", "export", "1", "--home", home, "--what", "trace", "--out", str(trace))
    assert any(e.get("ph") == "X" for e in json.loads(trace.read_text())["traceEvents"])
    hist = tmp_path / "h.csv"
    cli(capsys, "runs", "export", "1", "--home", home, "--what", "history", "--out", str(hist))
    assert hist.read_text().splitlines()[0] == "evaluations,best_s,current_s"

    assert cli(capsys, "runs", "delete", "1", "--home", home)[0] == 0
    code, _, err = cli(capsys, "runs", "show", "1", "--home", home)
    assert code == 2 and "there is no run 1" in err


@pytest.mark.parametrize("argv, text", [
    (["runs", "show", "7"], "there is no run 7"),
    (["runs", "show", str(2**64)], "argument run: expected a run id, an integer from 1 to 9223372036854775807"),
    (["runs", "delete", "-1"], "argument run: expected a run id"),
    (["runs", "delete", "7"], "there is no run 7"),
    (["runs", "export", "7", "--out", "x.json"], "there is no run 7"),
    (["optimize", "--resume", "7"], "there is no run 7"),
    (["optimize", "--network", "alexnet"], "the following arguments are required: --devices, --algorithm"),
    (["runs", "export", "1", "--what", "archive", "--format", "json", "--out", "x"], "archive exports as csv or"),
])
def test_cli_run_errors(capsys, tmp_path, argv, text):
    home = str(tmp_path)
    if argv[:3] == ["runs", "export", "1"]:
        cli(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "random", "--budget",
            "10", "--home", home)
    if argv[0] == "runs":
        argv = argv[:2] + ["--home", home] + argv[2:]
    else:
        argv = argv + ["--home", home]
    code, out, err = cli(capsys, *argv)
    assert code == 2 and err.startswith("error: ") and text in err and err.count("\n") == 1


# -- a run that is still running: not deleted, not resumed a second time ---------------------------------

def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _set_process(home, run_id, pid, host=None):
    import socket
    with sqlite3.connect(home / "runs.sqlite") as c:
        c.execute("UPDATE runs SET pid=?, host=? WHERE id=?", (pid, host or socket.gethostname(), run_id))


def test_a_running_run_is_neither_deleted_nor_resumed_twice(capsys, tmp_path, problem):
    import socket
    with RunStore(home=tmp_path) as store:
        run_id = store.create_run(problem, "random", {}, 0, evaluations=50)  # running in this (live) process
        assert store.get(run_id).alive
    for argv, action in ((["runs", "delete", str(run_id)], "deleted"), (["optimize", "--resume", str(run_id)],
                                                                        "resumed")):
        code, out, err = cli(capsys, *argv, "--home", str(tmp_path))
        assert code == 2 and out == "" and err.count("\n") == 1
        assert f"run {run_id} is still running (process {os.getpid()} on {socket.gethostname()})" in err
        force = "--force deletes it anyway" if action == "deleted" else "--force takes it over anyway"
        assert err.rstrip().endswith("Stop it first (Ctrl-C where it runs, or Stop on the dashboard's Optimize page) "
                                     f"or wait until it finishes; a run whose process is gone shows as interrupted "
                                     f"and can be {action} ({force}, e.g. when it runs on a host that is gone)")
    # a run on another host cannot be checked: refused as well, naming where it runs
    _set_process(tmp_path, run_id, 4242, host="elsewhere")
    code, _, err = cli(capsys, "runs", "delete", str(run_id), "--home", str(tmp_path))
    assert code == 2 and "still running (process 4242 on elsewhere)" in err
    with RunStore(home=tmp_path) as store:
        rec = store.get(run_id)
        assert (rec.status, rec.pid, rec.host) == ("running", 4242, "elsewhere")  # untouched
    # once its process is gone the run is interrupted: it may be resumed, and deleted
    _set_process(tmp_path, run_id, _dead_pid())
    code, out, err = cli(capsys, "optimize", "--resume", str(run_id), "--home", str(tmp_path), "--json")
    assert code == 0, err
    assert json.loads(out)["evaluations"] == 50
    other = None
    with RunStore(home=tmp_path) as store:
        other = store.create_run(problem, "random", {}, 0, evaluations=50)
    _set_process(tmp_path, other, _dead_pid())
    for rid in (run_id, other):
        assert cli(capsys, "runs", "delete", str(rid), "--home", str(tmp_path))[:2] == (0, f"deleted run {rid}\n")
    with RunStore(home=tmp_path) as store:
        assert store.runs() == []


def test_of_two_resumes_at_once_one_is_refused(store, problem):
    run_id = store.create_run(problem, "random", {}, 0, evaluations=20)
    store.stop(run_id)
    seen = store.get(run_id)
    store.claim(run_id, expected=seen)  # the other process got there first
    with pytest.raises(InputError, match=f"run {run_id} was just resumed by another process"):
        store.claim(run_id, expected=seen)
    with pytest.raises(InputError, match="still running"):
        resume_run(store, run_id)


def test_a_resume_that_cannot_start_its_evaluator_changes_nothing(store, problem, monkeypatch):
    import placement_core.store.recording as runs

    run_id = store.create_run(problem, "random", {}, 0, evaluations=20)
    store.stop(run_id)

    def unreachable(*a, **kw):
        raise InputError("cannot reach the Dask scheduler at 'tcp://127.0.0.1:1'", field="dask")

    monkeypatch.setattr(runs, "make_evaluator", unreachable)
    with pytest.raises(InputError, match="cannot reach"):
        resume_run(store, run_id, dask="tcp://127.0.0.1:1")
    with pytest.raises(InputError, match="cannot reach"):
        start_run(store, problem, "random", evaluations=10, dask="tcp://127.0.0.1:1")
    [rec] = store.runs()
    assert (rec.id, rec.status, rec.error) == (run_id, "stopped", None)


@pytest.mark.parametrize("target, text", [
    ("{tmp}/none/x.json", "error: {tmp}/none/x.json: --out: the folder '{tmp}/none' does not exist. Create it "
                          "first, or give a path in an existing folder"),
    ("{tmp}", "error: {tmp}: --out: is a directory. Give a file name, e.g. {tmp}/run1-placement"),
    ("", "error: --out: is empty. Give a file name such as run1-placement"),
])
def test_export_to_a_bad_path(capsys, tmp_path, target, text):
    home = str(tmp_path / "h")
    cli(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "random", "--budget", "10",
        "--home", home)
    target, text = target.format(tmp=tmp_path), text.format(tmp=tmp_path)
    code, out, err = cli(capsys, "runs", "export", "1", "--home", home, "--out", target)
    assert code == 2 and out == "" and err.startswith(text) and err.count("\n") == 1


# -- benchmarks: every stored measurement as CSV from the command line -------------------------------------

def _benchmark(store, network, label, measured, simulated=None, run_id=None, batch=8):
    return store.add_benchmark(network_name=network, devices_spec="cpu:2", runner="ranks",
                               placement={"x": "cpu0"}, simulated_s=simulated, measured_median_s=measured,
                               result={"status": "ok", "median_step_s": measured, "iqr_s": measured / 10},
                               run_id=run_id, label=label, batch_size=batch)


def test_stored_benchmarks_export_as_csv(capsys, tmp_path, problem):
    import csv
    import io
    import socket

    home = tmp_path / "h"
    with RunStore(home=home) as store:
        run_id, _ = start_run(store, problem, "random", evaluations=10)
        ids = [_benchmark(store, "alexnet", "single:cpu0", 0.25),  # from `placement benchmark`: no simulation
               _benchmark(store, "resnet50", "all on gpu0", 0.5, simulated=0.4, batch=16),
               _benchmark(store, "alexnet", f"best of run {run_id}", 0.125, simulated=0.1, run_id=run_id)]
    columns = ["benchmark", "created", "network", "batch_size", "run", "placement", "runner", "devices", "status",
               "simulated_s", "measured_median_s", "iqr_s", "host"]

    out = tmp_path / "all.csv"
    code, text, err = cli(capsys, "runs", "benchmarks", "--home", str(home), "--out", str(out))
    assert (code, text) == (0, f"wrote {out} (3 benchmarks)\n"), err
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0]) == columns
    assert [r["benchmark"] for r in rows] == [str(i) for i in ids]
    assert [(r["network"], r["placement"], r["measured_median_s"], r["simulated_s"], r["run"], r["batch_size"])
            for r in rows] == [("alexnet", "single:cpu0", "0.25", "", "", "8"),
                               ("resnet50", "all on gpu0", "0.5", "0.4", "", "16"),
                               ("alexnet", f"best of run {run_id}", "0.125", "0.1", str(run_id), "8")]
    assert {(r["status"], r["runner"], r["devices"], r["host"]) for r in rows} == {
        ("ok", "ranks", "cpu:2", socket.gethostname())}
    assert [float(r["iqr_s"]) for r in rows] == [0.025, 0.05, 0.0125]

    # one network, printed
    code, text, _ = cli(capsys, "runs", "benchmarks", "--home", str(home), "--network", "alexnet")
    assert code == 0
    assert [(r["benchmark"], r["placement"]) for r in csv.DictReader(io.StringIO(text))] == [
        (str(ids[0]), "single:cpu0"), (str(ids[2]), f"best of run {run_id}")]
    # a run's own benchmarks, the same columns
    per_run = tmp_path / "run.csv"
    assert cli(capsys, "runs", "export", str(run_id), "--what", "benchmarks", "--home", str(home), "--out",
               str(per_run))[0] == 0
    assert list(csv.DictReader(per_run.open())) == [rows[2]]

    code, text, err = cli(capsys, "runs", "benchmarks", "--home", str(home), "--network", "vgg16")
    assert code == 2 and text == "" and err == (f"error: --network: there are no benchmarks of network 'vgg16' in "
                                                f"{home / 'runs.sqlite'}. Stored benchmarks are of: alexnet, "
                                                "resnet50\n")
    code, _, err = cli(capsys, "runs", "benchmarks", "--home", str(tmp_path / "empty"))
    assert code == 2 and "there are no benchmarks in" in err and "Record some with `placement benchmark`" in err
    code, _, err = cli(capsys, "runs", "benchmarks", "--home", str(home), "--out", str(tmp_path / "no" / "b.csv"))
    assert code == 2 and f"--out: the folder '{tmp_path / 'no'}' does not exist" in err
