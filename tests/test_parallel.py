"""Parallel evaluation: what travels, how tasks are sized, asynchronous variants that give the same run on
every backend, resuming with pending batches (also runs stored when ``pending`` was called ``in_flight``), and
runs that survive a killed worker."""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import numpy as np
import pytest

from placement_core import Problem, load_devices, load_network
from placement_core.optimize import make_optimizer, run
from placement_core.optimize import operators as ops
from placement_core.optimize.driver import drive
from placement_core.parallel import (DaskEvaluator, Pacing, ProcessPoolEvaluator, SerialEvaluator, WorkerError,
                                     WorkerPool, make_evaluator)
from placement_core.parallel import wire

ASYNC = ("ga-steady", "map-elites-async")


@pytest.fixture(scope="module")
def resnet():
    return Problem(load_network("resnet50"), load_devices("malvik-4gpu"))


@pytest.fixture(scope="module")
def cluster():
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c, \
            Client(c) as client:
        yield c, client


# -- what travels -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("devices, dtype, width", [(4, np.uint8, 1), (256, np.uint8, 1), (257, np.uint16, 2),
                                                   (70000, np.int32, 4)])
def test_placements_travel_in_the_smallest_type_and_come_back_equal(devices, dtype, width):
    rng = np.random.default_rng(devices)
    xs = rng.integers(0, devices, (7, 13), dtype=np.int32)
    packed = wire.compact(xs, devices)
    assert packed.dtype == dtype
    frame = wire.task_frame(42, packed)
    assert len(frame) == wire.TASK.size + 7 * 13 * width
    task_id, back = wire.read_task(frame)
    assert task_id == 42 and back.dtype == np.int32 and np.array_equal(back, xs)
    f = rng.random(7)
    assert wire.read_reply(wire.reply_frame(42, f))[1].tolist() == f.tolist()
    assert wire.read_reply(wire.error_frame(3, "boom")) == (3, None, "boom")


# -- how tasks are sized ----------------------------------------------------------------------------------

def test_task_size_is_twenty_times_the_overhead_or_the_floor():
    assert Pacing(2, eval_s=1e-4, task_overhead_s=1e-3).task_size() == 200  # 20 ms of work at 0.1 ms each
    assert Pacing(2, eval_s=1e-4, task_overhead_s=1e-3, floor_s=0.05).task_size() == 500  # Dask's 50 ms floor
    assert Pacing(2, eval_s=0.01, task_overhead_s=1e-5).task_size() == 1  # a slow evaluation is a task alone
    # the driver's cost per batch counts with the round trip: a 10,000-op graph (4 ms an evaluation, 1.1 ms a
    # batch in the driver) gets 20 x 1.175 ms = 23.5 ms of work, 6 placements, not one
    assert Pacing(2, eval_s=4e-3, task_overhead_s=7.5e-5, batch_cost_s=1.1e-3).task_size() == 6
    # the pool's 5 ms floor wins over 20 x (90 + 19) us for ResNet-50: 5 ms / 46 us = 108.7 -> 109
    assert Pacing(2, eval_s=4.6e-5, task_overhead_s=9e-5, floor_s=0.005, batch_cost_s=1.9e-5).task_size() == 109


def test_the_pool_sizes_tasks_from_its_floor_and_the_genome():
    from placement_core.parallel import ProcessPoolEvaluator
    from placement_core.parallel.pacing import DRIVER_S_PER_BATCH, DRIVER_S_PER_OP
    from placement_core.parallel.pool import POOL_FLOOR_S
    problem = Problem(load_network("resnet50"), load_devices("malvik-4gpu"))
    with ProcessPoolEvaluator(problem, 2) as ev:
        assert ev.pacing.floor_s == POOL_FLOOR_S
        assert ev.pacing.batch_cost_s == DRIVER_S_PER_BATCH + DRIVER_S_PER_OP * 176
        assert ev.pacing.task_s >= POOL_FLOOR_S


