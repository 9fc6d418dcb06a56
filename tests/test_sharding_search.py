"""Searching over splits: the gene space, every search on a problem with a split table, data parallelism and
the hybrid as placers, HEFT choosing splits, and the parallel backends shipping split genes."""

import json

import numpy as np
import pytest

from placement_core.model.devices import Channel, Device, DeviceGraph
from placement_core.base.errors import InputError
from placement_core.model.graph import Graph, Op
from placement_core.optimize import ALGORITHMS, problem_for, run
from placement_core.optimize.archive import ShardedShare
from placement_core.optimize.genes import SHARD_RATE, Genes
from placement_core.problem import Problem
from placement_core.model.sharding import Split, search_splits

BATCH = 16


def net(n_layers: int = 6) -> Graph:
    """input -> (linear -> relu) x n: linear layers split either way, ReLUs by batch only."""
    ops = [Op("x", "input", output_bytes=BATCH * 64 * 4, shape=(BATCH, 64))]
    prev = "x"
    for k in range(n_layers):
        ops.append(Op(f"fc{k}", "linear", (prev,), fwd_flops=2e9, bwd_flops=4e9, output_bytes=BATCH * 64 * 4,
                      param_bytes=64 * 64 * 4, mem_bytes=1e5, shape=(BATCH, 64)))
        ops.append(Op(f"relu{k}", "activation", (f"fc{k}",), output_bytes=BATCH * 64 * 4, mem_bytes=2e4,
                      shape=(BATCH, 64)))
        prev = f"relu{k}"
    return Graph("mlp", ops, BATCH)


def gpus(n: int = 4, bandwidth: float = 50e9) -> DeviceGraph:
    devs = [Device(f"gpu{i}", "gpu", 10e12, 16e9, 900e9) for i in range(n)]
    chans = [Channel(f"link{i}", bandwidth, 5e-6, tuple((a.name, b.name) for b in devs if b is not a))
             for i, a in enumerate(devs)]
    return DeviceGraph("gpus", devs, chans)


@pytest.fixture(scope="module")
def sharded():
    d = gpus()
    return Problem(net(), d, splits=search_splits(d, ["channel", "batch"], 4))


def test_draws_are_half_devices_and_only_splits_an_op_can_take(sharded):
    g = Genes(sharded)
    rng = np.random.default_rng(0)
    pos = np.repeat(np.arange(sharded.n_ops), 2000)
    x = g.draw(rng, pos).reshape(sharded.n_ops, 2000)
    assert sharded.check(x[:, 0]) is not None  # every draw is a gene its op can take
    share = (x >= sharded.n_devices).mean(axis=1)
    assert share == pytest.approx([SHARD_RATE] * sharded.n_ops, abs=0.05)
    relu = sharded.graph.index["relu0"]
    assert all(sharded.splits[v - 4].dim == "batch" for v in x[relu] if v >= 4)


def test_repair_keeps_the_devices(sharded):
    g = Genes(sharded)
    channel = sharded.splits.index(Split("channel", (1, 2)))
    batch = sharded.splits.index(Split("batch", (1, 2)))
    x = np.full(sharded.n_ops, 4 + channel, dtype=np.int32)
    y = g.repair(x)
    kinds = [o.kind for o in sharded.graph.ops]
    assert [int(v) for v, k in zip(y, kinds) if k == "linear"] == [4 + channel] * 6
    assert [int(v) for v, k in zip(y, kinds) if k == "activation"] == [4 + batch] * 6  # same devices, by batch


SEARCHES = ["ga", "map-elites", "hill-climbing", "annealing", "random", "cem", "ga-steady", "map-elites-async",
            "pg", "ppo", "post"]


@pytest.mark.parametrize("algorithm", ["pg", "ppo", "post"])
def test_learned_distributions_start_at_the_searches_draw_and_never_propose_a_split_an_op_cannot_take(
        sharded, algorithm):
    from placement_core.optimize import make_optimizer
    opt = make_optimizer(sharded, algorithm, seed=0, evaluations=600)
    base = Genes(sharded).base_probabilities()
    assert np.allclose(opt.probs, base, atol=1e-12)  # half the mass keeps an op whole, as the searches draw
    relu, fc = sharded.graph.index["relu0"], sharded.graph.index["fc0"]
    channel = [4 + t for t, s in enumerate(sharded.splits) if s.dim == "channel"]
    assert (opt.probs[relu, channel] == 0).all() and (opt.probs[fc, channel] > 0).all()
    for _ in range(10):  # updates of every kind (Post's cross-entropy step every 60 samples) keep the zeros
        x = opt.ask(1000)
        for p in x:
            sharded.check(p)  # raises on a gene its op cannot take
        opt.tell(x, sharded.evaluate_many(x))
    assert (opt.probs[relu, channel] == 0).all() and np.allclose(opt.probs.sum(axis=1), 1)
    state = json.loads(json.dumps(opt.state_dict()))  # a checkpoint holds the masked logits
    again = make_optimizer(sharded, algorithm, seed=0, evaluations=600)
    again.load_state_dict(state)
    assert np.array_equal(again.probs, opt.probs)


