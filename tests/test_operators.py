"""GA and MAP-Elites operators (thesis §3.2.2-3.2.3): selection probabilities worked out by hand,
variation operators replayed with a fixed seed (the draws are written next to each case), the
self-adaptive rates, the niche descriptors and the archive."""

import itertools
import math

import numpy as np
import pytest
from helpers import devices, op, problem

from placement_core.base.errors import InputError
from placement_core.optimize import make_optimizer, run
from placement_core.optimize import operators as ops
from placement_core.optimize.archive import (Archive, CrossDeviceEdges, Descriptor, DevicesUsed, MostUsedDevice,
                                             make_descriptors)


def rng(seed):
    return np.random.default_rng(seed)


# -- selection --------------------------------------------------------------------------------------

def test_linear_rank_probabilities():
    # p_i = (2 - s)/n + 2 i (s - 1) / (n (n - 1)), i = n - 1 for the best (Baker / Eiben & Smith).
    assert ops.linear_rank_probabilities(5, 2.0) == pytest.approx([0.4, 0.3, 0.2, 0.1, 0.0])
    assert ops.linear_rank_probabilities(5, 1.5) == pytest.approx([0.3, 0.25, 0.2, 0.15, 0.1])
    assert ops.linear_rank_probabilities(4, 1.0) == pytest.approx([0.25] * 4)  # no pressure
    assert ops.linear_rank_probabilities(1) == pytest.approx([1.0])
    # The GA's default, population 50 and s = 2: the best twice the average, the worst never.
    p = ops.linear_rank_probabilities(50, 2.0)
    assert p[0] == pytest.approx(0.04) and p[-1] == 0.0 and p.sum() == pytest.approx(1.0)
    assert np.diff(p) == pytest.approx(np.full(49, -0.04 / 49))


def test_exponential_rank_probabilities_are_the_exprimo_formula():
    # p ∝ 1 - e^(-i), i = n - 1 (best) .. 0 (worst), as in the thesis' code. n = 3:
    # [1 - e^-2, 1 - e^-1, 0] / (2 - e^-1 - e^-2) = [0.864665, 0.632121, 0] / 1.496785
    # = [0.577681, 0.422319, 0].
    assert ops.exponential_rank_probabilities(3) == pytest.approx([0.577681, 0.422319, 0.0], abs=1e-6)
    assert ops.exponential_rank_probabilities(1) == pytest.approx([1.0])
    # Discrepancy with the thesis' text, which says exponential ranking gives the most selection
    # pressure: with 50 individuals the sum is 50 - (1 - e^-50)/(1 - e^-1) = 48.418023, so the best gets
    # 1/48.418 = 0.020653, barely above uniform (0.02) and half of linear ranking's 0.04; only the last
    # few ranks are disfavoured. We keep (and test) the code's formula, not the text's claim.
    p = ops.exponential_rank_probabilities(50)
    assert p.sum() == pytest.approx(1.0)
    assert p[0] == pytest.approx(1 / 48.418023, rel=1e-6)
    assert p[-1] == 0.0 and p[-2] == pytest.approx((1 - math.exp(-1)) / 48.418023)
    assert p[-3] == pytest.approx((1 - math.exp(-2)) / 48.418023)
    assert p[:40] == pytest.approx(np.full(40, p[0]), rel=1e-4)  # the top 40 are all but equal
    assert p[0] < ops.linear_rank_probabilities(50, 2.0)[0] / 1.9


class AllDraws:
    """A stand-in generator whose ``integers`` returns every possible tuple of draws once."""

    def integers(self, low, high, shape):
        k, size = shape
        draws = np.array(list(itertools.product(range(low, high), repeat=size)))
        assert len(draws) == k
        return draws


def test_tournament_selection_probabilities_exactly():
    # Size s with replacement among n ranked: P(rank r wins) = ((n - r)/n)^s - ((n - r - 1)/n)^s.
    # n = 4, s = 2: 7/16, 5/16, 3/16, 1/16. Enumerate all 16 draws once.
    objectives = np.array([3.0, 1.0, 4.0, 2.0])  # ranks: index 1 best, then 3, 0, 2
    winners = ops.tournament(AllDraws(), objectives, size=2, k=16)
    assert np.bincount(winners, minlength=4).tolist() == [3, 7, 1, 5]
    # n = 3, s = 3: 19/27, 7/27, 1/27.
    winners = ops.tournament(AllDraws(), np.array([0.5, 0.7, 0.6]), size=3, k=27)
    assert np.bincount(winners, minlength=3).tolist() == [19, 1, 7]
    # Size 1 is uniform random selection (thesis §3.2.3).
    winners = ops.tournament(AllDraws(), objectives, size=1, k=4)
    assert sorted(winners.tolist()) == [0, 1, 2, 3]


