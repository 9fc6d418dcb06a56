"""Schedules worked out by hand (times in seconds, bytes / (bytes/s) = seconds).

Every case runs on both simulators: the compiled kernel (``evaluate``) and the
Python reference (``trace=True``)."""

import numpy as np
import pytest
from helpers import devices, kernel_and_reference, op, problem


def both(p, placement):
    return kernel_and_reference(p, placement)


def spans(ref, kind="op"):
    return {(e.op, e.phase, e.batch): (e.start, e.end) for e in ref.trace if e.kind == kind}


def test_chain_split_over_two_devices_one_transfer_each_way():
    # a -> b on d0, c on d1. fwd 1 s, bwd 2 s; 100 B at 100 B/s = 1 s per transfer.
    p = problem([op("a"), op("b", ["a"]), op("c", ["b"])], devices(2))
    fast, ref = both(p, [0, 0, 1])
    ops = spans(ref)
    assert ops[("a", "fwd", 0)] == (0, 1)
    assert ops[("b", "fwd", 0)] == (1, 2)
    assert ops[("c", "fwd", 0)] == (3, 4)  # after b's output crossed the bus in [2, 3]
    assert ops[("c", "bwd", 0)] == (4, 6)
    assert ops[("b", "bwd", 0)] == (7, 9)  # after the gradient crossed in [6, 7]
    assert ops[("a", "bwd", 0)] == (9, 11)
    for r in (fast, ref):
        assert r.makespan == 11
        assert list(r.busy) == [6, 3]
        assert r.transfers == 2
        assert list(r.channel_bytes) == [200] and list(r.channel_busy) == [2]
        # d0 holds a's and b's outputs (200 B) until b's is sent; d1 a received copy, then a gradient.
        assert list(r.peak_memory) == [200, 100]


def test_two_branches_overlap():
    # s -> {x on d0 (2 s), y on d1 (3 s)} -> j on d0; forward only.
    ops = [op("s"), op("x", ["s"], fwd=2), op("y", ["s"], fwd=3), op("j", ["x", "y"])]
    p = problem(ops, devices(2), forward_only=True)
    fast, ref = both(p, [0, 0, 1, 0])
    s = spans(ref)
    assert s[("x", "fwd", 0)] == (1, 3)
    assert s[("y", "fwd", 0)] == (2, 5)  # overlaps x
    assert s[("j", "fwd", 0)] == (6, 7)
    assert fast.makespan == ref.makespan == 7
    # Serialising the branches on one device would take 1 + 2 + 3 + 1 = 7 as well; with y slower it shows:
    p2 = problem([op("s"), op("x", ["s"], fwd=4), op("y", ["s"], fwd=4), op("j", ["x", "y"])], devices(2),
                 forward_only=True)
    assert p2.simulate([0, 0, 1, 0]).result.makespan == 1 + 1 + 4 + 1 + 1  # s, send, y, send back, j
    assert p2.simulate([0, 0, 0, 0]).result.makespan == 10


@pytest.mark.parametrize("shared, makespan", [(True, 8), (False, 6)])
def test_two_transfers_contend_on_a_shared_channel(shared, makespan):
    # a on d0 and b on d2 (1 s each) feed c and e on d1; 300 B = 3 s per transfer.
    ops = [op("a", out=300), op("b", out=300), op("c", ["a"]), op("e", ["b"])]
    p = problem(ops, devices(3, shared=shared), forward_only=True)
    fast, ref = both(p, [0, 2, 1, 1])
    xfers = spans(ref, "transfer")
    if shared:
        assert xfers[("a", "fwd", 0)] == (1, 4)
        assert xfers[("b", "fwd", 0)] == (4, 7)  # waited for a's transfer
    else:
        assert xfers[("a", "fwd", 0)] == xfers[("b", "fwd", 0)] == (1, 4)
    assert fast.makespan == ref.makespan == makespan


@pytest.mark.parametrize("in_flight, makespan", [(2, 4), (1, 6)])
def test_two_batches_in_flight(in_flight, makespan):
    # a on d0 -> b on d1, forward only, 1 s each and 1 s transfer. With two in flight batch 1 starts
    # as soon as d0 (the input device) is idle, at t=1; with one it waits for batch 0 to finish.
    p = problem([op("a"), op("b", ["a"])], devices(2), forward_only=True, units=2, units_in_flight=in_flight)
    fast, ref = both(p, [0, 1])
    s = spans(ref)
    assert s[("a", "fwd", 1)] == ((1, 2) if in_flight == 2 else (3, 4))
    assert fast.makespan == ref.makespan == makespan
    assert fast.batch_time == makespan / 2


def test_tensor_with_two_consumers_on_one_remote_device_is_sent_once():
    ops = [op("a"), op("b", ["a"]), op("c", ["a"])]
    p = problem(ops, devices(2), forward_only=True)
    fast, ref = both(p, [0, 1, 1])
    for r in (fast, ref):
        assert r.transfers == 1
        assert list(r.channel_bytes) == [100]
        assert r.makespan == 4  # a [0,1], send [1,2], b [2,3], c [3,4]


def test_backward_gradients_to_one_device_travel_in_one_message():
    # a (100 B) and b (60 B) on d0 both feed c on d1. c's backward returns both input gradients to d0
    # in one message of 160 B.
    ops = [op("a"), op("b", out=60), op("c", ["a", "b"])]
    p = problem(ops, devices(2))
    fast, ref = both(p, [0, 0, 1])
    bwd = [e for e in ref.trace if e.kind == "transfer" and e.phase == "bwd"]
    assert [(e.op, e.bytes) for e in bwd] == [("c", 160.0)]
    assert (bwd[0].start, bwd[0].end) == pytest.approx((5.6, 7.2))  # a, b, 0.6 s send of b, c fwd, c bwd
    assert fast.transfers == ref.transfers == 3
    assert fast.makespan == ref.makespan == pytest.approx(7.2 + 2 + 2)  # then b's and a's backwards


