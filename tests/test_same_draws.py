"""Shortcuts the optimizers take around numpy's random calls give numpy's numbers: a batch generator seeded from
(run seed, batch) without ``default_rng``, rank selection from a cumulative sum made once instead of
``Generator.choice``, bounded integers drawn in C. Each is compared with numpy's own call, numbers and the
generator's state afterwards, so a seed keeps giving the same run."""

import threading

import numpy as np
import pytest

from placement_core.optimize import operators as ops
from placement_core.optimize import reseed
from placement_core.optimize.asynchronous import SteadyStateGA

needs_helper = pytest.mark.skipif(ops._batch is None, reason="the batch helper is not built")


@pytest.mark.parametrize("entropy", [(0, 1), (0, 5), (7, 123456), (2**32 - 1, 0), (0,), (), (1, 2, 3, 4, 5, 6),
                                     (3, 2**40), (12345678901234567890, 3)])
def test_a_batch_generator_is_in_default_rngs_state(entropy):
    rng = reseed.seeded(entropy)
    want = np.random.default_rng(list(entropy))
    assert rng.bit_generator.state == want.bit_generator.state
    assert rng.random(5).tolist() == want.random(5).tolist()


def test_the_generator_is_reset_for_every_batch_and_not_shared_between_threads():
    first = reseed.seeded((4, 1))
    first.random(100)  # used, then asked for again: back at the seed's state
    again = reseed.seeded((4, 1))
    assert again.random(3).tolist() == np.random.default_rng([4, 1]).random(3).tolist()
    other = []
    t = threading.Thread(target=lambda: other.append(reseed.seeded((4, 1))))
    t.start()
    t.join()
    assert other[0] is not again or ops._batch is None


def test_a_negative_seed_is_refused_as_numpy_refuses_it():
    with pytest.raises(ValueError):
        reseed.seeded((-1, 2))


@pytest.mark.parametrize("probs", [ops.linear_rank_probabilities(50, 2.0), ops.linear_rank_probabilities(7, 1.3),
                                   ops.exponential_rank_probabilities(50), np.array([1.0]),
                                   np.array([0.5, 0.0, 0.25, 0.25])])
def test_ranked_choice_is_generator_choice(probs):
    a, b = np.random.default_rng(9), np.random.default_rng(9)
    cdf = ops.choice_cdf(probs)
    for k in (1, 50, 333):
        got, want = ops.ranked_choice(a, cdf, k), b.choice(len(probs), size=k, p=probs)
        assert got.tolist() == want.tolist() and got.dtype == np.int64
    assert a.bit_generator.state == b.bit_generator.state
    if len(probs) > 1 and probs[1] == 0:  # a zero-probability individual is never chosen
        assert 1 not in ops.ranked_choice(a, cdf, 1000)


def test_the_steady_state_gas_rank_selection_favours_the_best_as_linear_ranking_says():
    # linear ranking with pressure 2 over 4 ranked individuals: p = 2 i / (n (n - 1)), i = 3, 2, 1, 0 -> 1/2,
    # 1/3, 1/6, 0 (by hand); 60,000 draws land within 1 % of that
    from helpers import devices, op, problem
    ga = SteadyStateGA(problem([op("a"), op("b", ["a"])], devices(2)), seed=1, population=4)
    ga.pop = np.zeros((4, 2), dtype=np.int32)
    counts = np.bincount(ga._parents(60_000), minlength=4) / 60_000
    assert np.allclose(counts, [1 / 2, 1 / 3, 1 / 6, 0], atol=0.01)


@needs_helper
@pytest.mark.parametrize("bound", [1, 2, 3, 5, 176, 1000, 2**31 + 11, 2**32 - 2])
def test_integers_in_c_are_generator_integers(bound):
    a, b = np.random.default_rng(3), np.random.default_rng(3)
    out = np.empty(101, dtype=np.int64)
    ops._batch.integers(a.bit_generator.capsule, bound, out)
    assert out.tolist() == b.integers(0, bound, 101).tolist()
    assert a.bit_generator.state == b.bit_generator.state


@needs_helper
def test_map_elites_mutation_in_c_refuses_genes_and_sizes_it_cannot_hold():
    cap = np.random.default_rng(0).bit_generator.capsule
    kinds, starts = np.empty(2, dtype=np.uint8), np.empty(2, dtype=np.int64)
    with pytest.raises(ValueError):  # a gene beyond the devices
        ops._batch.me_head(cap, np.full((2, 4), 3, dtype=np.int32), 4, 0.5, 0.5, 3, kinds, starts)
    with pytest.raises(ValueError):  # one kind for two rows
        ops._batch.me_head(cap, np.zeros((2, 4), dtype=np.int32), 4, 0.5, 0.5, 3, kinds[:1], starts)
    kinds[:] = 2
    with pytest.raises(ValueError):  # two zoned rows, one length
        ops._batch.me_tail(cap, np.zeros((2, 4), dtype=np.int32), 4, kinds, starts, starts[:1], 3, 0.4, 0.4)
    with pytest.raises(ValueError):
        ops._batch.integers(cap, 0, starts)
