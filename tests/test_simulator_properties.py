"""Invariants of the simulator on random DAGs, random device graphs and random placements.

Every instance draws per-device message overheads (none, some devices, every device), channels with or
without a measured transfer curve, a cost profile (the default roofline, or ``exprimo-2020`` with its one-clock-cycle
minimum per transfer and per cost term, gradients sent back to the input op and no weight update) and
the simulator settings: random ones (units in flight, admission, priorities, stage caps, per-step
updates) or those of the thesis', GPipe's, 1F1B's, interleaved 1F1B's (virtual stages from the placement's
runs or cut from single runs) and ZB-H1's schedules (backwards split into B and W by each op's share, given
in the file or by default).
"""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from helpers import examples, require_kernel

from placement_core.model.devices import Channel, Device, DeviceGraph, SharedResource
from placement_core.model.graph import Graph, Op
from placement_core.problem import Problem
from placement_core.simulate import ADMIT_EAGER, SimSettings, reference
from placement_core.simulate.schedules import schedule_settings


@st.composite
def curves(draw):
    """A measured transfer curve: 2 to 5 points over 0..1500 bytes (messages reach 1000), times rising."""
    k = draw(st.integers(2, 5))
    sizes = sorted(float(b) for b in draw(st.lists(st.integers(0, 1500), min_size=k, max_size=k, unique=True)))
    steps = draw(st.lists(st.floats(0.0, 2.0), min_size=k - 1, max_size=k - 1))
    steps[-1] = max(steps[-1], 1e-3)  # the last segment rises (its slope is the bandwidth beyond)
    times = np.cumsum([draw(st.floats(0.0, 0.5))] + steps).tolist()
    return tuple(zip(sizes, times))


@st.composite
def shared_resources(draw, nd: int):
    """Resources the devices share (docs/formats.md "shared"): none on most instances; else one or two over
    random groups of devices, capacities below, at and above the demand of one device, demands 1 or given,
    and measured all-reduces taking a share or none."""
    if nd < 2 or draw(st.integers(0, 2)):
        return ()
    out = []
    for r in range(draw(st.integers(1, 2))):
        members = draw(st.lists(st.integers(0, nd - 1), min_size=2, max_size=nd, unique=True))
        demand = tuple(draw(st.sampled_from([0.5, 1.0, 2.0])) for _ in members) if draw(st.booleans()) else ()
        out.append(SharedResource(f"r{r}", tuple(f"dev{m}" for m in members),
                                  draw(st.sampled_from([0.5, 1.0, 1.5, 3.0])), demand,
                                  collective_demand=draw(st.sampled_from([0.0, 0.0, 0.5, 1.0]))))
    return tuple(out)