def test_tournament_with_a_seed_and_sampled_frequencies():
    # seed 9 draws [[2, 5, 5], [1, 0, 3], [4, 4, 3], [4, 5, 5]] from 6 individuals
    objectives = np.array([5.0, 3.0, 4.0, 1.0, 6.0, 2.0])
    assert ops.tournament(rng(9), objectives, size=3, k=4).tolist() == [5, 3, 3, 5]
    # Equal objectives: the first drawn wins (draws of row 1 are 1, 0, 3).
    assert ops.tournament(rng(9), np.zeros(6), size=3, k=4).tolist() == [2, 1, 4, 4]
    # 200,000 tournaments of size 2 among [5, 3, 4, 1]: within 5 standard deviations (0.0011) of
    # 1, 5, 3, 7 / 16 (index 3 is the best).
    freq = np.bincount(ops.tournament(rng(0), objectives[:4], size=2, k=200_000), minlength=4) / 200_000
    assert np.abs(freq - np.array([1, 5, 3, 7]) / 16).max() < 0.0055


def test_stochastic_universal_sampling():
    p = np.array([0.4, 0.3, 0.2, 0.1, 0.0])
    # seed 12: u = 0.25082; pointers (u + j)/5 = 0.050, 0.250, 0.450, 0.650, 0.850 against the
    # cumulative [0.4, 0.7, 0.9, 1, 1] select 0, 0, 1, 1, 2.
    assert ops.stochastic_universal_sampling(rng(12), p, 5).tolist() == [0, 0, 1, 1, 2]
    for seed in range(200):
        # Baker's guarantee: each index is chosen floor(k p) or ceil(k p) times, whatever the draw.
        counts = np.bincount(ops.stochastic_universal_sampling(rng(seed), p, 7), minlength=5)
        assert counts.sum() == 7
        assert (counts >= np.floor(7 * p)).all() and (counts <= np.ceil(7 * p)).all()
        # k p all whole numbers: the counts are exact; a zero probability is never chosen.
        assert np.bincount(ops.stochastic_universal_sampling(rng(seed), p, 10), minlength=5).tolist() == \
            [4, 3, 2, 1, 0]


def test_ga_parents_always_include_the_elite_and_never_the_zero_probability_worst():
    p = problem([op(f"o{i}", [f"o{i - 1}"] if i else []) for i in range(6)], devices(2))
    ga = make_optimizer(p, "ga", seed=0, params={"population": 10, "elite": 3})
    ga.pop = np.zeros((10, 6), dtype=np.int32)
    ga.pop_f = np.arange(10.0)
    ga.pop_rate = np.full(10, 0.5)
    for _ in range(50):
        parents = ga._parents(8)
        assert len(parents) == 8
        assert {0, 1, 2} <= set(parents.tolist())
        assert 9 not in parents  # linear rank with s = 2 gives the worst probability 0


# -- crossover --------------------------------------------------------------------------------------

A = np.arange(8, dtype=np.int32)  # genes 0..7
B = np.arange(10, 18, dtype=np.int32)  # genes 10..17: every child gene shows which parent it came from


def test_single_point_crossover():
    # seed 21 cuts at 3: the first child takes A's genes 0-2 and B's from 3 on, the second the reverse.
    c1, c2 = ops.n_point_crossover(rng(21), A, B, 1)
    assert c1.tolist() == [0, 1, 2, 13, 14, 15, 16, 17]
    assert c2.tolist() == [10, 11, 12, 3, 4, 5, 6, 7]
    for kind in ("single-point", "1-point"):
        d1, d2 = ops.crossover(rng(21), A, B, kind)
        assert np.array_equal(d1, c1) and np.array_equal(d2, c2)


def test_n_point_crossover():
    # seed 6 cuts at 3, 4 and 7: A A A | B | A A A | B
    c1, c2 = ops.n_point_crossover(rng(6), A, B, 3)
    assert c1.tolist() == [0, 1, 2, 13, 4, 5, 6, 17]
    assert c2.tolist() == [10, 11, 12, 3, 14, 15, 16, 7]
    d1, d2 = ops.crossover(rng(6), A, B, "3-point")
    assert np.array_equal(d1, c1) and np.array_equal(d2, c2)
    # More points than gaps: every gap is cut, so the children alternate gene by gene.
    c1, _ = ops.n_point_crossover(rng(0), A, B, 20)
    assert c1.tolist() == [0, 11, 2, 13, 4, 15, 6, 17]
    # One gene: nothing to cut.
    c1, c2 = ops.n_point_crossover(rng(0), A[:1], B[:1], 1)
    assert c1.tolist() == [0] and c2.tolist() == [10]