def test_the_probe_times_at_least_five_evaluations_of_a_slow_problem():
    """A 4 ms evaluation against the probe's 5 ms budget: five samples, not two or three (with three, two
    slowed by a worker still starting halved the tasks on a 10,000-op graph)."""
    import time as _time

    from placement_core.parallel.pacing import probe_eval_seconds

    class Slow:
        n_devices, n_ops, calls = 4, 10, 0

        def evaluate_many(self, x):
            Slow.calls += 1
            _time.sleep(0.004)
            return np.zeros(len(x))

    assert probe_eval_seconds(Slow()) >= 0.004 and Slow.calls == 5
    Slow.calls = 0
    assert probe_eval_seconds(Slow(), group=16) >= 0.004 and Slow.calls == 5  # a slow one stays one at a time


def test_the_probe_times_a_fast_problem_in_groups_as_a_task_runs_it():
    """10 us a call plus 1 us a placement: singles say 11 us a placement, groups of 16 say 26 / 16 = 1.6 us."""
    import time as _time

    from placement_core.parallel.pacing import probe_eval_seconds

    class Fast:
        n_devices, n_ops, sizes = 4, 10, []

        def evaluate_many(self, x):
            Fast.sizes.append(len(x))
            end = _time.perf_counter() + 1e-5 + 1e-6 * len(x)
            while _time.perf_counter() < end:
                pass
            return np.zeros(len(x))

    assert probe_eval_seconds(Fast()) >= 1.1e-5 and set(Fast.sizes) == {1}
    Fast.sizes = []
    grouped = probe_eval_seconds(Fast(), group=16)
    assert 1.6e-6 <= grouped < 4e-6, grouped
    assert Fast.sizes[0] == 1 and set(Fast.sizes[1:]) == {16} and len(Fast.sizes) >= 6


def test_the_pool_waits_for_every_worker_before_timing():
    """ping_every sends an empty task to each worker and returns once each has answered."""
    from placement_core.parallel import ProcessPoolEvaluator
    problem = Problem(load_network("alexnet"), load_devices("malvik-4gpu"))
    with ProcessPoolEvaluator(problem, 2) as ev:
        sent = []
        for w in ev.pool._workers:
            w.outbox.put = (lambda put, w: lambda frame: (sent.append(id(w)), put(frame))[1])(w.outbox.put, w)
        ev.pool.ping_every()
        assert sorted(sent) == sorted(id(w) for w in ev.pool._workers) and len(sent) == 2
        assert all(not w.outstanding for w in ev.pool._workers)


def test_a_waited_for_batch_is_split_only_when_splitting_is_faster():
    p = Pacing(2, eval_s=1e-3, task_overhead_s=1e-4)
    assert p.parts(1) == 0  # one placement: nothing to split
    assert p.parts(2) == 2  # 1 ms each against 0.1 ms of overhead
    assert p.parts(100) == 2  # never more parts than workers
    slow = Pacing(2, eval_s=4e-5, task_overhead_s=0.01)  # Dask's round trip against ResNet-50's 40 us
    assert slow.parts(45) == 0  # a GA generation (1.8 ms) stays in the driver
    assert slow.parts(1000) == 2  # 40 ms of work: two halves of 20 ms beat 40 ms locally
    assert Pacing(1, eval_s=1.0, task_overhead_s=0.0).parts(100) == 0  # serial never ships


# -- the batch operators ----------------------------------------------------------------------------------

def test_batch_crossover_takes_the_second_parent_between_odd_and_even_cuts():
    rng = np.random.default_rng(0)
    for kind, points in (("single-point", 1), ("2-point", 2), ("3-point", 3)):
        mask = ops.batch_crossover_mask(rng, 500, 12, kind)
        switches = (mask[:, 1:] != mask[:, :-1]).sum(axis=1)
        assert (switches == points).all()  # distinct cuts, each one switch of parent
        assert not mask[:, 0].any()  # a child starts with its first parent
        first_cut = np.argmax(mask, axis=1)
        assert set(first_cut.tolist()) == set(range(1, 12 - points + 1))  # every position a first cut can take
    uniform = ops.batch_crossover_mask(rng, 400, 50, "uniform")
    assert 0.45 < uniform.mean() < 0.55


