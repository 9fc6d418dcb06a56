"""The compiled batch helper (optimize/_batch.c) does the per-gene work of the variation operators and the
archive's descriptors after numpy's draws: with it and without it (its numpy fallback) every operator gives the
same children and leaves the generator in the same state, the descriptors match a count by hand, and the
archive's batch insert matches a plain dict filled one placement at a time.
"""

import numpy as np
import pytest
from helpers import devices, op, problem

from placement_core.model.sharding import search_splits
from placement_core.optimize import archive as archive_mod
from placement_core.optimize import operators as ops
from placement_core.optimize import variation
from placement_core.optimize.archive import Archive, Descriptor, batch_stats, make_descriptors
from placement_core.optimize.genes import gene_space

needs_helper = pytest.mark.skipif(ops._batch is None, reason="the batch helper is not built")


def chain(n=12, d=3):
    names = [f"o{i}" for i in range(n)]
    ops_ = [op("o0")] + [op(names[i], [names[i - 1]] + ([names[i - 4]] if i >= 4 else [])) for i in range(1, n)]
    return problem(ops_, devices(d))


def both(monkeypatch, make):
    """``make(rng)`` with the helper and with the numpy fallback: (result, generator state) of each."""
    out = []
    for helper in (ops._batch, None):
        with monkeypatch.context() as m:
            m.setattr(ops, "_batch", helper)
            m.setattr(archive_mod, "_batch", helper)
            rng = np.random.default_rng(123)
            out.append((make(rng), rng.bit_generator.state))
    return out


def same(a, b):
    if isinstance(a, tuple):
        return all(same(x, y) for x, y in zip(a, b))
    return np.array_equal(a, b) and np.asarray(a).dtype == np.asarray(b).dtype


@needs_helper
@pytest.mark.parametrize("sharded", [False, True])
def test_every_operator_gives_the_same_children_and_draws_with_and_without_the_helper(monkeypatch, sharded):
    pr = chain()
    if sharded:
        pr = pr.with_splits(search_splits(pr.devices, ["batch"], 2))
    space = gene_space(pr)
    src = np.random.default_rng(0)
    a = ops._devices(src, (40, pr.n_ops), space).astype(np.int32)
    b = ops._devices(src, (40, pr.n_ops), space).astype(np.int32)
    rates = src.random(40)
    rows = np.flatnonzero(src.random(40) < 0.5)
    ga = dict(crossover_rate=0.6, self_adaptive=True, rate_drift=0.1, min_mutation_rate=0.05, max_mutation_rate=0.9,
              zone_mutation_rate=0.5)
    me = dict(crossover_rate=0.6, replace_mutation_rate=0.2, zone_mutation_rate=0.3, copy_mutation_rate=0.4,
              mutation_rate=0.3)

    def rows_mutated(rng, mutation, *args):
        kids = a.copy()
        ops.mutate_rows(rng, kids, rows, mutation, *args)
        return kids

    cases = [
        lambda rng: ops.batch_point_mutation(rng, a, rates, space),
        lambda rng: ops.batch_zone_mutation(rng, a, space),
        lambda rng: ops.batch_copy_point_mutation(rng, a, 0.4, 0.3, space),
        lambda rng: rows_mutated(rng, ops.batch_zone_mutation, space),
        lambda rng: rows_mutated(rng, ops.batch_copy_point_mutation, 0.4, 0.3, space),
        lambda rng: variation.crossed(rng, a, b, 0.7),
        lambda rng: variation.crossed(rng, a, b, 0.7, pair=True),
        lambda rng: variation.crossed(rng, a, b, 0.7, "3-point", pair=True),
        lambda rng: variation.ga_pair_children(rng, a[:20], b[:20], rates[:20], rates[20:], ga, space),
        lambda rng: variation.ga_children(rng, a, b, rates, rates[::-1], {**ga, "crossover": "uniform"}, space),
        lambda rng: variation.map_elites_children(rng, a, b, me, space),
        lambda rng: variation.map_elites_children(rng, a, b, {**me, "replace_mutation_rate": 1.0}, space),
        # parents read where they are (rows of a and b, repeats and any order) rather than gathered first
        lambda rng: variation.crossed(rng, a, b, 0.7, pair=True, rows=(rows[::-1], np.resize(rows[:3], len(rows)))),
        lambda rng: variation.map_elites_children(rng, a, b, me, space, rows=(rows, rows[::-1])),
        lambda rng: variation.map_elites_children(rng, a, b, {**me, "replace_mutation_rate": 0.0,
                                                              "zone_mutation_rate": 1.0}, space),
    ]
    for make in cases:
        (fast, state_fast), (slow, state_slow) = both(monkeypatch, make)
        assert same(fast, slow) and state_fast == state_slow
    # a single op: nothing to cut, the parents come back whole
    (one, _), (one_slow, _) = both(monkeypatch, lambda rng: variation.crossed(rng, a[:, :1], b[:, :1], 1.0, pair=True))
    assert same(one, one_slow) and one[0::2].tolist() == a[:, :1].tolist()


