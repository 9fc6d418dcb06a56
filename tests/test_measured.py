"""Measured searches (surrogate-assisted, plain GA, top-K) recorded in the run store: every measurement is
stored as it is made, and a search killed midway resumes without measuring anything twice, ending where an
uninterrupted search ends. A deterministic stand-in plays the measurement here (the simulated time, 5 %
longer per message); the last test kills a real one (PyTorch on two CPU ranks) and counts."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter

import numpy as np
import pytest

from placement_core import Problem, load_devices, load_network
from placement_core.surrogate.search import Ledger, SearchSettings, run_search
from placement_core.surrogate.model import SurrogateSpec
from placement_core.store.measured_search import resume_measured, start_measured
from placement_core.store.recording import start_run
from placement_core.store import RunStore

pytest.importorskip("sklearn")


class Killed(BaseException):
    """What a SIGKILL looks like from inside: the search ends wherever it is."""


class FakeMeasurement:
    """The simulated time, 5 % longer per message; logs every placement it is asked for; 'dies' after
    ``die_after`` calls."""

    def __init__(self, problem, die_after=None):
        self.problem, self.die_after = problem, die_after
        self.asked: list[bytes] = []
        self.calls = 0

    def __call__(self, xs, labels):
        if self.die_after is not None and self.calls >= self.die_after:
            raise Killed()
        self.calls += 1
        out = []
        for x in xs:
            self.asked.append(np.ascontiguousarray(x, dtype=np.int32).tobytes())
            r = self.problem.simulate(x).result
            out.append(r.batch_time * (1 + 0.05 * r.transfers))
        return np.array(out)


@pytest.fixture
def stored(tmp_path):
    problem = Problem(load_network("alexnet"), load_devices("malvik"))
    with RunStore(home=tmp_path) as store:
        run_id, _ = start_run(store, problem, "ga", evaluations=300, seed=1)
        yield store, run_id, store.problem(run_id)


def settings(search):
    return SearchSettings(budget=24, search=search, seed=3, population=8, initial=6, batch=3, generations=4,
                          surrogate=SurrogateSpec(simulated=True, seed=3))


def candidates(store, run_id):
    return np.array([x for _, x in store.kept_of(run_id)], dtype=np.int32)


@pytest.mark.workers
@pytest.mark.parametrize("search", ["assisted", "ga", "top-k"])
def test_a_killed_search_resumes_without_measuring_twice(stored, search):
    store, from_run, problem = stored
    init = candidates(store, from_run)
    # uninterrupted, in memory: the reference
    whole = FakeMeasurement(problem)
    reference = run_search(problem, Ledger(whole), settings(search), initial=init)
    assert reference.evaluations == 24 and len(whole.asked) == 24 == len(set(whole.asked))
    # killed after its third batch of measurements
    first = FakeMeasurement(problem, die_after=3)
    with pytest.raises(Killed):
        start_measured(store, from_run, settings(search), first, params={"devices": "test"}, initial=init)
    run_id = store.runs()[0].id
    assert store.get(run_id).status == "failed"
    stored_now = store.benchmarks(run_id=run_id)
    assert len(stored_now) == len(first.asked) > 0  # each stored the moment it was measured
    # resumed: the rest, nothing twice
    second = FakeMeasurement(problem)
    result = resume_measured(store, run_id, lambda params, p: second)
    measured = Counter(first.asked + second.asked)
    assert sum(measured.values()) == 24 and max(measured.values()) == 1
    assert len(store.benchmarks(run_id=run_id)) == 24
    assert result.evaluations == 24 and store.get(run_id).status == "done"
    # and it ends exactly where the uninterrupted search ended
    assert result.best_objective == reference.best_value
    assert np.array_equal(result.best_placement, reference.best_placement)
    assert [(int(u), b) for u, b, _ in result.history.tolist()] == reference.history
    # the stored measurements carry the simulated time too, and the run keeps its best distinct ones
    assert all(b["simulated_s"] is not None for b in store.benchmarks(run_id=run_id))
    assert store.kept_rows(run_id)[0]["objective"] == reference.best_value


def test_top_k_measures_the_candidates_in_simulated_order(stored):
    store, from_run, problem = stored
    init = candidates(store, from_run)
    fake = FakeMeasurement(problem)
    r = run_search(problem, Ledger(fake), SearchSettings(budget=5, search="top-k"), initial=init)
    assert fake.asked == [x.tobytes() for x in init[:5]]
    want = min(fake(init[i:i + 1], ["x"])[0] for i in range(5))
    assert r.best_value == want


@pytest.mark.workers
def test_killing_a_real_measured_search_and_resuming_it(tmp_path):
    """`placement optimize --objective measured` on two CPU ranks, SIGKILLed after its first measurements,
    then `--resume`d: exactly the budget is measured, each placement once."""
    pytest.importorskip("torch")
    home = tmp_path / "home"
    env = {**os.environ, "PLACEMENT_HOME": str(home)}
    model = "tests/torch_models.py:SmallCNN"

    def cli(*argv, **kw):
        return subprocess.run([sys.executable, "-m", "placement_core", *argv], env=env, capture_output=True,
                              text=True, **kw)

    net = tmp_path / "small.json"
    assert cli("import-model", model, "--input-shape", "1,3,8,8", "--batch-size", "4", "--out", str(net)).returncode == 0
    assert cli("optimize", "--network", str(net), "--devices", "malvik", "--algorithm", "ga", "--budget", "200",
               "--quiet").returncode == 0
    argv = ["optimize", "--objective", "measured", "--from-run", "1", "--model", model, "--devices", "cpu:2",
            "--map", "cpu0=cpu0,gpu0=cpu1,gpu1=cpu1", "--search", "top-k", "--budget-measurements", "3",
            "--steps", "1", "--warmup", "1", "--rounds", "1", "--batch", "1", "--json"]
    proc = subprocess.Popen([sys.executable, "-m", "placement_core", *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    db, deadline, n = home / "runs.sqlite", time.time() + 300, 0
    while time.time() < deadline and proc.poll() is None:
        try:
            with sqlite3.connect(db) as c:
                n = c.execute("SELECT COUNT(*) FROM benchmarks WHERE run_id=2").fetchone()[0]
        except sqlite3.OperationalError:
            n = 0
        if n >= 1:
            break
        time.sleep(0.1)
    assert proc.poll() is None, f"it finished before it could be killed: {proc.stderr.read().decode()}"
    os.killpg(proc.pid, signal.SIGKILL)  # the search and its benchmark workers
    proc.wait()
    with RunStore(home=home) as store:
        before = [b["placement"] for b in store.benchmarks(run_id=2)]
        assert 1 <= len(before) < 3 and store.get(2).display_status == "interrupted"
    done = cli("optimize", "--resume", "2", "--json", timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["measurements"] == 3 and report["measurements_made"] == 3 - len(before)
    with RunStore(home=home) as store:
        after = [json.dumps(b["placement"], sort_keys=True) for b in store.benchmarks(run_id=2)]
    assert len(after) == 3 == len(set(after))


@pytest.mark.parametrize("argv, message", [
    (["--model", "m.py:M", "--devices", "cpu:2", "--budget-measurements", "5"], "needs --from-run"),
    (["--from-run", "1", "--devices", "cpu:2", "--budget-measurements", "5"], "needs --model"),
    (["--from-run", "1", "--model", "m.py:M", "--devices", "cpu:2"], "needs --budget-measurements"),
])
def test_a_measured_search_says_what_it_needs(capsys, tmp_path, monkeypatch, argv, message):
    pytest.importorskip("torch")
    from placement_core.cli import main

    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path))
    assert main(["optimize", "--objective", "measured", *argv]) == 2
    assert message in capsys.readouterr().err


def test_the_optimize_resume_of_a_measured_run_needs_pytorch_in_the_dashboard(stored):
    """resume_run (the dashboard's) refuses a measured search and says how to resume it."""
    from placement_core.base.errors import InputError
    from placement_core.store.recording import resume_run

    store, from_run, problem = stored
    with pytest.raises(Killed):
        start_measured(store, from_run, settings("top-k"), FakeMeasurement(problem, die_after=1),
                       params={"devices": "test"}, initial=candidates(store, from_run))
    run_id = store.runs()[0].id
    with pytest.raises(InputError, match=f"placement optimize --resume {run_id}"):
        resume_run(store, run_id)


def test_half_of_each_round_refines_the_best_true_placements():
    """The trust region of the assisted search: neighbours of the best true placements (a few ops or one run
    of ops changed), rated by the surrogate, none already evaluated or already in the GA's pool."""
    from placement_core.surrogate.search import _local_pool, _State

    problem = Problem(load_network("alexnet"), load_devices("malvik"))
    n, rng = problem.n_ops, np.random.default_rng(0)
    known = rng.integers(0, problem.n_devices, (6, n), dtype=np.int32)
    state = _State(Ledger(lambda xs, labels: np.arange(len(xs), dtype=float)), 10, None, None)
    state.evaluate(known, ["x"] * 6)  # values 0..5: known[0] is the best

    class Hamming:  # a surrogate that prefers placements close to known[0]
        def predict(self, xs):
            return (np.asarray(xs) != known[0]).sum(axis=1).astype(float)

    exclude = {known[0].copy().tobytes(): (0.0, known[0])}
    pool = _local_pool(problem, state, Hamming(), np.random.default_rng(1), exclude=exclude, parents=3,
                       per_parent=50)
    xs = np.array([x for _, x in pool.values()])
    assert 0 < len(pool) <= 150 and not ({k for k in pool} & (state.seen | set(exclude)))
    parents = known[:3]  # each candidate differs from one of the three best in a few ops or one run of ops
    diffs = [np.flatnonzero(x != parents[np.argmin((x != parents).sum(axis=1))]) for x in xs]
    assert all(len(d) <= 4 or d[-1] - d[0] < max(2, n // 10) for d in diffs)
    assert min(f for f, _ in pool.values()) <= 4  # the surrogate's favourites are near the best one