def test_uniform_crossover():
    # seed 8: u < 0.5 at genes 0, 2, 5, 6, 7 -> those from A in the first child, the rest from B.
    c1, c2 = ops.uniform_crossover(rng(8), A, B)
    assert c1.tolist() == [0, 11, 2, 13, 14, 5, 6, 7]
    assert c2.tolist() == [10, 1, 12, 3, 4, 15, 16, 17]
    d1, _ = ops.crossover(rng(8), A, B, "uniform")
    assert np.array_equal(d1, c1)


# -- mutation ---------------------------------------------------------------------------------------

def test_point_mutation():
    # seed 1: u = .51 .95 .14 .95 .31 .42 .83 .41 -> genes 2, 4, 5, 7 mutate (rate 0.5), to 2, 2, 0, 0.
    x = np.full(8, 3, dtype=np.int32)
    assert ops.point_mutation(rng(1), x, 0.5, 4).tolist() == [3, 3, 2, 3, 2, 0, 3, 0]
    assert x.tolist() == [3] * 8  # the parent is not modified
    assert ops.point_mutation(rng(1), x, 0.0, 4).tolist() == [3] * 8
    # Rate 1 redraws every gene: after the 8 mask draws, seed 1 gives 2 2 0 0 3 3 3 2 (a redraw may
    # give the old device back: genes 4-6 keep 3).
    assert ops.point_mutation(rng(1), x, 1.0, 4).tolist() == [2, 2, 0, 0, 3, 3, 3, 2]


def test_zone_mutation():
    # seed 5: start 6, geometric length 4, device 3 -> genes 6..9 set to 3.
    x = np.zeros(10, dtype=np.int32)
    assert ops.zone_mutation(rng(5), x, 4).tolist() == [0, 0, 0, 0, 0, 0, 3, 3, 3, 3]
    # seed 12: start 6, length 14 is cut at the end of the chromosome, device 1.
    assert ops.zone_mutation(rng(12), x, 4).tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1]
    # seed 2: start 8, length 1, device 1.
    assert ops.zone_mutation(rng(2), x, 4).tolist() == [0, 0, 0, 0, 0, 0, 0, 0, 1, 0]


def test_copy_mutation_copies_the_predecessor_as_it_was():
    # seed 3: u < 0.5 at genes 0, 1, 4, 5, 6, 7; gene 0 has no predecessor.
    x = np.array([0, 1, 2, 3, 0, 1, 2, 3], dtype=np.int32)
    y = ops.copy_mutation(rng(3), x, 0.5)
    # gene 5 takes x[4] = 0, not the 3 that gene 4 just copied: no chains within one mutation.
    assert y.tolist() == [0, 0, 2, 3, 3, 0, 1, 2]
    assert ops.copy_mutation(rng(3), x, 1.0).tolist() == [0, 0, 1, 2, 3, 0, 1, 2]


def test_replace_mutation_moves_every_gene_of_one_device():
    # used devices [0, 1, 2]; seed 4 picks index 2 (device 2) and target device 3.
    x = np.array([0, 2, 2, 1, 0, 2], dtype=np.int32)
    assert ops.replace_mutation(rng(4), x, 4).tolist() == [0, 3, 3, 1, 0, 3]
    # Only used devices are moved: a single-device placement moves as a whole.
    y = ops.replace_mutation(rng(4), np.full(5, 1, dtype=np.int32), 4)
    assert len(set(y.tolist())) == 1


def test_self_adaptive_rate_mixing():
    # seed 10: alpha = 0.956002. Child 1: alpha * 0.2 + (1 - alpha) * 0.6; child 2 the mirror.
    r1, r2 = ops.mix_rates(rng(10), 0.2, 0.6)
    assert r1 == pytest.approx(0.2 + 0.043998 * 0.4, abs=1e-6)
    assert r2 == pytest.approx(0.6 - 0.043998 * 0.4, abs=1e-6)
    assert r1 + r2 == pytest.approx(0.8)  # a weighted average keeps the parents' total
    assert ops.mix_rates(rng(10), 0.3, 0.3) == pytest.approx((0.3, 0.3))