def by_hand(pr, x):
    """(most-used device, devices used, cross-device edges) of one placement, counted op by op."""
    uses = archive_mod._uses(pr)
    counts = [0] * pr.n_devices
    for g in x:
        for dev in range(pr.n_devices):
            counts[dev] += int(uses[g, dev])
    edges = sum(1 for e in pr.graph.edges() if x[e[0]] != x[e[1]])
    return counts.index(max(counts)), sum(c > 0 for c in counts), edges


@pytest.mark.parametrize("sharded", [False, True])
def test_batch_stats_count_what_a_count_by_hand_gives(monkeypatch, sharded):
    pr = chain()
    if sharded:
        pr = pr.with_splits(search_splits(pr.devices, ["batch"], 2))
    xs = ops._devices(np.random.default_rng(4), (60, pr.n_ops), gene_space(pr)).astype(np.int32)
    xs[:5] = 1  # ties and single devices
    edges = make_descriptors(pr, ["cross_device_edges"])[0]._edges
    want = np.array([by_hand(pr, x) for x in xs])
    for helper in (ops._batch, None):
        monkeypatch.setattr(archive_mod, "_batch", helper)
        assert batch_stats(pr, xs, *edges).tolist() == want.tolist()


@needs_helper
def test_the_helper_refuses_what_would_write_out_of_bounds():
    cap = np.random.default_rng(0).bit_generator.capsule
    kids = np.zeros((3, 5), dtype=np.int32)
    with pytest.raises(IndexError):
        ops._batch.copy_point(cap, kids, np.array([3]), 0.5, 0.5, 5, 3)
    with pytest.raises(ValueError):  # a rate for 2 rows, 3 rows to mutate
        ops._batch.point(cap, kids, np.ones(2, dtype=np.float32), 5, 3)
    with pytest.raises(IndexError):  # a parent row beyond the parents
        ops._batch.cross(cap, kids, kids, 0.5, np.zeros((2, 5), dtype=np.int32), 5, False, np.array([0, 3]),
                         np.array([0, 1]))
    with pytest.raises(ValueError):  # no room for the complementary children
        ops._batch.cross(cap, kids, kids, 0.5, np.zeros((3, 5), dtype=np.int32), 5, True)
    with pytest.raises(ValueError):  # a gene beyond the uses table
        ops._batch.describe(np.full((1, 5), 7, dtype=np.int32), 5, None, 3, np.zeros(0, dtype=np.int64),
                            np.zeros(0, dtype=np.int64), np.zeros((1, 3), dtype=np.int64))
    with pytest.raises(ValueError):  # not a bit generator's capsule
        ops._batch.tournament(object(), np.ones(3), 2, 4, np.zeros(4, dtype=np.int64))


@needs_helper
def test_the_helper_draws_numpys_numbers_for_every_bound(monkeypatch):
    # Lemire's method on 32-bit draws (tournaments over 1 to 2^20 + 3 elites) and on 8-bit ones from a buffered
    # 32-bit draw (1 to 256 devices, 255 and 256 the edge cases), float32 uniforms: the same numbers and the
    # generator left in the same state as numpy's own calls.
    src = np.random.default_rng(1)
    for m in (1, 2, 3, 7, 255, 256, 257, 1000, (1 << 20) + 3):
        fs = src.random(m)
        fs[src.random(m) < 0.3] = 0.5  # ties
        for size in (1, 3, 10):
            (fast, s1), (slow, s2) = both(monkeypatch, lambda rng: ops.tournament(rng, fs, size, 37))
            assert same(fast, slow) and s1 == s2
    for d in (1, 2, 3, 4, 7, 200, 255, 256):
        xs = src.integers(0, d, (9, 31)).astype(np.int32)
        rates = src.random(9)
        for make in (lambda rng: ops.batch_point_mutation(rng, xs, rates, d),
                     lambda rng: ops.batch_copy_point_mutation(rng, xs, 0.3, 0.6, d)):
            (fast, s1), (slow, s2) = both(monkeypatch, make)
            assert same(fast, slow) and s1 == s2
    fs = np.array([1.0, np.nan, 0.5, np.nan])  # numpy's argmin takes the first NaN
    (fast, _), (slow, _) = both(monkeypatch, lambda rng: ops.tournament(rng, fs, 3, 50))
    assert same(fast, slow)