def test_weight_update_follows_backward_on_the_same_device():
    # Default profile: update = 3 * params / mem_bandwidth = 3 * 1e9 / 1e9 = 3 s when not measured.
    ops = [op("a", params=1e9), op("b", ["a"])]
    p = problem(ops, devices(1))
    fast, ref = both(p, [0, 0])
    s = spans(ref)
    assert s[("a", "update", 0)] == (6, 9)  # a fwd 1, b fwd 1, b bwd 2, a bwd 2, then the update
    assert fast.makespan == 9
    # weights and their gradients stay resident: 2 * 1e9, plus a's 100 B activation
    assert fast.peak_memory[0] == 2e9 + 100


def test_latency_adds_to_every_transfer():
    p = problem([op("a"), op("b", ["a"])], devices(2, latency=0.5), forward_only=True)
    assert p.simulate([0, 1]).result.makespan == 1 + 1.5 + 1


def test_priority_order_replaces_fifo():
    # Two ready ops on one device: FIFO runs x first; a priority favouring y runs y first.
    from placement_core.simulate import SimSettings
    ops = [op("s", fwd=0), op("x", ["s"], fwd=1), op("y", ["s"], fwd=5), op("z", ["y"], fwd=1)]
    devs = devices(2)
    base = problem(ops, devs, forward_only=True)
    # y on d0, z on d1: y's output must reach d1 before z can run, so y should go first.
    fifo = base.simulate([0, 0, 0, 1], trace=True).result
    prio = np.zeros((1, 3, 4))
    prio[0, 0] = [0, 1, 0, 0]  # x after y
    pri = base.with_settings(SimSettings(forward_only=True, priority=prio))
    fast, ref = kernel_and_reference(pri, [0, 0, 0, 1])
    assert fifo.makespan == 1 + 5 + 1 + 1  # x, y, send, z
    assert fast.makespan == ref.makespan == 5 + 1 + 1  # y, send || x, z


def test_memory_timeline_of_a_chain_split_over_two_devices():
    # a (5 B of weights, 100 B out) -> b (40 B out) on d0, c (3 B of weights, 10 B out) on d1; fwd 1 s,
    # bwd 2 s, update 0.5 s for the ops with weights; 100 B/s, so b's output and its gradient take 0.4 s.
    # Schedule: a [0, 1], b [1, 2], b's output to d1 [2, 2.4], c [2.4, 3.4], c bwd [3.4, 5.4], gradient
    # to d0 [5.4, 5.8] while c's update runs [5.4, 5.9], b bwd [5.8, 7.8], a bwd [7.8, 9.8], a's update
    # [9.8, 10.3].
    # Memory (docs/design.md §5; default profile, so weights and their gradients: 2 copies), after each event:
    #   d0:  0: 10 (a's weights)     1: +100 a's output = 110     2: +40 b's output = 150
    #      2.4: b's output sent, freed = 110        5.8: + the 40 B gradient received = 150
    #      7.8: b's backward frees the gradient (-40) and a's output (-100), makes a's (+100) = 110
    #      9.8: a's backward consumes it = 10       10.3: a's update = 10
    #   d1:  0: 6 (c's weights)      2.4: + the received copy of b's output = 46
    #      3.4: c's forward stores nothing (no consumer) = 46
    #      5.4: c's backward frees the copy (-40) and makes b's gradient (+40) = 46
    #      5.8: the gradient has been sent = 6      5.9: c's update = 6
    from placement_core.model.graph import Op
    from placement_core.simulate.chrome import chrome_trace

    def timed(name, inputs, out, params):
        t = {"fwd": 1.0, "bwd": 2.0, **({"update": 0.5} if params else {})}
        return Op(name=name, inputs=tuple(inputs), output_bytes=out, param_bytes=params, times={"cpu": t})

    p = problem([timed("a", [], 100, 5), timed("b", ["a"], 40, 0), timed("c", ["b"], 10, 3)], devices(2))
    fast, ref = both(p, [0, 0, 1])
    expected = {0: [(0, 10), (1, 110), (2, 150), (2.4, 110), (5.8, 150), (7.8, 110), (9.8, 10), (10.3, 10)],
                1: [(0, 6), (2.4, 46), (3.4, 46), (5.4, 46), (5.8, 6), (5.9, 6)]}
    for d, series in expected.items():
        got = [(t, b) for t, dev, b in ref.memory_timeline if dev == d]
        assert got == [pytest.approx(x) for x in series], d
    times = [t for t, _, _ in ref.memory_timeline]
    assert times == sorted(times)  # in event order
    for r in (fast, ref):
        assert r.makespan == pytest.approx(10.3)
        assert list(r.peak_memory) == [150, 46]
    # The Chrome trace's memory counters are the same series (microseconds, bytes).
    counters = [e for e in chrome_trace(ref, ["d0", "d1"], ["bus"])["traceEvents"] if e["ph"] == "C"]
    for d, series in expected.items():
        got = [(e["ts"] / 1e6, e["args"]["bytes"]) for e in counters if e["name"] == f"memory d{d}"]
        assert got == [pytest.approx(x) for x in series]