def test_self_adaptive_rate_drift_and_clamping():
    # seed 11: standard normal 0.034193; seed 34: -0.039925; seed 35: -1.138178.
    assert ops.drift_rate(rng(11), 0.5, 0.05, 0.05, 0.9) == pytest.approx(0.5 + 0.05 * 0.034193, abs=1e-7)
    assert ops.drift_rate(rng(34), 0.5, 1.0, 0.05, 0.9) == pytest.approx(0.5 - 0.039925, abs=1e-6)
    assert ops.drift_rate(rng(11), 0.88, 1.0, 0.05, 0.9) == 0.9  # 0.914 clamped to the top
    assert ops.drift_rate(rng(35), 0.5, 0.5, 0.05, 0.9) == 0.05  # -0.069 clamped to the bottom
    assert ops.drift_rate(rng(11), 0.01, 0.05, 0.05, 0.9) == 0.05


def test_ga_children_carry_clamped_self_adapted_rates():
    p = problem([op(f"o{i}", [f"o{i - 1}"] if i else []) for i in range(6)], devices(3))
    # A drift much wider than the clamp: every rate ends up in [0.2, 0.3] and both bounds are hit.
    ga = make_optimizer(p, "ga", seed=0, params={"population": 20, "elite": 2, "rate_drift": 1.0,
                                                 "min_mutation_rate": 0.2, "max_mutation_rate": 0.3})
    for _ in range(5):
        xs = ga.ask(20)
        ga.tell(xs, p.evaluate_many(xs))
    assert ((ga.pop_rate >= 0.2) & (ga.pop_rate <= 0.3)).all()
    assert (ga.pop_rate == 0.2).any() and (ga.pop_rate == 0.3).any()
    # Without drift a child's rate is a weighted average of its parents': new values appear, but never
    # outside the range of the first generation's rates.
    ga = make_optimizer(p, "ga", seed=0, params={"population": 20, "elite": 2, "rate_drift": 0.0})
    xs = ga.ask(20)
    ga.tell(xs, p.evaluate_many(xs))
    first = ga.pop_rate.copy()
    assert first.max() - first.min() > 0.1  # drawn around 0.5 with spread 0.1
    for _ in range(4):
        xs = ga.ask(20)
        ga.tell(xs, p.evaluate_many(xs))
    assert ((ga.pop_rate >= first.min() - 1e-12) & (ga.pop_rate <= first.max() + 1e-12)).all()
    assert not np.isin(ga.pop_rate, first).all()
    # Not self-adaptive: every child mutates at the configured rate.
    ga = make_optimizer(p, "ga", seed=0, params={"population": 20, "elite": 2, "self_adaptive": False,
                                                 "mutation_rate": 0.37})
    for _ in range(3):
        xs = ga.ask(20)
        ga.tell(xs, p.evaluate_many(xs))
    assert (ga.pop_rate == 0.37).all()


# -- MAP-Elites -------------------------------------------------------------------------------------

def diamond():
    """in -> {a, b} -> c -> d: 5 edges, and a 2-colourable graph, so all 5 can cross with 2 devices."""
    return problem([op("in"), op("a", ["in"]), op("b", ["in"]), op("c", ["a", "b"]), op("d", ["c"])],
                   devices(3))


@pytest.mark.parametrize("rates, check", [
    ({"replace_mutation_rate": 1.0}, "replace"),
    ({"replace_mutation_rate": 0.0, "zone_mutation_rate": 1.0}, "zone"),
    ({"replace_mutation_rate": 0.0, "zone_mutation_rate": 0.0, "mutation_rate": 0.0, "copy_mutation_rate": 1.0},
     "copy"),
])
def test_map_elites_child_uses_the_chosen_mutation(rates, check):
    p = problem([op(f"o{i}", [f"o{i - 1}"] if i else []) for i in range(8)], devices(3))
    me = make_optimizer(p, "map-elites", seed=2, params={"crossover_rate": 0.0, **rates})
    parent = np.array([0, 1, 2, 0, 1, 2, 0, 1], dtype=np.int32)
    me.tell(parent[None, :], np.array([1.0]))  # a one-elite archive: every child's parent
    for child in me.ask(30):  # one batch (the per-gene mutation by hand: tests/test_vectorized_variation.py)
        changed = np.flatnonzero(child != parent)
        if check == "replace":  # all genes of one device a -> one device b
            if len(changed):
                a = set(parent[changed].tolist())
                assert len(a) == 1 and set(child[changed].tolist()) != a
                assert len(set(child[changed].tolist())) == 1
                assert (child[parent == a.pop()] == child[changed[0]]).all()
        elif check == "zone":  # one run of consecutive genes set to one device
            run_ = child[changed.min():changed.max() + 1] if len(changed) else child[:0]
            assert len(set(run_.tolist())) <= 1
        else:  # every gene but the first copies its predecessor in the parent
            assert child.tolist() == [0, 0, 1, 2, 0, 1, 2, 0]