def test_batch_mutations_do_what_their_scalar_versions_do():
    rng = np.random.default_rng(1)
    xs = np.zeros((300, 40), dtype=np.int32)
    zoned = ops.batch_zone_mutation(rng, xs, 4)
    for row in zoned:
        changed = np.flatnonzero(row != 0)
        if len(changed):  # one contiguous run on one device
            assert (np.diff(changed) == 1).all() and len(set(row[changed].tolist())) == 1
    rates = np.linspace(0, 1, 300)
    pointed = ops.batch_point_mutation(rng, np.zeros((300, 2000), dtype=np.int32), rates, 2)
    # a changed gene needs the mutation (rate r) and a draw of device 1 (1/2)
    assert np.allclose(pointed.mean(axis=1), rates / 2, atol=0.05)
    two = np.tile(np.array([0, 0, 1, 1, 2], dtype=np.int32), (2000, 1))
    moved = ops.batch_replace_mutation(rng, two, 4)
    source = np.array([[int(r[0] != 0), int(r[2] != 1), int(r[4] != 2)] for r in moved])
    assert (source.sum(axis=1) <= 1).all()  # at most one device's genes move, and all of them together
    counts = np.bincount(np.argmax(np.c_[source, np.zeros(len(source))], axis=1)[source.any(axis=1)], minlength=3)
    assert counts.min() > 0.25 * counts.sum()  # each used device is picked about equally (b = a leaves no trace)
    shifted = ops.batch_copy_point_mutation(rng, np.tile(np.arange(10, dtype=np.int32), (1, 1)), 1.0, 0.0, 10)
    assert shifted.tolist() == [[0, 0, 1, 2, 3, 4, 5, 6, 7, 8]]  # every gene copies its predecessor as it was


# -- the same run on every backend --------------------------------------------------------------------------

@pytest.mark.dask
@pytest.mark.parametrize("algorithm", ASYNC)
def test_asynchronous_variants_give_the_same_run_on_every_backend(resnet, cluster, algorithm):
    params = {"batch": 40, "pending": 3}
    ref = run(resnet, algorithm, evaluations=700, seed=3, params=params)
    assert ref.evaluations == 700
    _, client = cluster
    for vary_on_workers in (True, False):
        for make in (lambda: ProcessPoolEvaluator(resnet, workers=2),
                     *(lambda t=t: DaskEvaluator(resnet, client, transport=t) for t in ("direct", "actors", "tasks"))):
            with make() as ev:
                r = run(resnet, algorithm, evaluations=700, seed=3, evaluator=ev,
                        params={**params, "vary_on_workers": vary_on_workers})
                assert ev.tasks_sent >= 700 // 40  # every batch was a task
                # with vary_on_workers every batch after the first population was made by a worker
                assert ev.recipes_sent == (ev.tasks_sent if vary_on_workers else 0)
            where = (ev.name, getattr(ev, "via", ""), vary_on_workers)
            assert np.array_equal(r.history, ref.history), where
            assert np.array_equal(r.best_placement, ref.best_placement), where


@pytest.mark.dask
def test_each_dask_transport_is_what_it_says_and_auto_falls_back(resnet, cluster, monkeypatch):
    from placement_core.base.errors import InputError
    _, client = cluster
    for transport in ("direct", "actors", "tasks"):
        with DaskEvaluator(resnet, client, transport=transport) as ev:
            assert ev.via == transport
            assert (ev.session.direct is not None, ev.session.actors is not None) == \
                (transport == "direct", transport == "actors")
    import placement_core.parallel.direct as direct

    monkeypatch.setattr(direct.DirectPool, "_spawn", lambda self: None)  # as if no worker could connect back
    monkeypatch.setattr(direct, "CONNECT_S", 0.5)
    with DaskEvaluator(resnet, client) as ev:  # workers that cannot reach this process: actors, same numbers
        assert ev.via == "actors"
        x = np.zeros((3, resnet.n_ops), dtype=np.int32)
        assert ev.evaluate(x).tolist() == resnet.evaluate_many(x).tolist()
    with pytest.raises(InputError, match="could not connect back to this process") as e:
        DaskEvaluator(resnet, client, transport="direct")  # asked for by name: no silent fallback
    assert "actors" in e.value.fix
    with pytest.raises(InputError, match="transport"):
        DaskEvaluator(resnet, client, transport="pigeons")


