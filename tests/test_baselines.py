"""Baselines on hand instances, and every deterministic algorithm on ResNet-50 / malvik-4gpu."""

import numpy as np
import pytest
from helpers import devices

from placement_core import InputError, load_devices, load_network
from placement_core.model.devices import Channel, Device, DeviceGraph
from placement_core.model.graph import Graph, Op
from placement_core.optimize import ALGORITHMS, make_optimizer, run
from placement_core.optimize.baselines import balanced_stages, etf_schedule
from placement_core.optimize.fixed_candidates import MemoryEstimate
from placement_core.problem import Problem

DETERMINISTIC = ("single", "expert", "m-topo", "m-etf", "min-cut", "heft", "heft-nocomm", "heft-memory")


def timed(name, inputs=(), times=None, out=0.0, params=0.0, edge_bytes=None):
    """An op with measured times per device name or kind: {"d0": (fwd, bwd), ...}; no update step."""
    t = {k: {"fwd": f, "bwd": b, "update": 0.0} for k, (f, b) in (times or {}).items()}
    return Op(name, inputs=tuple(inputs), output_bytes=out, param_bytes=params, times=t,
              input_bytes=edge_bytes or {})


def machine(memories=(1e12, 1e12), cpu=False, bandwidth=100.0) -> DeviceGraph:
    """GPUs g0, g1, ... (after a cpu0 if asked), one shared bus."""
    devs = [Device("cpu0", "cpu", 1e9, 1e12, 1e9)] if cpu else []
    devs += [Device(f"g{i}", "gpu", 1e9, m, 1e9) for i, m in enumerate(memories)]
    pairs = tuple((a.name, b.name) for a in devs for b in devs if a != b)
    return DeviceGraph("m", devs, [Channel("bus", bandwidth, 0.0, pairs)])


def make(ops, devs, **kw) -> Problem:
    return Problem(Graph("g", ops), devs, comm_efficiency=1.0, **kw)


def test_every_baseline_is_registered_and_deterministic():
    for name in DETERMINISTIC:
        assert ALGORITHMS[name].deterministic, name


def test_single_returns_the_fastest_single_device():
    # Per op (fwd, bwd): d0 2 + 4, d1 1 + 1, d2 3 + 3; two ops, so 12 s, 4 s and 12 s.
    times = {"d0": (2.0, 4.0), "d1": (1.0, 1.0), "d2": (3.0, 3.0)}
    p = make([timed("a", times=times), timed("b", ["a"], times=times)], devices(3))
    r = run(p, "single", evaluations=100)
    assert r.evaluations == 3
    assert r.best_placement.tolist() == [1, 1]
    assert r.best_objective == 4.0
    assert [c["objective"] for c in r.extras["candidates"]] == [12.0, 4.0, 12.0]
    assert [c["label"] for c in r.extras["candidates"]] == ["d0", "d1", "d2"]
    cut = run(p, "single", evaluations=2)  # the budget cuts the list short
    assert cut.evaluations == 2 and cut.best_objective == 4.0


def test_balanced_stages_minimises_the_slowest_stage():
    assert balanced_stages(np.ones((4, 2))) == [0, 2, 4]
    assert balanced_stages(np.array([[3.0, 3.0], [1, 1], [1, 1], [1, 1]])) == [0, 1, 4]
    # stage 1's device is twice as slow: 3 ops on stage 0 (3 s) beat 2 + 2 (4 s)
    assert balanced_stages(np.array([[1.0, 2.0]] * 4)) == [0, 3, 4]
    assert balanced_stages(np.array([[5.0, 1, 1], [1, 1, 1], [1, 1, 1]])) == [0, 1, 2, 3]
    with pytest.raises(InputError):
        balanced_stages(np.ones((2, 3)))


def test_expert_splits_an_equal_chain_two_and_two_over_the_gpus():
    times = {"gpu": (1.0, 2.0), "cpu": (5.0, 10.0)}
    ops = [timed("a", times=times)] + [timed(n, [q], times=times) for q, n in zip("abc", "bcd")]
    p = make(ops, machine(cpu=True))  # cpu0 = 0, g0 = 1, g1 = 2: the CPU is never a stage
    opt = make_optimizer(p, "expert")
    assert opt.all_candidates().tolist() == [[1, 1, 1, 1], [1, 1, 2, 2]]
    uneven = [timed("a", times={"gpu": (3.0, 0.0)})] + [timed(n, [q], times={"gpu": (1.0, 0.0)})
                                                         for q, n in zip("abc", "bcd")]
    p = make(uneven, machine())
    assert make_optimizer(p, "expert").all_candidates().tolist() == [[0, 0, 0, 0], [0, 1, 1, 1]]


