"""The optimizer registry (one decorator, a name taken twice fails, the order users see) and the
Evaluator contract every backend keeps (objectives in input order, equal to Problem.evaluate_many)."""

from __future__ import annotations

import numpy as np
import pytest

from placement_core import Problem, load_devices, load_network
from placement_core.optimize import ALGORITHMS, run
from placement_core.optimize.base import Optimizer, register
from placement_core.parallel import DaskEvaluator, Evaluator, ProcessPoolEvaluator, SerialEvaluator
from placement_core.model.placement import random_placement


def test_every_algorithm_is_registered_once_in_the_order_users_see():
    assert list(ALGORITHMS) == ["ga", "map-elites", "hill-climbing", "annealing", "random", "cem", "pg", "ppo", "post",
                                "single", "expert", "m-topo", "m-etf", "min-cut", "heft", "heft-nocomm", "heft-memory",
                                "ga-steady", "map-elites-async", "data-parallel", "hybrid-parallel", "heft-sharded"]
    assert all(cls.name == name for name, cls in ALGORITHMS.items())


def test_a_name_taken_twice_fails_at_registration():
    class Impostor(Optimizer):
        name = "ga"

    with pytest.raises(ValueError, match="two optimizers are named 'ga'"):
        register(Impostor)
    assert ALGORITHMS["ga"].__name__ == "GeneticAlgorithm"  # the registry is unchanged


def test_an_unnamed_optimizer_cannot_register():
    class Nameless(Optimizer):
        pass

    with pytest.raises(ValueError, match="no name"):
        register(Nameless)


def test_a_new_algorithm_registers_with_the_decorator():
    @register
    class Fixed(Optimizer):
        name = "test-fixed-zero"

        def ask(self, limit):
            return np.zeros((1, self.n), dtype=np.int32)

        def tell(self, placements, objectives):
            pass
    try:
        p = Problem(load_network("alexnet"), load_devices("malvik"))
        r = run(p, "test-fixed-zero", evaluations=3)
        assert r.best_objective == p.evaluate(np.zeros(p.n_ops, dtype=np.int32))
    finally:
        del ALGORITHMS["test-fixed-zero"]


@pytest.mark.workers
def test_every_backend_keeps_the_evaluator_contract():
    p = Problem(load_network("alexnet"), load_devices("malvik-4gpu"))
    xs = np.stack([random_placement(p.graph, p.devices, s) for s in range(20)])
    expected = p.evaluate_many(xs)
    assert len(set(expected.tolist())) > 10  # a reordering would show
    from distributed import Client, LocalCluster
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        for backend in (SerialEvaluator(p), ProcessPoolEvaluator(p, workers=2, min_batch=2),
                        DaskEvaluator(p, client, min_batch=2)):
            with backend as ev:
                assert isinstance(ev, Evaluator) and ev.workers >= 1
                got = ev.evaluate(xs)
                assert got.dtype == np.float64 and np.array_equal(got, expected), backend.name
                assert np.array_equal(ev.evaluate(xs[::-1]), expected[::-1]), backend.name
