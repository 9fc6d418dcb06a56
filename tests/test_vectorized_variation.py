"""The synchronous GA and MAP-Elites make a whole batch of children at once (optimize/variation.py).

Each operator is replayed on a tiny instance with a fixed seed; the draws are written next to each case and
the expected children worked out from them by hand. Selection is checked against probabilities enumerated by
brute force. A checkpoint written by the per-child code (before the batch operators) still resumes.
"""

import itertools
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import devices, op, problem

from placement_core.optimize import make_optimizer, run
from placement_core.optimize import variation
from placement_core.optimize.driver import drive

GA = dict(crossover_rate=0.5, crossover="single-point", self_adaptive=True, rate_drift=0.1, min_mutation_rate=0.05,
          max_mutation_rate=0.9, zone_mutation_rate=0.5)


def tiny():
    """10 ops, each reading its predecessor and the op three back; 3 devices on a shared bus."""
    names = [f"o{i}" for i in range(10)]
    ops_ = [op("o0")] + [op(names[i], [names[i - 1]] + ([names[i - 3]] if i >= 3 else []), fwd=1.0 + i % 3,
                            out=50.0 * (1 + i % 4)) for i in range(1, 10)]
    return problem(ops_, devices(3, bandwidth=200.0))


def test_ga_pair_children_replayed_by_hand():
    a = np.array([[0] * 6, [2] * 6], dtype=np.int32)
    b = np.array([[1] * 6, [0, 1, 2, 0, 1, 2]], dtype=np.int32)
    kids, rates = variation.ga_pair_children(np.random.default_rng(0), a, b, np.array([0.1, 0.2]),
                                             np.array([0.3, 0.05]), GA, 3)
    # seed 0 draws, in order:
    # crossover u = .637 .270 -> only pair 1 crosses, cut 2: children 222012 (a up to the cut, then b) and 012222;
    #   pair 0's children are its parents, 000000 and 111111;
    # alpha = .0165 .8133 -> rates .0165*.1 + .9835*.3 = .2967 and its mirror .1033 (pair 0),
    #   .8133*.2 + .1867*.05 = .1720 and .0780 (pair 1);
    # drift N(0, .1) = .0362 .1304 .0947 -.0704 -> .3329 .2337 .2667 .0076, the last clamped to .05;
    # point mutation (u < the row's rate; fresh devices): row 0 genes 0, 3 -> 0, 0 (unchanged); row 1 genes 0, 4
    #   -> 1, 2: 111121; row 2 genes 2, 3, 5 -> 0, 0, 0: 220010; row 3 none (its smallest u is .08 > .05);
    # zone u = .615 .384 .997 .981 -> row 1 only: start 3, length 3, device 2: 111222.
    assert kids.tolist() == [[0, 0, 0, 0, 0, 0], [1, 1, 1, 2, 2, 2], [2, 2, 0, 0, 1, 0], [0, 1, 2, 2, 2, 2]]
    assert rates == pytest.approx([0.2967 + 0.0362, 0.1033 + 0.1304, 0.1720 + 0.0947, 0.05], abs=2e-4)
    assert kids.dtype == np.int32