def test_expert_proposes_every_stage_count_on_the_fastest_gpus():
    slow = Device("g2", "gpu", 1e9, 1e12, 1e9)
    devs = [Device("g0", "gpu", 1e9, 1e12, 1e9), Device("g1", "gpu", 1e9, 1e12, 1e9), slow]
    pairs = tuple((a.name, b.name) for a in devs for b in devs if a != b)
    times = {"g0": (1.0, 1.0), "g1": (1.0, 1.0), "g2": (4.0, 4.0)}
    ops = [timed("a", times=times)] + [timed(n, [q], times=times) for q, n in zip("abcde", "bcdef")]
    p = make(ops, DeviceGraph("m", devs, [Channel("bus", 100.0, 0.0, pairs)]))
    cands = make_optimizer(p, "expert").all_candidates().tolist()
    assert cands[0] == [0] * 6  # one stage: the fastest GPU
    assert cands[1] == [0, 0, 0, 1, 1, 1]  # two stages: the two fast ones
    assert len(cands) == 3 and sorted(set(cands[2])) == [0, 1, 2]
    assert cands[2].count(2) == 1  # the slow GPU gets one op: its 8 s is the bottleneck


def two_clusters() -> list[Op]:
    """Clusters a0..a3 and b0..b3, 1000 B on every edge inside; listed interleaved, so the
    topological order alternates between them; one 1-byte edge a3 -> b3 joins them."""
    t = {"gpu": (1.0, 2.0)}
    e = 1000.0
    return [
        timed("a0", times=t, out=e), timed("b0", times=t, out=e),
        timed("a1", ["a0"], t, out=e), timed("b1", ["b0"], t, out=e),
        timed("a2", ["a0", "a1"], t, out=e), timed("b2", ["b0", "b1"], t, out=e),
        timed("a3", ["a1", "a2"], t, out=e), timed("b3", ["b1", "b2", "a3"], t, out=e, edge_bytes={"a3": 1.0}),
    ]


def test_min_cut_separates_two_dense_clusters():
    p = make(two_clusters(), machine())
    names = [o.name for o in p.graph.ops]
    assert names == ["a0", "b0", "a1", "b1", "a2", "b2", "a3", "b3"]  # interleaved: a prefix split is wrong
    runs = [run(p, "min-cut", evaluations=10, seed=seed).best_placement for seed in (0, 1, 2)]
    # one start only: the interleaved prefix split (cut 6000 B) must be repaired by the KL passes
    runs.append(run(p, "min-cut", evaluations=10, params={"starts": 1}).best_placement)
    for x in runs:
        side = dict(zip(names, x.tolist()))
        assert len({side[n] for n in names if n[0] == "a"}) == 1
        assert len({side[n] for n in names if n[0] == "b"}) == 1
        assert side["a0"] != side["b0"]


def test_min_cut_uses_every_gpu_and_balances_compute():
    p = Problem(load_network("resnet50"), load_devices("malvik-4gpu"))
    x = run(p, "min-cut", evaluations=5, seed=0).best_placement
    assert set(x.tolist()) == {1, 2, 3, 4}  # the four GPUs, never the CPU
    work = (p.costs.fwd + p.costs.bwd + p.costs.update)[:, 1]
    shares = np.array([work[x == g].sum() for g in (1, 2, 3, 4)]) / work.sum()
    # recursive halving: each split within 5 % of the total (or one op) of its target
    assert shares.min() > 0.1 and shares.max() < 0.4


def memory_chain(n_ops: int, memories, times=None) -> Problem:
    """A chain of ops with 100 B of weights (200 B with gradients) and 10 B activations each."""
    times = times or {"gpu": (1.0, 2.0)}
    ops = [timed("o0", times=times, out=10.0, params=100.0)]
    ops += [timed(f"o{i}", [f"o{i - 1}"], times, out=10.0, params=100.0) for i in range(1, n_ops)]
    return make(ops, machine(memories))


def test_m_topo_fills_devices_in_order_within_share_and_capacity():
    # Baechi's share: 4 x 210 B / 2 + 210 B = 630 B, i.e. three ops on g0; but g0 holds 500 B,
    # and two ops already need 420 B + their gradients: the third goes to g1.
    p = memory_chain(4, (500.0, 1e12))
    r = run(p, "m-topo", evaluations=10)
    assert r.best_placement.tolist() == [0, 0, 1, 1]
    assert r.best.feasible
    assert not p.simulate([0, 0, 0, 1]).feasible  # Baechi's share alone overflows g0
    roomy = memory_chain(4, (1e12, 1e12))
    assert run(roomy, "m-topo", evaluations=10).best_placement.tolist() == [0, 0, 0, 1]


