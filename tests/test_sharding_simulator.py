"""The simulator on split ops: closed forms worked out by hand, the kernel against the reference on random
sharded placements, and what an unsharded placement keeps (docs/sharding.md)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement_core.model.devices import Channel, Collective, Device, DeviceGraph
from placement_core.base.errors import InputError
from placement_core.model.graph import Graph, Op
from placement_core.problem import Problem
from placement_core.model.sharding import Split, applicable, search_splits
from placement_core.simulate import SimSettings

from helpers import devices, examples, require_kernel
from test_simulator_properties import shared_resources  # noqa: E402  at import: inside a strategy it nests @given

BATCH = 8


def layer(name, inputs=(), fwd=0.0, bwd=0.0, out=100.0, params=0.0, kind="linear", channels=8):
    """Measured times (no weight update), a shape (batch, channels) so the op can be split either way."""
    return Op(name=name, kind=kind, inputs=tuple(inputs), output_bytes=out, param_bytes=params,
              shape=(BATCH, channels), times={"cpu": {"fwd": fwd, "bwd": bwd, "update": 0.0}})


def problem(ops, devs, splits, fast=True, **kw) -> Problem:
    return Problem(Graph("g", ops, BATCH), devs, settings=SimSettings(**kw), comm_efficiency=1.0,
                   comp_efficiency=1.0, splits=tuple(splits), fast=fast)


def genes(p: Problem, entries: dict) -> np.ndarray:
    """op name -> device index or Split; the gene array over the problem's table."""
    return np.array([entries[o.name] if isinstance(entries[o.name], int) else
                     p.n_devices + p.splits.index(entries[o.name]) for o in p.graph.ops], dtype=np.int32)