def test_the_driver_listens_where_it_reaches_the_scheduler_and_only_over_plain_tcp():
    pytest.importorskip("distributed")
    import socket

    from placement_core.parallel.direct import facing_host
    assert facing_host("tcp://127.0.0.1:8786") == "127.0.0.1"
    assert facing_host("tls://127.0.0.1:8786") is None  # TLS: Dask's own encrypted connections (actors)
    if socket.has_ipv6:
        try:
            socket.create_server(("::1", 0), family=socket.AF_INET6).close()
        except OSError:
            return
        assert facing_host("tcp://[::1]:8786") == "::1"


@pytest.mark.dask
@pytest.mark.timeout(60)
def test_a_connection_without_the_key_is_refused_and_the_run_goes_on(resnet, cluster, monkeypatch):
    import socket
    from multiprocessing import AuthenticationError
    from multiprocessing.connection import Client

    import placement_core.parallel.direct as direct
    monkeypatch.setattr(direct, "HANDSHAKE_S", 0.5)
    _, client = cluster
    with DaskEvaluator(resnet, client, transport="direct") as ev:
        address = ev.session.direct.address
        assert address[0] == "127.0.0.1"  # the interface facing the scheduler, not every interface
        with socket.create_connection(address):  # connects and says nothing: dropped after the handshake's time
            t = time.perf_counter()
            with pytest.raises(AuthenticationError):
                Client(address, authkey=b"not the session's key")
            assert time.perf_counter() - t < 5  # the silent one did not hold the door
        x = np.random.default_rng(0).integers(0, resnet.n_devices, (50, resnet.n_ops), dtype=np.int32)
        assert ev.evaluate(x).tolist() == resnet.evaluate_many(x).tolist()
        assert ev.session.direct.size == 2  # the stranger never became a worker


def test_a_recipe_survives_json_and_makes_the_same_children(resnet):
    from placement_core.optimize import variation
    opt = make_optimizer(resnet, "ga-steady", seed=1, params={"batch": 8, "pending": 2})
    first = opt.next_recipe(100)
    opt.take_results(*variation.apply_and_evaluate(resnet, first))
    recipe = opt.next_recipe(100)
    back = variation.Recipe.from_dict(json.loads(json.dumps(recipe.to_dict())), resnet.n_ops)
    kids, rates = variation.apply(recipe)
    kids2, rates2 = variation.apply(back)
    assert kids.shape == (8, resnet.n_ops) and np.array_equal(kids, kids2) and np.array_equal(rates, rates2)
    assert not np.array_equal(kids, recipe.a)  # variation did something


@pytest.mark.slow
def test_auto_sizes_are_resolved_from_the_backend_and_recorded(resnet):
    r = run(resnet, "ga-steady", evaluations=2000, seed=0)
    assert r.params["pending"] == 1 and r.params["batch"] == 50  # serial: fresh parents, one at a time
    with ProcessPoolEvaluator(resnet, workers=2) as ev:
        r = run(resnet, "map-elites-async", evaluations=2000, seed=0, evaluator=ev)
        assert r.params["pending"] == 4
        assert r.params["batch"] == min(ev.pacing.task_size(), 50)  # at most max(50, 2000 // 1000) for quality
    again = run(resnet, "map-elites-async", evaluations=2000, seed=0, params=r.params)  # recorded -> reproduced
    assert np.array_equal(again.history, r.history)


class Spy(SerialEvaluator):
    """Records the order of submissions and results, evaluating only when a result is asked for."""

    def __init__(self, problem):
        super().__init__(problem)
        self.events = []

    def submit(self, placements):
        k = len([e for e in self.events if e[0] == "submit"])
        self.events.append(("submit", k))
        spy = self

        class Later:
            def result(self):
                spy.events.append(("result", k))
                return spy.problem.evaluate_many(placements)
        return Later()


