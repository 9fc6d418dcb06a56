"""Measured collectives and shared resources in the simulator (docs/formats.md "collectives" and "shared",
docs/e5.md): numbers worked out by hand, the kernel and the reference alike, and the device file's checks."""

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_core.base.errors import InputError
from placement_core.model.devices import (Channel, Collective, Device, DeviceGraph, SharedResource,
                                          devices_from_dict, devices_to_dict)
from placement_core.model.graph import Graph, Op
from placement_core.model.sharding import Split
from placement_core.problem import Problem
from placement_core.simulate import SimSettings

from helpers import examples, require_kernel

BATCH = 8


def op(name, inputs=(), fwd=0.0, bwd=0.0, params=0.0, kind="linear"):
    return Op(name=name, kind=kind, inputs=tuple(inputs), output_bytes=0.0, param_bytes=params, shape=(BATCH, 8),
              times={"cpu": {"fwd": fwd, "bwd": bwd, "update": 0.0}})


def graph_of(n=2, collectives=(), shared=()) -> DeviceGraph:
    devs = [Device(f"d{i}", "cpu", 1e9, 1e12, 1e9) for i in range(n)]
    pairs = tuple((a.name, b.name) for a in devs for b in devs if a.name != b.name)
    return DeviceGraph("test", devs, [Channel("bus", 100.0, 0.0, pairs)], collectives=collectives, shared=shared)


def run(ops, devs, genes, fast, splits=(), **settings):
    p = Problem(Graph("g", ops, BATCH), devs, settings=SimSettings(**settings), comm_efficiency=1.0,
                comp_efficiency=1.0, splits=tuple(splits), fast=fast)
    if fast:
        require_kernel(p)
    return p.simulate(np.array([g if isinstance(g, int) else len(devs) + p.splits.index(g) for g in genes],
                               dtype=np.int32)).result


CORE = SharedResource("cpu-cores", ("d0", "d1"), 1.0)


# -- shared resources ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("fast", [True, False])
def test_two_devices_sharing_one_core_take_twice_as_long(fast):
    """a on d0 and b on d1, 1 s each, at once: alone 1 s. Sharing one core (capacity 1, demand 1 each) both
    run at half pace the whole time (processor sharing): each ends at 2 s, each device busy 2 s."""
    ops = [op("a", fwd=1.0, kind="input"), op("b", fwd=1.0, kind="input")]
    alone = run(ops, graph_of(), [0, 1], fast, forward_only=True)
    shared = run(ops, graph_of(shared=[CORE]), [0, 1], fast, forward_only=True)
    assert alone.makespan == 1.0
    assert shared.makespan == 2.0 == 2 * alone.makespan
    assert list(shared.busy) == [2.0, 2.0]


@pytest.mark.parametrize("fast", [True, False])
def test_a_task_runs_at_full_pace_once_its_contender_ends(fast):
    """a (1 s) on d0 and b (0.5 s) on d1 start together on one core: both at half pace until b has done its
    0.5 s of work, at 1 s; a has 0.5 s left, alone at full pace: done at 1.5 s. (Charging a the slowdown it
    found at its start for its whole length, as the model before processor sharing did, gives 1 s or 2 s.)"""
    ops = [op("a", fwd=1.0, kind="input"), op("b", fwd=0.5, kind="input")]
    res = run(ops, graph_of(shared=[CORE]), [0, 1], fast, forward_only=True)
    assert res.makespan == pytest.approx(1.5, rel=1e-15)
    assert list(res.busy) == pytest.approx([1.5, 1.0], rel=1e-15)


@pytest.mark.parametrize("fast", [True, False])
def test_a_task_slows_when_a_contender_starts_beside_it(fast):
    """a (1 s) on d0 from 0; w (0.5 s) on d2, outside the resource, feeds b (1 s) on d1 (an empty message,
    instant). a alone for 0.5 s (half its work), then a and b at half pace: a's last 0.5 s take 1 s, to
    1.5 s; b has done 0.5 s of work by then and ends alone at 2 s."""
    ops = [op("a", fwd=1.0, kind="input"), op("w", fwd=0.5, kind="input"), op("b", ["w"], fwd=1.0)]
    res = run(ops, graph_of(3, shared=[CORE]), [0, 2, 1], fast, forward_only=True)
    assert res.makespan == pytest.approx(2.0, rel=1e-15)
    assert list(res.busy) == pytest.approx([1.5, 1.5, 0.5], rel=1e-15)