@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("fast", [True, False])
def test_data_parallel_is_compute_over_n_plus_the_ring(n, fast):
    """x -> fc split by batch over n devices, one channel per ordered pair: shard j computes (F + B) b_j / B
    (8 samples: 4/4, 3/3/2, 2/2/2/2), then each device sends 2 (n - 1) / n of fc's W weight bytes to the
    next, all at once: L + that / bandwidth after the largest shard."""
    F, B, W, L, bw = 6.0, 12.0, 600.0, 0.5, 100.0
    devs = devices(n, bandwidth=bw, latency=L, shared=False)
    dp = Split("batch", tuple(range(n)))
    p = problem([layer("x", kind="input"), layer("fc", ["x"], F, B, params=W)], devs, [dp], fast=fast)
    ev = p.simulate(genes(p, {"x": dp, "fc": dp}))
    ring = L + 2 * (n - 1) / n * W / bw
    sizes = [BATCH // n + (j < BATCH % n) for j in range(n)]
    assert ev.result.makespan == pytest.approx((F + B) * max(sizes) / BATCH + ring, rel=1e-12)
    assert ev.result.transfers == n  # one ring message per device, no activation crosses
    assert sorted(ev.result.channel_bytes[ev.result.channel_bytes > 0]) == pytest.approx([2 * (n - 1) / n * W] * n)
    assert ev.result.busy == pytest.approx([(F + B) * b / BATCH for b in sizes])


def test_two_rings_overlap_the_backward_and_queue_on_the_links():
    """x -> fc1 -> fc2, all split by batch over 2 devices: fc2's all-reduce runs during fc1's backward; fc1's
    waits for its own backward and for fc2's message on the same link."""
    n, L, bw = 2, 0.0, 100.0
    F1, B1, W1, F2, B2, W2 = 2.0, 4.0, 300.0, 2.0, 2.0, 500.0
    devs = devices(n, bandwidth=bw, latency=L, shared=False)
    dp = Split("batch", (0, 1))
    ops = [layer("x", kind="input"), layer("fc1", ["x"], F1, B1, params=W1), layer("fc2", ["fc1"], F2, B2, params=W2)]
    p = problem(ops, devs, [dp])
    ev = p.simulate(genes(p, {"x": dp, "fc1": dp, "fc2": dp}))
    t2 = (F1 + F2 + B2) / n  # fc2's backward ends: its ring starts
    a1, a2 = W1 / bw, W2 / bw  # 2 (n - 1) / n = 1 for n = 2
    t1 = max(t2 + B1 / n, t2 + a2)  # fc1's ring: after fc1's backward and after fc2's message on the link
    assert ev.result.makespan == pytest.approx(t1 + a1, rel=1e-12)


def test_a_shared_bus_carries_the_ring_messages_one_after_another():
    n, F, B, W, bw = 4, 4.0, 4.0, 400.0, 100.0
    dp = Split("batch", tuple(range(n)))
    p = problem([layer("x", kind="input"), layer("fc", ["x"], F, B, params=W)], devices(n, bandwidth=bw), [dp])
    ev = p.simulate(genes(p, {"x": dp, "fc": dp}))
    assert ev.result.makespan == pytest.approx((F + B) / n + n * (2 * (n - 1) / n * W / bw), rel=1e-12)


def test_a_channel_split_by_hand():
    """x (d0) -> fc split by channel over d0, d1 -> out (d0). 100 B/s, no latency. x's 100 B reach d1 at 1;
    the shards run 2 s each (4 / 2), d1's ends at 3 and its 100 B slice reaches d0 at 4; the gather copies
    fc's 200 B (read and written at 1e9 B/s: g = 4e-7 s) and out runs 1 s: 5 + g. Backward: out 1 s, the
    gather g, its 100 B gradient slice to d1 (1 s), the shards' backwards 3 s each: d1's ends at 10 + 2g. x
    is the network's input: no gradient goes back to it."""
    devs = devices(2, bandwidth=100.0)
    cs = Split("channel", (0, 1))
    ops = [layer("x", kind="input", out=100.0), layer("fc", ["x"], 4.0, 6.0, out=200.0, params=80.0),
           layer("out", ["fc"], 1.0, 1.0, kind="activation")]
    p = problem(ops, devs, [cs])
    ev = p.simulate(genes(p, {"x": 0, "fc": cs, "out": 0}))
    g = 200 * 2 / 1e9
    assert ev.result.makespan == pytest.approx(10 + 2 * g, rel=1e-12)
    assert ev.result.transfers == 3
    assert ev.result.channel_bytes.sum() == pytest.approx(100 + 100 + 100)
    # memory: each shard holds half the weights (twice: weights and gradients under the default profile)
    trace = p.simulate(genes(p, {"x": 0, "fc": cs, "out": 0}), trace=True).result.trace
    shards = [e for e in trace if e.kind == "op" and e.op == "fc"]
    assert sorted((e.resource, e.phase) for e in shards) == [("d0", "bwd"), ("d0", "fwd"), ("d1", "bwd"), ("d1", "fwd")]
    assert any(e.op == "gather fc → out" and e.resource == "d0" for e in trace)


def test_a_bad_gene_names_the_op():
    devs = devices(2)
    cs = Split("channel", (0, 1))
    p = problem([layer("x", kind="input"), layer("relu", ["x"], kind="activation")], devs, [cs])
    with pytest.raises(InputError, match="'relu' .*cannot be split by channel"):
        p.evaluate(np.array([0, 2], dtype=np.int32))
    with pytest.raises(InputError, match="op 'relu'"):
        p.evaluate_many(np.array([[0, 2]], dtype=np.int32))


def test_a_table_changes_nothing_for_whole_ops():
    """The same unsharded placement, with and without a split table: the same result (the kernel's fast path)."""
    devs = devices(3, bandwidth=50.0, latency=0.1)
    ops = [layer("x", kind="input"), layer("a", ["x"], 1.0, 2.0, params=50.0), layer("b", ["x"], 2.0, 1.0),
           layer("c", ["a", "b"], 1.0, 1.0, params=30.0)]
    plain = problem(ops, devs, [])
    table = problem(ops, devs, search_splits(devs, ["channel", "batch"], 3))
    for seed in range(20):
        x = np.random.default_rng(seed).integers(0, 3, len(ops)).astype(np.int32)
        a, b = plain.simulate(x).result, table.simulate(x).result
        assert (a.makespan, a.transfers) == (b.makespan, b.transfers)
        assert np.array_equal(a.peak_memory, b.peak_memory) and np.array_equal(a.channel_busy, b.channel_busy)


@pytest.mark.parametrize("schedule", ["interleaved-1f1b", "zb-h1"])
@pytest.mark.parametrize("fast", [True, False])
def test_split_ops_are_refused_under_the_schedules_with_whole_device_stages(schedule, fast):
    """Interleaved 1F1B cuts each device's ops into chunks and ZB-H1 gates W tasks per stage: both need every op
    on one device. A split op is refused with its name and the schedule; whole ops still run."""
    from placement_core.simulate.schedules import schedule_settings
    dp = Split("batch", (0, 1))
    ops = [layer("x", kind="input"), layer("fc1", ["x"], 1.0, 2.0, params=10.0),
           layer("fc2", ["fc1"], 1.0, 2.0, params=10.0)]
    sim = schedule_settings(schedule, 3, micro_batches=2)
    p = Problem(Graph("g", ops, BATCH), devices(2), settings=sim, splits=(dp,), fast=fast)
    with pytest.raises(InputError, match=f"op 'fc1' is split .*the {schedule} schedule"):
        p.simulate(genes(p, {"x": 0, "fc1": dp, "fc2": 1}))
    with pytest.raises(InputError, match=schedule):
        p.evaluate_many(np.stack([genes(p, {"x": 0, "fc1": 0, "fc2": dp})]))
    assert p.simulate(genes(p, {"x": 0, "fc1": 0, "fc2": 1})).result.makespan > 0


# -- the kernel against the reference -----------------------------------------------------------------

@st.composite
def sharded_instances(draw):
    n = draw(st.integers(1, 9))
    nd = draw(st.integers(2, 4))
    profile = draw(st.sampled_from(["default", "exprimo-2020"]))
    devs = [Device(f"dev{j}", "gpu", 1e9, 1e12, 1e9, clock_hz=draw(st.sampled_from([None, 2.0])),
                   message_overhead=draw(st.sampled_from([0.0, 0.0, 0.2])))
            for j in range(nd)]
    ops = []
    for i in range(n):
        parents = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        kind = draw(st.sampled_from(["conv", "linear", "activation"])) if parents else "input"
        times = ({"gpu": {"fwd": draw(st.floats(0.0, 5.0)), "bwd": draw(st.floats(0.0, 5.0))}}
                 if draw(st.booleans()) else {})
        ops.append(Op(name=f"op{i}", kind=kind, inputs=tuple(f"op{p}" for p in parents),
                      output_bytes=draw(st.integers(0, 1000)), shape=(BATCH, draw(st.integers(1, 9))),
                      param_bytes=draw(st.sampled_from([0, 500])) if kind in ("conv", "linear") else 0,
                      fwd_flops=draw(st.sampled_from([0.0, 1e8, 2e9])), bwd_flops=draw(st.sampled_from([0.0, 3e9])),
                      mem_bytes=draw(st.sampled_from([0.0, 5e8])), times=times))
    k = draw(st.integers(1, 3))
    routes = [[] for _ in range(k)]
    for a in range(nd):
        for b in range(nd):
            if a != b:
                routes[draw(st.integers(0, k - 1))].append((f"dev{a}", f"dev{b}"))
    chans = [Channel(f"ch{c}", draw(st.floats(10.0, 1000.0)), draw(st.floats(0.0, 0.5)), tuple(r))
             for c, r in enumerate(routes)]
    dg = DeviceGraph("random", devs, chans)
    graph = Graph("random", ops, BATCH)
    table = list(search_splits(dg, ["channel", "batch"], nd))
    table.append(Split("batch", (nd - 1, 0), (3, 5)))  # uneven sizes, devices out of order
    # measured all-reduce curves for some batch splits' device sets, and resources the devices share
    groups = sorted({tuple(sorted(set(s.devices))) for s in table if s.dim == "batch" and len(set(s.devices)) > 1})
    collectives = []
    for g in groups:
        if draw(st.booleans()):
            t0 = draw(st.floats(0.0, 0.5))
            t1 = t0 + draw(st.floats(0.0, 2.0))
            busy = (t0 * 2, t1 * 2 + draw(st.floats(0.0, 1.0))) if draw(st.booleans()) else ()
            collectives.append(Collective(tuple(f"dev{j}" for j in g), "allreduce", (100.0, 600.0), (t0, t1), busy))
    dg = DeviceGraph("random", devs, chans, collectives=collectives, shared=draw(shared_resources(nd)))
    ok = applicable(graph, dg, table)
    placement = []
    for i in range(n):
        choices = list(range(nd)) + [nd + t for t in np.flatnonzero(ok[i])]
        placement.append(draw(st.sampled_from(choices)))
    schedule = draw(st.sampled_from(["thesis", "thesis", "gpipe", "1f1b"]))
    if schedule == "thesis":
        units = draw(st.integers(1, 2))
        sim = SimSettings(units=units, units_in_flight=draw(st.integers(1, units)),
                          forward_only=draw(st.booleans()))
    else:
        from placement_core.simulate.schedules import schedule_settings
        sim = schedule_settings(schedule, n, micro_batches=draw(st.integers(1, 3)))
    return graph, dg, np.array(placement, dtype=np.int32), sim, profile, tuple(table)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sharded_instances())
def test_kernel_equals_reference_on_random_sharded_placements(inst):
    graph, dg, placement, sim, profile, table = inst
    fast = Problem(graph, dg, settings=sim, profile=profile, comm_efficiency=1.0, splits=table)
    slow = Problem(graph, dg, settings=sim, profile=profile, comm_efficiency=1.0, splits=table, fast=False)
    require_kernel(fast)
    a, b = fast.simulate(placement).result, slow.simulate(placement).result
    assert a.makespan == pytest.approx(b.makespan, rel=1e-12, abs=1e-15)
    assert a.transfers == b.transfers
    for field in ("busy", "peak_memory", "channel_bytes", "channel_busy"):
        assert np.allclose(getattr(a, field), getattr(b, field), rtol=1e-12, atol=1e-12), field
    many = fast.evaluate_many(np.stack([placement, placement]))
    assert many[0] == many[1] == pytest.approx(fast.objective(a), rel=1e-12)