def test_batch_k_is_generated_after_batch_k_minus_pending_is_told(resnet):
    spy = Spy(resnet)
    run(resnet, "ga-steady", evaluations=50 + 6 * 10, seed=0, params={"batch": 10, "pending": 3}, evaluator=spy)
    # the first population alone (nothing to breed from), then three batches ahead, then one per result
    assert spy.events[:3] == [("submit", 0), ("result", 0), ("submit", 1)]
    order = [e for e in spy.events if e[0] == "submit"]
    for k in range(1, len(order)):
        told_before = {i for kind, i in spy.events[:spy.events.index(("submit", k))] if kind == "result"}
        assert max(told_before) == max(0, k - 3)  # batch k was asked knowing exactly batches < k - 2
    results = [i for kind, i in spy.events if kind == "result"]
    assert results == sorted(results)  # told in the order asked


@pytest.mark.parametrize("algorithm", ASYNC)
def test_resume_with_pending_batches_reaches_the_uninterrupted_result(resnet, algorithm):
    params = {"batch": 30, "pending": 4}
    full = run(resnet, algorithm, evaluations=600, seed=9, params=params)
    states = []
    drive(make_optimizer(resnet, algorithm, seed=9, params=params), evaluations=600,
          checkpoint=states.append, checkpoint_every=1)
    mid = states[len(states) // 2]
    assert len(mid["pending"]) == 3  # asked for, not told: saved to be evaluated again on resume
    resumed = drive(make_optimizer(resnet, algorithm, seed=9, params=params), evaluations=600, state=mid)
    assert np.array_equal(resumed.history, full.history)
    assert np.array_equal(resumed.best_placement, full.best_placement)


def _stopped_run(home, problem, algorithm, params):
    """A run stopped after 300 of 600 evaluations, with checkpoints; its id and the store's file."""
    from placement_core.store.recording import start_run
    from placement_core.store.run_store import RunStore
    stop = threading.Event()

    def progress(pr):
        if pr.evaluations >= 300:
            stop.set()

    with RunStore(home=home) as store:
        run_id, partial = start_run(store, problem, algorithm, evaluations=600, seed=4, params=params,
                                    progress=progress, stop=stop, checkpoint_every=30)
        assert partial.stopped
        return run_id, store.path


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ASYNC)
def test_a_run_stored_with_in_flight_resumes_under_pending(resnet, algorithm, tmp_path):
    """Runs stored before ``in_flight`` was renamed ``pending``: their parameters and their checkpoint's optimizer
    state say ``in_flight``; they load as ``pending`` and resume to the result of the same run stored today."""
    import sqlite3
    import zlib

    from placement_core.store.recording import resume_run
    from placement_core.store.run_store import RunStore

    params = {"batch": 30, "pending": 3}
    results = {}
    for age in ("today", "old"):
        run_id, path = _stopped_run(tmp_path / age, resnet, algorithm, params)
        if age == "old":  # what an earlier version stored
            with sqlite3.connect(path) as db:
                stored = json.loads(db.execute("SELECT params FROM runs WHERE id=?", (run_id,)).fetchone()[0])
                stored["in_flight"] = stored.pop("pending")
                db.execute("UPDATE runs SET params=? WHERE id=?", (json.dumps(stored), run_id))
                blob = db.execute("SELECT state FROM checkpoints WHERE run_id=?", (run_id,)).fetchone()[0]
                state = json.loads(zlib.decompress(blob))
                state["optimizer"]["in_flight"] = state["optimizer"].pop("pending")
                db.execute("UPDATE checkpoints SET state=? WHERE run_id=?",
                           (zlib.compress(json.dumps(state).encode()), run_id))
        with RunStore(home=tmp_path / age) as store:
            rec = store.get(run_id)
            assert rec.params["pending"] == 3 and "in_flight" not in rec.params
            assert ("in_flight" in store.load_checkpoint(run_id)["optimizer"]) == (age == "old")
            results[age] = resume_run(store, run_id)
            assert results[age].params["pending"] == 3 and "in_flight" not in results[age].params
    assert results["old"].evaluations == 600
    assert np.array_equal(results["old"].history, results["today"].history)
    assert np.array_equal(results["old"].best_placement, results["today"].best_placement)