@pytest.mark.parametrize("fast", [True, False])
def test_two_chains_sharing_one_core_run_at_half_speed(fast):
    """Three 1 s ops in a chain on each device: both chains at half pace throughout: 6 s against 3 s alone."""
    ops = [op("a0", fwd=1.0, kind="input"), op("a1", ["a0"], fwd=1.0), op("a2", ["a1"], fwd=1.0),
           op("b0", fwd=1.0, kind="input"), op("b1", ["b0"], fwd=1.0), op("b2", ["b1"], fwd=1.0)]
    genes = [0, 0, 0, 1, 1, 1]
    assert run(ops, graph_of(), genes, fast, forward_only=True).makespan == 3.0
    assert run(ops, graph_of(shared=[CORE]), genes, fast, forward_only=True).makespan == 6.0


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("capacity, demand, expected", [(2.0, (), 1.0), (1.0, (0.5, 1.0), 1.5), (0.5, (), 4.0)])
def test_capacity_and_demand(fast, capacity, demand, expected):
    """Capacity 2: room for both, no slowdown. Demands 0.5 + 1 on capacity 1: both run 1.5 times slower.
    Capacity 0.5: (1 + 1) / 0.5, both 4 times slower."""
    ops = [op("a", fwd=1.0, kind="input"), op("b", fwd=1.0, kind="input")]
    res = SharedResource("cpu-cores", ("d0", "d1"), capacity, demand)
    assert run(ops, graph_of(shared=[res]), [0, 1], fast, forward_only=True).makespan == expected


@pytest.mark.parametrize("fast", [True, False])
def test_a_device_outside_the_resource_runs_at_its_own_speed(fast):
    ops = [op("a", fwd=1.0, kind="input"), op("b", fwd=1.0, kind="input"), op("c", fwd=1.0, kind="input")]
    res = run(ops, graph_of(3, shared=[CORE]), [0, 2, 1], fast, forward_only=True)
    assert res.makespan == 2.0 and list(res.busy) == [2.0, 2.0, 1.0]


# -- measured all-reduce ------------------------------------------------------------------------------------

DP = Split("batch", (0, 1))
CURVE = Collective(("d0", "d1"), "allreduce", (1000.0, 3000.0), (0.1, 0.3), (0.3, 0.7))


def test_the_curve_interpolates_to_the_hand_values():
    """Linear between the points, flat below the first, the last slope beyond the last."""
    assert CURVE.time(2000.0) == pytest.approx(0.2, rel=1e-15)
    assert CURVE.time(2000.0, busy=True) == pytest.approx(0.5, rel=1e-15)
    assert CURVE.time(500.0) == 0.1
    assert CURVE.time(4000.0) == pytest.approx(0.4, rel=1e-15)
    assert Collective(("d0", "d1"), "allreduce", (1000.0, 3000.0), (0.1, 0.3)).time(2000.0, busy=True) \
        == pytest.approx(0.2, rel=1e-15)  # no busy curve: the alone one


@pytest.mark.parametrize("fast", [True, False])
def test_a_declared_curve_replaces_the_ring(fast):
    """x -> fc (backward 1 s, 2000 weight bytes) split by batch over d0, d1: each shard's backward takes
    0.5 s; then the all-reduce from the curve at 2000 B, 0.2 s (nothing computes then: the alone curve),
    one message d0 -> d1 on the bus carrying the weights' bytes once. Without the curve: the ring, two
    messages of 2 (2 - 1) / 2 * 2000 = 2000 B at 100 B/s, one after the other on the one bus: 40 s."""
    ops = [op("x", kind="input"), op("fc", ["x"], bwd=1.0, params=2000.0)]
    res = run(ops, graph_of(collectives=[CURVE]), [DP, DP], fast, splits=[DP])
    assert res.makespan == pytest.approx(0.5 + 0.2, rel=1e-12)
    assert res.transfers == 1 and list(res.channel_bytes) == [2000.0]
    assert run(ops, graph_of(), [DP, DP], fast, splits=[DP]).makespan == pytest.approx(0.5 + 40.0, rel=1e-12)