def test_ga_pair_children_are_complementary_crossovers_with_uniform_cuts():
    # No mutation, every pair crosses: child 1 is a up to a cut c then b, child 2 the mirror, with c uniform on
    # 1..n-1 (a single cut among n - 1 places); the rates of a pair add up to the parents' (a weighted mix).
    n, m = 7, 3000
    a = np.zeros((m, n), dtype=np.int32)
    b = np.ones((m, n), dtype=np.int32)
    p = {**GA, "crossover_rate": 1.0, "self_adaptive": False, "zone_mutation_rate": 0.0}
    kids, rates = variation.ga_pair_children(np.random.default_rng(1), a, b, np.full(m, 0.0), np.full(m, 0.0), p, 2)
    c1, c2 = kids[0::2], kids[1::2]
    assert (c1 + c2 == 1).all()
    cuts = n - c1.sum(axis=1)  # 0...0 1...1: the first 1 is at the cut
    assert (np.sort(c1, axis=1) == c1).all() and set(cuts.tolist()) == set(range(1, n))
    counts = np.bincount(cuts, minlength=n)[1:]
    expected = m / (n - 1)  # 500 each; sd sqrt(m p (1 - p)) = 20.4
    assert np.abs(counts - expected).max() < 4 * np.sqrt(m * (1 / (n - 1)) * (1 - 1 / (n - 1)))
    r = variation.ga_pair_children(np.random.default_rng(2), a[:4], b[:4], np.array([.1, .2, .3, .4]),
                                   np.array([.5, .6, .7, .8]), {**p, "crossover_rate": 0.0}, 2)[1]
    assert r[0::2] + r[1::2] == pytest.approx([.6, .8, 1.0, 1.2])
    assert ((r[0::2] >= np.array([.1, .2, .3, .4])) & (r[0::2] <= np.array([.5, .6, .7, .8]))).all()


def test_map_elites_children_replayed_by_hand():
    p = dict(crossover_rate=0.5, replace_mutation_rate=0.3, zone_mutation_rate=0.4, copy_mutation_rate=0.3,
             mutation_rate=0.3)
    a = np.array([[0, 0, 1, 1, 2, 2], [2] * 6, [0, 1, 2, 0, 1, 2]], dtype=np.int32)
    b = np.array([[1] * 6, [0, 0, 0, 1, 1, 1], [2] * 6], dtype=np.int32)
    # seed 15: crossover u = .693 .816 .344 -> child 2 crosses at cut 2: 012222; children 0 and 1 are a's rows.
    # replace u = .572 .146 .719 -> child 1 replaces; zone u = .345 .457 .976 -> child 0 zone; child 2 per gene.
    # child 1 (all on 2): keys .781 .844 .555 times used (only device 2) -> device 2 moves to device 0: 000000.
    # child 0: zone from 3, length 1, device 2: 001222.
    # child 2: point u < .3 at gene 5 only (.23) -> fresh device 1; copy u < .3 at gene 0 only (.22), which has no
    #   predecessor: 012221.
    kids = variation.map_elites_children(np.random.default_rng(15), a, b, p, 3)
    assert kids.tolist() == [[0, 0, 1, 2, 2, 2], [0, 0, 0, 0, 0, 0], [0, 1, 2, 2, 2, 1]]


def test_copy_then_point_mutation_replayed_by_hand():
    p = dict(crossover_rate=0.0, replace_mutation_rate=0.0, zone_mutation_rate=0.0, copy_mutation_rate=0.4,
             mutation_rate=0.4)
    x = np.array([[0, 1, 0, 1, 0, 1, 0, 1]], dtype=np.int32)
    # seed 12: point u < .4 at genes 1, 4, 5, 6, 7 -> fresh devices 1, 2, 1, 1, 2: 01012112; copy u < .4 at genes
    # 1, 3, 7 -> the parent's gene before (as it was, overriding a point mutation): gene 1 <- 0, 3 <- 0, 7 <- 0.
    from placement_core.optimize import operators as ops
    assert ops.batch_copy_point_mutation(np.random.default_rng(12), x, 0.4, 0.4, 3).tolist() == \
        [[0, 0, 0, 0, 2, 1, 1, 0]]
    # MAP-Elites' child draws three numbers first (crossover, replace, zone: one each), then the same mutation
    rng = np.random.default_rng(12)
    rng.random(1), rng.random(1), rng.random(1)
    want = ops.batch_copy_point_mutation(rng, x, 0.4, 0.4, 3)
    assert variation.map_elites_children(np.random.default_rng(12), x, x, p, 3).tolist() == want.tolist()


def tournament_probabilities(objectives, size):
    """Brute force: every ordered draw of ``size`` indices, the first-drawn best wins."""
    n = len(objectives)
    p = np.zeros(n)
    for draw in itertools.product(range(n), repeat=size):
        p[min(draw, key=lambda i: (objectives[i], draw.index(i)))] += 1
    return p / n ** size