@pytest.mark.parametrize("algorithm", SEARCHES)
def test_every_search_proposes_valid_split_genes(sharded, algorithm):
    r = run(sharded, algorithm, evaluations=300, seed=2)
    sharded.check(r.best_placement)
    assert r.best_objective == pytest.approx(sharded.evaluate(r.best_placement))
    if algorithm in ("ga", "map-elites", "random", "cem", "pg", "ppo", "post"):
        single = min(sharded.evaluate(np.full(sharded.n_ops, d, dtype=np.int32)) for d in range(4))
        assert r.best_objective < single  # splitting pays on this network


def test_map_elites_archives_by_how_much_is_split(sharded):
    r = run(sharded, "map-elites", evaluations=400, seed=1)
    archive = r.archive
    assert archive.names[-1] == "sharded" and r.params["dimensions"].endswith(",sharded")
    shares = {round(e.descriptors[-1], 6) for e in archive.elites.values()}
    assert len(shares) > 3  # niches from unsplit to much split
    d = ShardedShare(sharded)
    x = np.array([[0] * 13, [4] * 13], dtype=np.int32)
    assert list(d.values(sharded, x)) == [0.0, 1.0] and list(d.bins(sharded, x)) == [0, 10]


def test_the_same_seed_on_two_workers_gives_the_same_run(sharded):
    serial = run(sharded, "ga-steady", evaluations=300, seed=5, params={"batch": 20, "pending": 2})
    pooled = run(sharded, "ga-steady", evaluations=300, seed=5, params={"batch": 20, "pending": 2}, workers=2)
    assert np.array_equal(serial.history, pooled.history)
    assert np.array_equal(serial.best_placement, pooled.best_placement)


def test_data_parallel_and_hybrid_placers():
    d = gpus()
    p = problem_for(Problem(net(), d), "data-parallel")
    assert p.splits == (Split("batch", (0, 1, 2, 3)),)
    r = run(p, "data-parallel", evaluations=10)
    assert list(r.best_placement) == [4] * p.n_ops  # every op, the input too, split over the four GPUs
    h = problem_for(Problem(net(), d), "hybrid-parallel")
    r = run(h, "hybrid-parallel", evaluations=10)
    labels = [c["label"] for c in r.extras["candidates"]]
    assert labels == ["4 stage(s) of 1 device(s)", "2 stage(s) of 2 device(s)", "1 stage(s) of 4 device(s)"]
    assert r.best_objective == min(c["objective"] for c in r.extras["candidates"])
    with pytest.raises(InputError, match="needs the split batch over gpu0,gpu1,gpu2,gpu3"):
        run(Problem(net(), d), "data-parallel", evaluations=1)


def test_heft_chooses_splits_that_pay():
    d = gpus(bandwidth=400e9)
    p = Problem(net(2), d, splits=search_splits(d, ["batch"], 4))
    r = run(p, "heft-sharded", evaluations=5)
    plain = run(p, "heft", evaluations=5)
    assert (r.best_placement >= 4).any() and r.best_objective < plain.best_objective
    with pytest.raises(InputError, match="heft-sharded chooses splits"):
        run(Problem(net(2), d), "heft-sharded", evaluations=5)


def test_gene_tables_stay_within_a_byte():
    devs = [Device(f"gpu{i}", "gpu", 1e12, 1e9, 1e9) for i in range(40)]
    big = DeviceGraph("big", devs, [Channel("bus", 1e9, 0.0, tuple((a.name, b.name) for a in devs for b in devs
                                                                   if a is not b))])
    with pytest.raises(InputError, match="more than 256 genes"):
        search_splits(big, ["channel", "batch"], 40)
    assert "data-parallel" in ALGORITHMS and "heft-sharded" in ALGORITHMS