@st.composite
def instances(draw, shared: bool = False):
    """``shared``: the devices may share resources (only the kernel = reference test: the other invariants,
    such as back-to-back times on one device, hold without contention)."""
    n = draw(st.integers(1, 12))
    nd = draw(st.integers(1, 4))
    profile = draw(st.sampled_from(["default", "exprimo-2020"]))
    # exprimo-2020: every transfer and every non-zero cost term lasts at least one clock cycle of the
    # device (1/clock_hz s; a slow clock makes that minimum matter at these sizes).
    # Message overhead per device (send and receive tasks): none on most instances, some on others.
    overhead = draw(st.sampled_from(["none", "none", "some", "all"]))
    devs = [Device(f"dev{j}", "cpu", 1e9, 1e12, 1e9, clock_hz=draw(st.sampled_from([None, 0.5, 2.0, 20.0])),
                   message_overhead=0.0 if overhead == "none" else
                   draw(st.sampled_from([0.0, 0.1, 0.25, 1.0]) if overhead == "some" else st.floats(0.01, 1.0)))
            for j in range(nd)]
    ops = []
    for i in range(n):
        parents = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        # Measured times, or none (then the profile's formula: FLOPs, memory traffic, clock cycles).
        times = ({f"dev{j}": {"fwd": draw(st.floats(0.0, 5.0)), "bwd": draw(st.floats(0.0, 5.0))}
                  for j in range(nd)} if draw(st.booleans()) else {})
        # A source may be the network's input: no gradient goes back to it, except under exprimo-2020.
        kind = draw(st.sampled_from(["input", "other"])) if not parents else "other"
        bwd = draw(st.sampled_from([0.0, 3e9]))
        # the weight-gradient (W) part of the backward: the default rule (None) or a share of it
        w = draw(st.sampled_from([None, None, 0.0, 1e9, bwd]))
        ops.append(Op(name=f"op{i}", kind=kind, inputs=tuple(f"op{p}" for p in parents),
                      output_bytes=draw(st.integers(0, 1000)), param_bytes=draw(st.sampled_from([0, 0, 500])),
                      fwd_flops=draw(st.sampled_from([0.0, 1e8, 2e9])), bwd_flops=bwd,
                      mem_bytes=draw(st.sampled_from([0.0, 5e8])), times=times,
                      bwd_weight_flops=None if w is None else min(w, bwd)))
    # channels: every ordered pair on one of k channels
    k = draw(st.integers(1, 3))
    routes = [[] for _ in range(k)]
    for a in range(nd):
        for b in range(nd):
            if a != b:
                routes[draw(st.integers(0, k - 1))].append((f"dev{a}", f"dev{b}"))
    chans = [Channel(f"ch{c}", draw(st.floats(10.0, 1000.0)), draw(st.floats(0.0, 0.5)), tuple(r),
                     transfer_curve=draw(curves()) if draw(st.integers(0, 2)) == 0 else ())
             for c, r in enumerate(routes)]
    placement = draw(st.lists(st.integers(0, nd - 1), min_size=n, max_size=n))
    schedule = draw(st.sampled_from(["random", "random", "thesis", "gpipe", "1f1b", "interleaved-1f1b",
                                     "interleaved-1f1b", "zb-h1", "zb-h1"]))
    forward_only = draw(st.booleans())
    if schedule == "random":
        units = draw(st.integers(1, 3))
        priority = None
        if draw(st.booleans()):
            priority = np.array(draw(st.lists(st.integers(0, 3), min_size=units * 3 * n,
                                              max_size=units * 3 * n)), dtype=float)
        sim = SimSettings(units=units, units_in_flight=draw(st.integers(1, units)), forward_only=forward_only,
                          admission=draw(st.sampled_from([0, ADMIT_EAGER])),
                          update_per_step=draw(st.booleans()), priority=priority,
                          stage_caps=draw(st.booleans()))
    elif schedule == "thesis":
        batches = draw(st.integers(1, 3))
        sim = schedule_settings("thesis", n, batches=batches, in_flight=draw(st.integers(1, batches)),
                                forward_only=forward_only)
    else:
        v = draw(st.integers(1, 3)) if schedule == "interleaved-1f1b" else 1
        sim = schedule_settings(schedule, n, micro_batches=draw(st.integers(1, 5)), forward_only=forward_only,
                                virtual_stages=v)
    dg = DeviceGraph("random", devs, chans, shared=draw(shared_resources(nd)) if shared else ())
    return Graph("random", ops), dg, np.array(placement, dtype=np.int32), sim, profile


def make(graph, devs, sim, profile="default"):
    return Problem(graph, devs, settings=sim, profile=profile, comm_efficiency=1.0)


common = settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@common
@given(instances(shared=True))
def test_kernel_matches_reference(inst):
    graph, devs, placement, sim, profile = inst
    p = make(graph, devs, sim, profile)
    require_kernel(p)
    fast = p.simulate(placement).result
    ref = p.simulate(placement, trace=True).result
    assert fast.makespan == ref.makespan
    assert fast.batch_time == ref.batch_time
    assert np.array_equal(fast.busy, ref.busy)
    assert np.array_equal(fast.peak_memory, ref.peak_memory)
    assert np.array_equal(fast.channel_bytes, ref.channel_bytes)
    assert np.array_equal(fast.channel_busy, ref.channel_busy)
    assert fast.transfers == ref.transfers
    # The reference with and without its trace: the same run.
    plain = reference.simulate(p.compiled, placement, p.settings)
    for field in ("makespan", "busy", "peak_memory", "channel_bytes", "channel_busy", "transfers"):
        assert np.array_equal(getattr(plain, field), getattr(ref, field)), field
    # The trace accounts for every busy second: ops, sends and receives on the device rows, transfers on the
    # channel rows; one send per message from a device with an overhead, one receive per message to one.
    check_trace(p, ref)