def test_m_topo_balances_compute_when_asked():
    # A 7-op chain, 1 s each; o0 carries all the weights (2000 B with gradients).
    t = {"gpu": (1.0, 0.0)}
    ops = [timed("o0", times=t, params=1000.0)] + [timed(f"o{i}", [f"o{i - 1}"], t) for i in range(1, 7)]
    p = make(ops, machine())
    # memory share 2000 / 2 + 2000 B: g0 takes everything
    assert run(p, "m-topo", evaluations=5).best_placement.tolist() == [0] * 7
    # compute share 7 / 2 + 1 = 4.5 s: g0 takes four ops
    by_compute = run(p, "m-topo", evaluations=5, params={"balance": "compute"}).best_placement
    assert by_compute.tolist() == [0, 0, 0, 0, 1, 1, 1]


def test_m_etf_keeps_a_chain_on_the_fast_gpu_until_it_is_full():
    # g0 is 3x faster but holds 450 B: two ops (420 B + gradients), not three.
    times = {"g0": (1.0, 2.0), "g1": (3.0, 6.0)}
    p = memory_chain(3, (450.0, 1e12), times)
    r = run(p, "m-etf", evaluations=10)
    assert r.best_placement.tolist() == [0, 0, 1]
    assert r.best.feasible
    assert not p.simulate([0, 0, 0]).feasible  # what ETF would do without the memory check
    x, forward = etf_schedule(memory_chain(3, (1e12, 1e12), times), [0, 1])
    assert x.tolist() == [0, 0, 0] and forward == 3.0


def test_m_etf_starts_parallel_branches_on_idle_gpus():
    # s -> {x, y} -> j, forward only; x and y take 4 s, a tensor crosses in 0.5 s.
    t, heavy = {"gpu": (1.0, 0.0)}, {"gpu": (4.0, 0.0)}
    ops = [timed("s", times=t, out=50.0), timed("x", ["s"], heavy, out=50.0), timed("y", ["s"], heavy, out=50.0),
           timed("j", ["x", "y"], t, out=50.0)]
    p = make(ops, machine())
    x, forward = etf_schedule(p, [0, 1])
    assert x.tolist()[:3] == [0, 0, 1]  # y starts on g1 at 1.5 (after s's output crossed), not g0 at 5
    # j: on g0 it could start at 6 (y's output crosses [5.5, 6]), on g1 at 5.5 (x's crossed [5, 5.5])
    assert x[3] == 1 and forward == 6.5


def test_memory_estimate_counts_weights_activations_copies_and_gradients():
    p = memory_chain(3, (1e12, 1e12))
    mem = MemoryEstimate(p)
    x = np.full(3, -1, dtype=np.int32)
    assert mem.need(0, 0, x) == 210  # 200 B weights + gradients, 10 B activation
    mem.place(0, 0, x)
    x[0] = 0
    assert mem.need(1, 1, x) == 220  # plus a copy of o0's output on g1
    assert mem.overflow(1, 0, x) == 0
    assert mem.total() == 600 + 20 + 20  # weights, the two kept activations, o1's two gradients


@pytest.mark.slow
def test_every_algorithm_on_resnet50_is_valid_and_reproducible():
    p = Problem(load_network("resnet50"), load_devices("malvik-4gpu"))
    single_gpu = p.evaluate(np.full(p.n_ops, 1, dtype=np.int32))
    for name in DETERMINISTIC:
        a = run(p, name, evaluations=100, seed=0)
        b = run(p, name, evaluations=100, seed=0)
        x = a.best_placement
        assert x.shape == (p.n_ops,) and x.dtype == np.int32, name
        assert 0 <= x.min() and x.max() < p.n_devices, name
        assert 1 <= a.evaluations <= 5, name
        assert a.best_objective == pytest.approx(p.evaluate(x)), name
        assert np.array_equal(x, b.best_placement) and a.best_objective == b.best_objective, name
        if name in ("single", "expert"):
            assert a.best_objective <= single_gpu * (1 + 1e-12), name  # one GPU is among their candidates
    # HEFT with the backward's cost in its device choice keeps ResNet-50 on one GPU (without it,
    # the zero-cost input op tied onto the CPU and dragged 43 ops and their backward there: 4x slower).
    assert run(p, "heft", evaluations=1).best_objective == pytest.approx(single_gpu)


def test_bad_parameters_raise_input_errors():
    p = make(two_clusters(), machine())
    with pytest.raises(InputError):
        run(p, "min-cut", evaluations=5, params={"starts": 0})
    with pytest.raises(InputError):
        run(p, "expert", evaluations=5, params={"devices": "tpu"})
    with pytest.raises(InputError):
        run(p, "single", evaluations=5, params={"devices": "all"})  # single has no parameters