@pytest.mark.parametrize("fast", [True, False])
def test_an_all_reduce_during_a_backward_takes_the_busy_curve(fast):
    """x -> fc1 (backward 2 s) -> fc2 (backward 1 s), all split by batch: the two ops' 2000 B each make one
    bucket of 4000 B, 0.4 s alone and 0.9 s busy by the curves' last slopes, so each op pays half of it.
    fc2's shards end at 0.5 s, when fc1's start (until 1.5 s), so fc2's share takes the busy curve: 0.45 s,
    [0.5, 0.95]. fc1's starts at 1.5 s with nothing computing: 0.2 s, done at 1.7 s."""
    ops = [op("x", kind="input"), op("fc1", ["x"], bwd=2.0, params=2000.0), op("fc2", ["fc1"], bwd=1.0,
                                                                             params=2000.0)]
    res = run(ops, graph_of(collectives=[CURVE]), [DP, DP, DP], fast, splits=[DP])
    assert res.makespan == pytest.approx(1.7, rel=1e-12)
    assert res.channel_busy[0] == pytest.approx(0.45 + 0.2, rel=1e-12)


@pytest.mark.parametrize("fast", [True, False])
def test_an_all_reduce_speeds_up_when_the_ranks_stop_computing(fast):
    """x -> fc1 (backward 0.4 s, no weights) -> fc2 (backward 1 s, 2000 weight bytes), split by batch: fc2's
    shards [0, 0.5], then its all-reduce (0.2 s alone, 0.5 s busy at 2000 B: pace 2.5) beside fc1's
    shards [0.5, 0.7]: by 0.7 it has done 0.2 / 2.5 = 0.08 s of its 0.2 s; the last 0.12 s alone: 0.82."""
    ops = [op("x", kind="input"), op("fc1", ["x"], bwd=0.4), op("fc2", ["fc1"], bwd=1.0, params=2000.0)]
    res = run(ops, graph_of(collectives=[CURVE]), [DP, DP, DP], fast, splits=[DP])
    assert res.makespan == pytest.approx(0.82, rel=1e-12)
    assert res.channel_busy[0] == pytest.approx(0.32, rel=1e-12)


@pytest.mark.parametrize("fast", [True, False])
def test_a_curve_for_another_group_does_not_apply(fast):
    ops = [op("x", kind="input"), op("fc", ["x"], bwd=1.0, params=2000.0)]
    other = Collective(("d0", "d2"), "allreduce", (1000.0, 3000.0), (0.1, 0.3))
    gather = Collective(("d0", "d1"), "allgather", (1000.0, 3000.0), (0.1, 0.3))
    res = run(ops, graph_of(3, collectives=[other, gather]), [DP, DP], fast, splits=[DP])
    plain = run(ops, graph_of(3), [DP, DP], fast, splits=[DP])
    assert res.makespan == plain.makespan and res.transfers == plain.transfers == 2


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("coll, expected", [(1.0, 0.9), (0.0, 0.8)])
def test_an_all_reduce_on_the_ranks_cores_slows_the_compute_beside_it(fast, coll, expected):
    """x -> f1 (backward 0.4 s) -> f2 (0.2 s) -> fc (1 s, 2000 weight bytes), all split by batch over d0, d1,
    which share a resource of capacity 2 (no slowdown from computing together). Backward: fc's shards
    [0, 0.5]; at 0.5 f2's shards (0.1 s each) and fc's all-reduce (0.1 s alone, 0.2 s busy: pace 2) start.
    With a collective demand of 1 each device counts both ranks and the all-reduce on both: 4 / 2, so f2's
    shards take 0.2 s, to 0.7, when the all-reduce (busy throughout) ends too; f1's shards then run alone,
    [0.7, 0.9]. Without the demand: f2 [0.5, 0.6], f1 [0.6, 0.8]; the ranks compute throughout the
    all-reduce, busy pace, [0.5, 0.7], either way."""
    ops = [op("x", kind="input"), op("f1", ["x"], bwd=0.4), op("f2", ["f1"], bwd=0.2),
           op("fc", ["f2"], bwd=1.0, params=2000.0)]
    curve = Collective(("d0", "d1"), "allreduce", (1000.0, 3000.0), (0.05, 0.15), (0.1, 0.3))
    res = SharedResource("cpu-cores", ("d0", "d1"), 2.0, collective_demand=coll)
    out = run(ops, graph_of(collectives=[curve], shared=[res]), [DP] * 4, fast, splits=[DP])
    assert out.makespan == pytest.approx(expected, rel=1e-12)
    assert list(out.busy) == pytest.approx([expected, expected], rel=1e-12)
    assert out.channel_busy[0] == pytest.approx(0.2, rel=1e-12)
    plain = run(ops, graph_of(collectives=[curve]), [DP] * 4, fast, splits=[DP])
    assert plain.makespan == pytest.approx(0.8, rel=1e-12)