def test_map_elites_batch_parents_follow_the_tournament_probabilities():
    pr = tiny()
    me = make_optimizer(pr, "map-elites", seed=3, params={
        "batch": 4000, "tournament_size": 3, "crossover_rate": 0.0, "replace_mutation_rate": 0.0,
        "zone_mutation_rate": 0.0, "copy_mutation_rate": 0.0, "mutation_rate": 0.0, "dimensions":
        "devices_used,most_used_device"})
    elites = np.array([[0] * 10, [1] * 5 + [2] * 5, [0, 1, 2] * 3 + [0]], dtype=np.int32)  # three niches
    me.tell(elites, np.array([3.0, 1.0, 2.0]))
    kids = me.ask(4000)  # unmutated children: each is its parent
    which = [int(np.flatnonzero((elites == k).all(axis=1))[0]) for k in kids]
    freq = np.bincount(which, minlength=3) / len(kids)
    # size 3 among 3: the best (index 1) wins unless all three draws miss it: 1 - (2/3)^3 = 19/27, and so on
    want = tournament_probabilities([3.0, 1.0, 2.0], 3)
    assert want == pytest.approx([1 / 27, 19 / 27, 7 / 27])
    assert np.abs(freq - want).max() < 4 * np.sqrt(0.25 / len(kids))


@pytest.mark.parametrize("algorithm", ["ga", "map-elites"])
def test_same_seed_same_run_and_children_are_valid(algorithm):
    pr = tiny()
    a = run(pr, algorithm, evaluations=500, seed=11)
    b = run(pr, algorithm, evaluations=500, seed=11)
    c = run(pr, algorithm, evaluations=500, seed=12)
    assert np.array_equal(a.history, b.history) and np.array_equal(a.best_placement, b.best_placement)
    assert a.evaluations == 500
    opt = make_optimizer(pr, algorithm, seed=11)
    xs = opt.ask(500)
    opt.tell(xs, pr.evaluate_many(xs))
    kids = opt.ask(500)
    assert kids.dtype == np.int32 and kids.shape == (45 if algorithm == "ga" else 50, 10)
    assert kids.min() >= 0 and kids.max() < 3
    assert not np.array_equal(a.history, c.history) or not np.array_equal(a.best_placement, c.best_placement)


def test_sharded_batches_are_valid_genes_and_deterministic():
    from placement_core.model.sharding import search_splits
    pr = tiny()
    sharded = pr.with_splits(search_splits(pr.devices, ["batch"], 2))
    for algorithm in ("ga", "map-elites"):
        a = run(sharded, algorithm, evaluations=300, seed=4)
        b = run(sharded, algorithm, evaluations=300, seed=4)
        assert np.array_equal(a.history, b.history)
        opt = make_optimizer(sharded, algorithm, seed=4)
        xs = opt.ask(300)
        opt.tell(xs, sharded.evaluate_many(xs))
        kids = opt.ask(300)
        sharded.checked(kids)  # raises on a gene an op cannot take
        assert kids.max() < sharded.n_genes


@pytest.mark.parametrize("algorithm", ["ga", "map-elites"])
def test_a_checkpoint_from_the_per_child_code_resumes(algorithm):
    # tests/fixtures/checkpoints_before_vectorized_variation.json: drive() checkpoints of tiny() written by the
    # code before this change (children made one by one), seed 7, 400 evaluations, the middle checkpoint kept.
    # The state is the same shape (population or archive, generator state), so it loads; from there the
    # children are drawn by the batch operators, so the continuation is the new code's, and it is deterministic.
    saved = json.loads((Path(__file__).parent / "fixtures" / "checkpoints_before_vectorized_variation.json")
                       .read_text())[algorithm]
    state = saved["state"]
    resumed = [drive(make_optimizer(tiny(), algorithm, seed=saved["seed"], evaluations=400), evaluations=400,
                     state=json.loads(json.dumps(state))) for _ in range(2)]
    assert 0 < state["evaluations"] < 400
    assert resumed[0].evaluations == 400
    assert np.array_equal(resumed[0].history, resumed[1].history)
    assert resumed[0].history[: len(state["history"])].tolist() == state["history"]
    assert resumed[0].best_objective <= state["best_objective"]
    assert tiny().evaluate(resumed[0].best_placement) == pytest.approx(resumed[0].best_objective)