def check_trace(p, res):
    """A traced run's events against its totals: busy time, channel time, messages and their overheads."""
    names, chans = p.devices.names, [c.name for c in p.devices.channels]
    ovh = {d.name: d.message_overhead for d in p.devices.devices}
    kinds = {e.kind for e in res.trace}
    assert kinds <= {"op", "transfer", "send", "recv"}
    tol = 1e-9 * max(1.0, res.makespan)
    for d, name in enumerate(names):
        events = sorted((e for e in res.trace if e.resource == name), key=lambda e: (e.start, e.end))
        assert all(e.kind != "transfer" for e in events)
        assert abs(sum(e.end - e.start for e in events) - res.busy[d]) <= tol * (1 + len(events))
        for a, b in zip(events, events[1:]):  # one task at a time
            assert b.start >= a.end - tol
    for c, name in enumerate(chans):
        events = [e for e in res.trace if e.resource == name]
        assert all(e.kind == "transfer" for e in events)
        assert abs(sum(e.end - e.start for e in events) - res.channel_busy[c]) <= tol * (1 + len(events))
    transfers = [e for e in res.trace if e.kind == "transfer"]
    assert len(transfers) == res.transfers
    for kind, end in (("send", "src"), ("recv", "dst")):
        over = {(e.op, e.batch, e.phase, e.src, e.dst): e for e in res.trace if e.kind == kind}
        assert len(over) == sum(1 for e in res.trace if e.kind == kind)  # one per message at most
        expected = [x for x in transfers if ovh[getattr(x, end)] > 0]
        assert len(over) == len(expected)
        for x in expected:
            e = over[(x.op, x.batch, x.phase, x.src, x.dst)]
            assert e.resource == getattr(x, end) and e.bytes == x.bytes
            if p.devices.shared:  # a send or receive task runs slower while devices sharing a resource work
                assert (e.end - e.start) >= ovh[e.resource] - tol
            else:
                assert abs((e.end - e.start) - ovh[e.resource]) <= tol
            assert (e.end <= x.start + tol) if kind == "send" else (e.start >= x.end - tol)


@common
@given(instances())
def test_makespan_lower_bounds(inst):
    graph, devs, placement, sim, profile = inst
    p = make(graph, devs, sim, profile)
    r = p.simulate(placement).result
    fwd_min = p.costs.fwd.min(axis=1)
    bwd_min = 0 * fwd_min if sim.forward_only else p.costs.bwd.min(axis=1)
    upd_min = 0 * fwd_min if sim.forward_only else p.costs.update.min(axis=1)
    # Longest path, each op at its fastest device: forward along the path, backward back along it.
    longest = np.zeros(len(graph))
    for i in range(len(graph)):
        longest[i] = fwd_min[i] + bwd_min[i] + max((longest[q] for q in graph.parents[i]), default=0.0)
    eps = 1e-9 * max(1.0, r.makespan)
    assert r.makespan >= longest.max() - eps
    # Total work spread perfectly over every device.
    work = sim.units * (fwd_min.sum() + bwd_min.sum()) + (1 if sim.update_per_step else sim.units) * upd_min.sum()
    assert r.makespan >= work / len(devs) - eps
    # No device is busy longer than the step.
    assert (r.busy <= r.makespan + eps).all()


@common
@given(instances())
def test_deterministic_and_independent_of_names(inst):
    graph, devs, placement, sim, profile = inst
    p = make(graph, devs, sim, profile)
    a = p.simulate(placement).result
    b = p.simulate(placement).result
    renamed = graph.renamed({op.name: f"zz_{len(graph) - i}_{op.name[::-1]}" for i, op in enumerate(graph.ops)})
    c = make(renamed, devs, sim, profile).simulate(placement, trace=True).result
    assert a.makespan == b.makespan == c.makespan
    assert np.array_equal(a.peak_memory, c.peak_memory)


@common
@given(instances())
def test_peak_memory_holds_the_weights(inst):
    graph, devs, placement, sim, profile = inst
    p = make(graph, devs, sim, profile)
    r = p.simulate(placement).result
    copies = p.costs.weight_copies
    weights = np.zeros(len(devs))
    for i, o in enumerate(graph.ops):
        weights[placement[i]] += copies * o.param_bytes
    assert (r.peak_memory >= weights).all()


@common
@given(instances())
def test_everything_on_one_device_runs_back_to_back(inst):
    graph, devs, placement, sim, profile = inst
    placement = np.zeros(len(graph), dtype=np.int32)
    p = make(graph, devs, SimSettings(forward_only=sim.forward_only), profile)
    r = p.simulate(placement).result
    total = p.costs.fwd[:, 0].sum()
    if not sim.forward_only:
        total += p.costs.bwd[:, 0].sum() + p.costs.update[:, 0].sum()
    assert r.makespan == np.float64(r.busy[0])
    assert abs(r.makespan - total) <= 1e-9 * max(total, 1)
    assert r.transfers == 0