# -- the device file ----------------------------------------------------------------------------------------

def good() -> dict:
    return devices_to_dict(graph_of(collectives=[CURVE], shared=[CORE]))


def test_the_new_fields_read_and_write_back():
    g = devices_from_dict(good())
    assert g.collectives == (CURVE,) and g.shared == (CORE,)
    assert devices_to_dict(g) == good()
    data = good()
    data["shared"][0]["collective_demand"] = 0.5
    assert devices_from_dict(data).shared[0].collective_demand == 0.5
    assert devices_to_dict(devices_from_dict(data)) == data
    assert "collectives" not in devices_to_dict(graph_of()) and "shared" not in devices_to_dict(graph_of())


@pytest.mark.parametrize("edit, field, words", [
    (lambda d: d["collectives"][0].update(sizes=[3000, 1000]), "collectives[0].sizes[1]", "increase"),
    (lambda d: d["collectives"][0].update(seconds=[0.1]), "collectives[0].seconds", "1 entries for 2 sizes"),
    (lambda d: d["collectives"][0].update(seconds=[0.3, 0.1]), "collectives[0].seconds[1]", "less than"),
    (lambda d: d["collectives"][0].update(busy_seconds=[0.3, -1]), "collectives[0].busy_seconds[1]", "negative"),
    (lambda d: d["collectives"][0].update(sizes=[1000]), "collectives[0].sizes", "2 to 64 sizes"),
    (lambda d: d["collectives"][0].update(devices=["d0", "gpu9"]), "collectives[0].devices[1]", "unknown device"),
    (lambda d: d["collectives"][0].update(devices=["d0"]), "collectives[0].devices", "2 to 64 devices"),
    (lambda d: d["collectives"][0].update(op="broadcast"), "collectives[0].op", "unknown collective"),
    (lambda d: d["collectives"][0].pop("sizes"), "collectives[0].sizes", "missing"),
    (lambda d: d["collectives"].append(copy.deepcopy(d["collectives"][0])), "collectives[1]", "twice"),
    (lambda d: d["shared"][0].update(capacity=0), "shared[0].capacity", "positive"),
    (lambda d: d["shared"][0].update(capacity=-2), "shared[0].capacity", "positive"),
    (lambda d: d["shared"][0].update(devices=["d0", "cpu7"]), "shared[0].devices[1]", "unknown device"),
    (lambda d: d["shared"][0].update(devices=["d0", "d0"]), "shared[0].devices[1]", "twice"),
    (lambda d: d["shared"][0].update(demand=[1.0]), "shared[0].demand", "1 entries for 2 devices"),
    (lambda d: d["shared"][0].update(demand=[1.0, 0]), "shared[0].demand[1]", "positive"),
    (lambda d: d["shared"][0].update(cores=4), "shared[0]", "unknown field"),
    (lambda d: d["shared"][0].update(collective_demand=-1), "shared[0].collective_demand", "negative"),
    (lambda d: d["shared"][0].update(collective_demand="1"), "shared[0].collective_demand", "number"),
])
def test_bad_fields_name_the_field_and_the_fix(edit, field, words):
    data = good()
    edit(data)
    with pytest.raises(InputError) as err:
        devices_from_dict(data, source="devs.json")
    assert err.value.field == field
    assert words in err.value.problem
    assert err.value.fix


# -- calibration's figures into the device graph ------------------------------------------------------------