def test_the_old_name_in_flight_is_refused_with_the_new_one(resnet):
    from placement_core.base.errors import InputError
    with pytest.raises(InputError, match="parameter in_flight is now called pending") as e:
        make_optimizer(resnet, "ga-steady", params={"in_flight": 4})
    assert e.value.fix == "Use pending=4"


def test_a_stop_tells_what_is_pending_and_counts_it_once(resnet):
    stop = threading.Event()
    seen = []

    def progress(pr):
        seen.append(pr.evaluations)
        if pr.evaluations >= 200:
            stop.set()

    r = run(resnet, "map-elites-async", evaluations=10_000, seed=0, params={"batch": 25, "pending": 4},
            progress=progress, stop=stop)
    assert r.stopped and r.evaluations == seen[-1] == r.history[-1, 0]
    at_stop = next(e for e in seen if e >= 200)
    assert r.evaluations == at_stop + 3 * 25  # the three batches pending at the stop, and nothing more


# -- surviving a dead worker ------------------------------------------------------------------------------

def _kill_one_after(first_evaluations: int, pids):
    done = []

    def progress(pr):
        if not done and pr.evaluations >= first_evaluations:
            os.kill(pids()[0], signal.SIGKILL)
            done.append(pr.evaluations)
    return progress, done


@pytest.mark.slow
@pytest.mark.parametrize("algorithm, params", [("ga", None), ("map-elites-async", {"batch": 40, "pending": 4})])
def test_a_killed_pool_worker_loses_no_evaluation(resnet, algorithm, params):
    ref = run(resnet, algorithm, evaluations=1500, seed=2, params=params)
    with ProcessPoolEvaluator(resnet, workers=2, min_batch=2) as ev:
        progress, killed = _kill_one_after(300, lambda: ev.pool.pids)
        r = run(resnet, algorithm, evaluations=1500, seed=2, params=params, evaluator=ev, progress=progress)
        assert killed and ev.pool.restarts >= 1 and ev.pool.size == 2  # a replacement took its place
    assert r.evaluations == 1500 and r.history[-1, 0] == 1500
    assert np.array_equal(r.history, ref.history)  # its unanswered tasks ran again elsewhere, once


@pytest.mark.dask
@pytest.mark.parametrize("transport", ["direct", "actors", "tasks"])
def test_a_killed_dask_worker_loses_no_evaluation(resnet, cluster, transport):
    _, client = cluster
    client.wait_for_workers(2, timeout=60)
    params = {"batch": 40, "pending": 4}
    ref = run(resnet, "map-elites-async", evaluations=1500, seed=5, params=params)
    pids = lambda: sorted(client.run(os.getpid).values())  # noqa: E731
    before = set(pids())
    with DaskEvaluator(resnet, client, transport=transport) as ev:
        assert ev.via == transport
        progress, killed = _kill_one_after(300, pids)
        r = run(resnet, "map-elites-async", evaluations=1500, seed=5, params=params, evaluator=ev, progress=progress)
        if transport == "direct":  # the killed worker's connection was lost, its batches sent again
            assert ev.session.direct.restarts >= 1
        elif transport == "actors":  # its actor's calls went to another, and an actor was made anew
            assert ev.session.actors.replaced >= 1
    assert killed
    assert r.evaluations == 1500 and np.array_equal(r.history, ref.history)
    client.wait_for_workers(2, timeout=60)  # the nanny brings the worker back for the next test
    assert len(set(pids()) - before) == 1  # a new process took the killed one's place