def test_archive_batch_insert_is_insertion_one_by_one():
    # Brute force: a batch inserted at once leaves the archive exactly as inserting its placements one at a time
    # (per niche the best, the earliest on a tie, the incumbent before all), on batches with many ties.
    from placement_core.optimize.archive import Archive, make_descriptors
    pr = tiny()
    rng = np.random.default_rng(5)
    batch_wise = Archive(pr, make_descriptors(pr, ["most_used_device", "devices_used", "cross_device_edges"]))
    one_by_one = Archive(pr, make_descriptors(pr, ["most_used_device", "devices_used", "cross_device_edges"]))
    for _ in range(30):
        xs = rng.integers(0, 3, (25, 10)).astype(np.int32)
        xs[rng.random(25) < 0.3] = 1  # repeats of one niche
        fs = rng.integers(0, 6, 25).astype(float)  # few values: ties within and across batches
        changed = {k for k in one_by_one.elites}
        before = {k: e.objective for k, e in one_by_one.elites.items()}
        for x, f in zip(xs, fs):
            one_by_one.add(x[None], np.array([f]))
        changed = {k for k, e in one_by_one.elites.items() if k not in changed or e.objective < before[k]}
        assert batch_wise.add(xs, fs) == len(changed)
        assert batch_wise.elites.keys() == one_by_one.elites.keys()
        for k, e in one_by_one.elites.items():
            got = batch_wise.elites[k]
            assert got.objective == e.objective and np.array_equal(got.placement, e.placement)
            assert got.descriptors == e.descriptors
        niches, xs_a, fs_a = batch_wise.arrays()
        assert niches == sorted(one_by_one.elites) and fs_a.tolist() == [one_by_one.elites[k].objective for k in niches]
        assert np.array_equal(xs_a, np.stack([one_by_one.elites[k].placement for k in niches]))


def test_an_automatic_batch_leaves_the_search_a_thousand_rounds():
    # Dask's pacing asks for 50 ms of work per task: about 1,100 ResNet-50 placements, 1,500 once a probe is slow.
    # Batches that large left a 20,000-evaluation search 13 rounds and cost ga-steady half its quality
    # (asynchronous.QUALITY_ROUNDS); the automatic batch is now the pacing's size capped at max(50, budget / 1000).
    from placement_core.optimize.asynchronous import quality_cap
    from placement_core.parallel import Pacing
    assert [quality_cap(b) for b in (1000, 20_000, 50_000, 60_000, 300_000)] == [50, 50, 50, 60, 300]
    assert quality_cap(None) == 500

    class Slow:  # what the driver sees of a 2-worker Dask backend: 46 us a placement, 2 ms a task, 50 ms floor
        workers = 2
        pacing = Pacing(2, eval_s=4.6e-5, task_overhead_s=2e-3, floor_s=0.05)

    pr = tiny()
    assert Slow.pacing.task_size() == 1087  # 0.05 / 4.6e-5, rounded up
    for budget, batch in ((20_000, 50), (300_000, 300), (5_000_000, 1087), (None, 500)):
        opt = make_optimizer(pr, "ga-steady", seed=0)
        opt.configure(Slow(), budget)
        assert (opt.params["batch"], opt.params["pending"]) == (batch, 4)
    opt = make_optimizer(pr, "map-elites-async", seed=0, params={"batch": 1500})  # explicit: as given
    opt.configure(Slow(), 20_000)
    assert opt.params["batch"] == 1500