class Parity(Descriptor):
    """A user's descriptor (no shared count), with bins outside its size for odd sums."""

    def __init__(self):
        super().__init__("parity", "parity", 2)

    def values(self, problem, placements):
        return placements.sum(axis=1)

    def bins(self, problem, placements):
        v = self.values(problem, placements)
        return np.where(v % 2 == 0, v % 4 // 2, 5)


@pytest.mark.parametrize("helper", [True, False])
@pytest.mark.parametrize("dims", [["most_used_device", "devices_used", "cross_device_edges"],
                                  ["devices_used", "sharded"], ["most_used_device", "parity"]])
def test_batch_insert_equals_a_plain_dict_filled_one_by_one(monkeypatch, dims, helper):
    if not helper:
        monkeypatch.setattr(archive_mod, "_batch", None)
    pr = chain(10, 3)
    if "sharded" in dims:
        pr = pr.with_splits(search_splits(pr.devices, ["batch"], 2))
    descs = [Parity() if d == "parity" else make_descriptors(pr, [d])[0] for d in dims]
    batch_wise = Archive(pr, descs)
    plain: dict = {}  # niche -> (objective, placement, raw values), in the order niches were first filled
    rng = np.random.default_rng(9)
    space = gene_space(pr)
    for _ in range(40):
        xs = ops._devices(rng, (30, pr.n_ops), space).astype(np.int32)
        xs[rng.random(30) < 0.3] = 2
        fs = rng.integers(0, 5, 30).astype(float)
        fs[rng.random(30) < 0.05] = np.inf
        changed = set()
        for x, f in zip(xs, fs):
            niche = tuple(int(d.bins(pr, x[None])[0]) for d in descs)
            if niche not in plain or f < plain[niche][0]:
                changed.add(niche)
                plain[niche] = (f, x.copy(), tuple(float(d.values(pr, x[None])[0]) for d in descs))
        assert batch_wise.add(xs, fs) == len(changed)
        assert batch_wise.elites.keys() == plain.keys()
        for niche, (f, x, raw) in plain.items():
            e = batch_wise.elites[niche]
            assert (e.objective, e.descriptors) == (f, raw) and np.array_equal(e.placement, x)
        niches, arr, objs = batch_wise.arrays()
        assert niches == sorted(plain)
        assert objs.tolist() == [plain[k][0] for k in niches]
        assert np.array_equal(arr, np.stack([plain[k][1] for k in niches]))


@needs_helper
def test_the_winners_chosen_in_c_are_numpys_with_nans_and_ties(monkeypatch):
    # NaN objectives sort last within a niche (numpy's lexsort) and never beat an incumbent; ties keep the earliest.
    pr = chain(10, 3)
    archives = []
    for helper in (ops._batch, None):
        monkeypatch.setattr(archive_mod, "_batch", helper)
        arch = Archive(pr, make_descriptors(pr, ["most_used_device", "devices_used", "cross_device_edges"]))
        rng = np.random.default_rng(2)
        for _ in range(30):
            xs = rng.integers(0, 3, (40, 10)).astype(np.int32)
            fs = rng.integers(0, 4, 40).astype(float)
            fs[rng.random(40) < 0.2] = np.nan
            arch.add(xs, fs)
        archives.append(arch)
    fast, slow = archives
    assert list(fast.elites) == list(slow.elites)
    for k, e in slow.elites.items():
        got = fast.elites[k]
        assert np.array_equal(got.placement, e.placement) and (got.objective == e.objective or np.isnan(e.objective))
