"""Every run keeps the best distinct placements it evaluated: brute force over what the evaluator saw,
stored when the run ends, in its checkpoint while it runs, so `benchmark --run ID --top K` of a GA run
offers K placements."""

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_core import Problem, load_devices, load_network
from placement_core.analysis.benchmark_plan import top_of_run
from placement_core.optimize.best_kept import KeptBest
from placement_core.parallel import SerialEvaluator
from placement_core.store.recording import resume_run, start_run
from placement_core.store import RunStore
from helpers import examples


class Recording(SerialEvaluator):
    """The serial backend, remembering every placement and objective it returned."""

    def __init__(self, problem):
        super().__init__(problem)
        self.seen: list[tuple[float, bytes]] = []

    def evaluate(self, placements):
        fs = super().evaluate(placements)
        self.seen += [(float(f), np.ascontiguousarray(x, dtype=np.int32).tobytes()) for x, f in zip(placements, fs)]
        return fs


def brute_force_top(seen, k):
    """The k best distinct placements, ties to the first seen."""
    first: dict[bytes, tuple[float, int]] = {}
    for order, (f, key) in enumerate(seen):
        if key not in first:
            first[key] = (f, order)
    return [(f, key) for key, (f, _) in sorted(first.items(), key=lambda kv: kv[1])][:k]


@pytest.fixture(scope="module")
def problem():
    return Problem(load_network("alexnet"), load_devices("malvik-4gpu-limited-alexnet"))


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), min_size=0, max_size=40), st.integers(1, 6),
       st.integers(1, 7))
def test_kept_best_is_the_brute_force_top_k(pairs, k, batch):
    """Offered in batches, with repeats and ties: the k lowest distinct, first-offered winning ties (a
    placement's objective is a function of it, as the simulator's is)."""
    xs = np.array([[a, b] for a, b in pairs], dtype=np.int32).reshape(-1, 2)
    fs = np.array([float((7 * a + 3 * b) % 5) for a, b in pairs])
    kept = KeptBest(k)
    for i in range(0, len(xs), batch):
        kept.offer(xs[i:i + batch], fs[i:i + batch])
    want = brute_force_top([(f, x.tobytes()) for x, f in zip(xs, fs)], k)
    assert [(f, x.tobytes()) for f, x in kept.ranked()] == want
    again = KeptBest(k)
    again.load(kept.state())
    assert [(f, x.tobytes()) for f, x in again.ranked()] == want


def test_a_finished_ga_run_keeps_its_50_best_distinct_placements(tmp_path, problem):
    ev = Recording(problem)
    with RunStore(home=tmp_path) as store:
        run_id, result = start_run(store, problem, "ga", evaluations=600, seed=2, evaluator=ev)
        want = brute_force_top(ev.seen, 50)
        rows = store.kept_rows(run_id)
        assert [(r["objective"], r["placement"].tobytes()) for r in rows] == want
        assert rows[0]["objective"] == result.best_objective
        # top-K of the finished GA run now gives K distinct placements, ordered by the simulator
        prob, ranked, note = top_of_run(store, run_id, 10)
        assert note == "" and len(ranked) == 10 and len({r.placement.tobytes() for r in ranked}) == 10
        assert [r.objective for r in ranked] == pytest.approx([f for f, _ in want[:10]], rel=1e-12)
        assert ranked[0].label == f"best of run {run_id}"


def test_a_stopped_run_keeps_them_in_its_checkpoint_and_a_resume_ends_with_the_same(tmp_path, problem):
    ev = Recording(problem)
    with RunStore(home=tmp_path) as store:
        full_id, _ = start_run(store, problem, "annealing", evaluations=1500, seed=5, evaluator=ev)
        full = store.kept_rows(full_id)
        stop = threading.Event()
        run_id, partial = start_run(store, problem, "annealing", evaluations=1500, seed=5, checkpoint_every=100,
                                    stop=stop, progress=lambda pr: stop.set() if pr.evaluations >= 700 else None)
        assert partial.stopped
        midway = store.kept_of(run_id)
        assert midway and [f for f, _ in midway] == sorted(f for f, _ in midway)
        resume_run(store, run_id)
        again = store.kept_rows(run_id)
    assert [(r["objective"], r["placement"].tobytes()) for r in again] == \
        [(r["objective"], r["placement"].tobytes()) for r in full] == brute_force_top(ev.seen, 50)