def test_calibrated_curves_and_contention_enter_the_device_graph():
    """Two ranks' medians: the curve keeps the slower rank per size, made non-decreasing (rank 1's dip at
    2000 B is noise); slowdowns 2.0 and 1.8 (median 1.9) make a resource of capacity 2 / 1.9 for both."""
    from placement_core.analysis.calibration_collectives import with_collectives
    from placement_core.analysis.calibration_fit import Calibration
    cal = Calibration(graph_of(), {}, {})
    events = [{"event": "collective", "op": "allreduce", "device": f"d{r}", "devices": ["d0", "d1"],
               "sizes": [1000, 2000, 4000], "seconds": s, "busy_seconds": b}
              for r, (s, b) in enumerate([([0.1, 0.2, 0.4], [0.2, 0.3, 0.8]), ([0.15, 0.12, 0.5], [0.1, 0.4, 0.7])])]
    events.append({"event": "collective", "op": "reducescatter", "device": "d0", "error": "not supported"})
    contention = [{"device": "d0", "alone_s": 1.0, "together_s": 2.0}, {"device": "d1", "alone_s": 1.0,
                                                                         "together_s": 1.8}]
    out = with_collectives(cal, events, contention)
    (curve,) = out.devices.collectives
    assert curve.op == "allreduce" and curve.devices == ("d0", "d1") and curve.sizes == (1000.0, 2000.0, 4000.0)
    assert curve.seconds == (0.15, 0.2, 0.5) and curve.busy_seconds == (0.2, 0.4, 0.8)
    (res,) = out.devices.shared
    assert res.devices == ("d0", "d1") and res.capacity == pytest.approx(2 / 1.9, rel=1e-12)
    # the all-reduce 0.8 s busy against 0.5 s alone at 4000 B: b = 1.6, a collective demand of 1 / 0.6
    assert res.collective_demand == pytest.approx(1 / 0.6, rel=1e-12)
    assert out.report["contention"]["slowdown"] == pytest.approx(1.9)
    assert out.report["collective_errors"] == {"reducescatter": "not supported"}
    # the stored file reads back as the same graph
    assert devices_from_dict(devices_to_dict(out.devices)).collectives == out.devices.collectives
    # ranks that do not slow each other: nothing shared
    calm = [{"device": "d0", "alone_s": 1.0, "together_s": 1.01}, {"device": "d1", "alone_s": 1.0, "together_s": 1.0}]
    assert with_collectives(cal, [], calm).devices.shared == ()
    # ... but whose all-reduce a computing rank slows twofold: they share the cores with gloo, at capacity 2
    (res,) = with_collectives(cal, events[:2], calm).devices.shared
    assert res.capacity == 2.0 and res.collective_demand == pytest.approx(1 / 0.6, rel=1e-12)
    doubled = [dict(ev, busy_seconds=[2 * x for x in ev["seconds"]]) for ev in events[:2]]
    assert with_collectives(cal, doubled, calm).devices.shared[0].collective_demand == pytest.approx(1.0)
    # an all-reduce that computing ranks barely slow (b = 1.02) takes no share: nothing declared
    even = [dict(ev, busy_seconds=[1.02 * x for x in ev["seconds"]]) for ev in events[:2]]
    assert with_collectives(cal, even, calm).devices.shared == ()


@st.composite
def data_parallel_chains(draw):
    """A chain of 2-8 layers, all split by batch over 2-3 devices that share their cores with a measured
    all-reduce: the case where the backward starts tasks while an all-reduce runs (random times)."""
    nd = draw(st.integers(2, 3))
    n = draw(st.integers(2, 8))
    ops = [op("x", kind="input")] + [
        op(f"l{i}", [f"l{i - 1}" if i else "x"], fwd=draw(st.floats(0.0, 1.0)), bwd=draw(st.floats(0.0, 2.0)),
           params=draw(st.sampled_from([0.0, 500.0, 2000.0]))) for i in range(n)]
    names = tuple(f"d{i}" for i in range(nd))
    t0 = draw(st.floats(0.0, 0.5))
    curve = Collective(names, "allreduce", (100.0, 3000.0), (t0, t0 + draw(st.floats(0.01, 1.0))),
                       (2 * t0, 2 * t0 + draw(st.floats(0.01, 2.0))))
    res = SharedResource("cpu-cores", names, draw(st.sampled_from([1.0, 2.0, 3.0])),
                         collective_demand=draw(st.sampled_from([0.5, 1.0, 2.0])))
    return ops, graph_of(nd, collectives=[curve], shared=[res]), Split("batch", tuple(range(nd)))


@settings(max_examples=examples(100), deadline=None)
@given(data_parallel_chains())
def test_kernel_equals_reference_with_collectives_on_shared_cores(inst):
    ops, devs, split = inst
    fast, slow = (run(ops, devs, [split] * len(ops), f, splits=[split]) for f in (True, False))
    assert fast.makespan == pytest.approx(slow.makespan, rel=1e-12, abs=1e-15)
    assert np.allclose(fast.busy, slow.busy, rtol=1e-12, atol=1e-12)
    assert np.allclose(fast.channel_busy, slow.channel_busy, rtol=1e-12, atol=1e-12)