def test_cross_device_edges_binning_is_scaled_by_the_most_possible():
    p = diamond()
    d = CrossDeviceEdges(p, bins=40)
    assert d.max_edges == 5
    placements = np.array([[0, 0, 0, 0, 0],  # no edge crosses
                           [0, 0, 0, 0, 1],  # c -> d
                           [0, 1, 0, 0, 0],  # in -> a, a -> c
                           [0, 1, 1, 0, 0],  # in -> a, in -> b, a -> c, b -> c
                           [0, 1, 1, 0, 1],  # all five
                           [0, 1, 2, 0, 0],  # four, with three devices
                           [2, 1, 0, 1, 1]], dtype=np.int32)  # in->a, in->b, b->c
    assert d.values(p, placements).tolist() == [0, 1, 2, 4, 5, 4, 3]
    # bin = rint(edges / 5 * 39): 0, 7.8, 15.6, 31.2, 39, 31.2, 23.4
    assert d.bins(p, placements).tolist() == [0, 8, 16, 31, 39, 31, 23]
    assert CrossDeviceEdges(p, bins=11).bins(p, placements).tolist() == [0, 2, 4, 8, 10, 8, 6]
    assert d.tick_labels(p)[0] == "0" and d.tick_labels(p)[-1] == "5"


def test_most_used_device_and_devices_used():
    p = diamond()
    xs = np.array([[0, 0, 0, 0, 0], [2, 2, 1, 1, 0], [1, 2, 2, 1, 0], [2, 1, 2, 1, 2]], dtype=np.int32)
    assert MostUsedDevice(p).values(p, xs).tolist() == [0, 1, 1, 2]  # ties go to the lowest index
    assert DevicesUsed(p).values(p, xs).tolist() == [1, 3, 3, 2]
    assert DevicesUsed(p).bins(p, xs).tolist() == [0, 2, 2, 1]


def test_archive_keeps_the_better_and_the_incumbent_on_ties():
    p = diamond()
    archive = Archive(p, make_descriptors(p, ["devices_used"]))
    x1, x2, x3 = (np.array(r, dtype=np.int32) for r in ([0] * 5, [1] * 5, [0, 1, 0, 1, 0]))
    assert archive.add(np.stack([x1, x3]), np.array([5.0, 7.0])) == 2
    assert archive.add(x2[None], np.array([5.0])) == 0  # same niche (1 device), tie: incumbent stays
    assert archive.elites[(0,)].placement.tolist() == x1.tolist()
    assert archive.add(x2[None], np.array([4.0])) == 1
    assert archive.elites[(0,)].placement.tolist() == x2.tolist() and archive.elites[(0,)].objective == 4.0
    assert archive.coverage == pytest.approx(2 / 3) and archive.best().objective == 4.0


class OpsOnFirstDevice(Descriptor):
    """A user-defined dimension: how many ops sit on device 0."""

    def __init__(self, problem):
        super().__init__("ops_on_d0", "ops on d0", problem.n_ops + 1)

    def values(self, problem, placements):
        return (placements == 0).sum(axis=1)


def test_descriptors_are_pluggable():
    p = diamond()
    r = run(p, "map-elites", evaluations=300, seed=0, descriptors=[OpsOnFirstDevice(p), "devices_used"])
    archive = r.archive
    assert archive.names == ["ops_on_d0", "devices_used"] and archive.shape == (6, 3)
    assert len(archive) > 5
    for niche, e in archive.elites.items():
        x = e.placement
        assert niche == (int((x == 0).sum()), len(set(x.tolist())) - 1)  # worked out from the placement
        assert e.objective == pytest.approx(p.evaluate(x))
    # The thesis' dimensions by default, with the cross-edge bins as a parameter.
    default = make_optimizer(p, "map-elites", params={"cross_edge_bins": 7}).archive
    assert default.names == ["most_used_device", "devices_used", "cross_device_edges"]
    assert default.shape == (3, 3, 7)
    with pytest.raises(InputError, match="unknown niche descriptor"):
        make_optimizer(p, "map-elites", descriptors=["colour"])