@pytest.mark.dask
def test_one_client_serves_a_hundred_consecutive_runs(resnet, cluster):
    _, client = cluster
    small = Problem(load_network("alexnet"), load_devices("malvik-4gpu"))
    ref = run(small, "map-elites-async", evaluations=90, seed=0, params={"batch": 30, "pending": 2})
    for i in range(100):
        r = run(small, "map-elites-async", evaluations=90, seed=0, params={"batch": 30, "pending": 2}, dask=client)
        assert np.array_equal(r.history, ref.history), i
    assert client.status == "running"  # the caller's client stays open
    deadline = time.time() + 10  # each run's port closed, its threads ended, its workers' loops returned
    while time.time() < deadline and any(t.name.startswith(("placement-accept", "placement-evaluator-send"))
                                          for t in threading.enumerate()):
        time.sleep(0.1)
    assert not [t.name for t in threading.enumerate() if t.name.startswith(("placement-accept",
                                                                            "placement-evaluator-send"))]
    assert sum(client.run(lambda dask_worker: len(dask_worker.state.executing)).values()) == 0
    assert not any(name.startswith("placement-problem-") for name in
                   client.run(lambda dask_worker: list(dask_worker.plugins)).popitem()[1])  # each run cleaned up


def test_a_worker_error_names_what_failed(resnet):
    pool = WorkerPool(resnet, 1)
    try:
        task = pool.submit(np.full((1, resnet.n_ops), 7, dtype=np.int32))  # no device 7: past the driver's check
        with pytest.raises(WorkerError, match="out of range"):
            pool.result(task)
    finally:
        pool.close()


def _die(payload, tasks, replies):  # a worker that dies on its first task
    tasks.recv_bytes()
    os._exit(3)


def test_a_task_that_kills_every_worker_stops_the_run(resnet, monkeypatch):
    import placement_core.parallel.pool as pool_module
    monkeypatch.setattr(pool_module, "_serve", _die)
    pool = WorkerPool(resnet, 2, start_method="fork")
    try:
        task = pool.submit(np.zeros((2, resnet.n_ops), dtype=np.int32))
        with pytest.raises(WorkerError, match="ended 2 evaluation workers"):
            pool.result(task)
    finally:
        pool.close()


def test_backends_check_placements_before_shipping_them(resnet):
    from placement_core.base.errors import InputError
    with make_evaluator(resnet, workers=2) as ev:
        with pytest.raises(InputError, match="out of range"):
            ev.evaluate(np.full((3, resnet.n_ops), 9, dtype=np.int32))
        with pytest.raises(InputError, match="shape"):
            ev.submit(np.zeros((3, 5), dtype=np.int32))


# -- the worker's heap ------------------------------------------------------------------------------------

_MMAPPED_BY_1MB = """
import ctypes, sys
class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MallInfo2
from placement_core.parallel.heap import restore_malloc_thresholds
restored = restore_malloc_thresholds() if sys.argv[1] == "restore" else False
before = libc.mallinfo2().hblks
buf = ctypes.create_string_buffer(1 << 20)
print(restored, libc.mallinfo2().hblks - before)
"""


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/lib/x86_64-linux-gnu/libc.so.6") and not os.path.exists("/lib64/libc.so.6"),
                    reason="glibc's malloc switches")
@pytest.mark.parametrize("mode, expected", [("leave", "False 1"), ("restore", "True 0")])
def test_a_nanny_trim_setting_no_longer_sends_every_large_array_to_mmap(mode, expected):
    """With MALLOC_TRIM_THRESHOLD_ set (as a Dask nanny sets it), glibc mmaps every allocation over 128 kB;
    after restore_malloc_thresholds a 1 MB allocation comes from the heap, as in a plain process."""
    import subprocess
    import sys
    env = {**os.environ, "MALLOC_TRIM_THRESHOLD_": "65536"}
    out = subprocess.run([sys.executable, "-c", _MMAPPED_BY_1MB, mode], env=env, capture_output=True,
                         text=True, check=True, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.stdout.split("\n")[0] == expected


def test_dask_workers_get_the_plain_heap_when_the_problem_arrives(resnet, cluster):
    _, client = cluster
    assert all(client.run(lambda: "MALLOC_TRIM_THRESHOLD_" in os.environ).values())  # the nanny's setting
    with DaskEvaluator(resnet, client) as ev:
        ev.evaluate(np.zeros((2, resnet.n_ops), dtype=np.int32))
        from placement_core.parallel import heap
        assert all(client.run(lambda: heap._done).values())
