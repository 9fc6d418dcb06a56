"""Message overhead (a device's ``message_overhead``, LogP's "o") worked out by hand.

A message from s to d runs a send task of o_s on s before it queues on the channel, and a receive task of
o_d on d after it arrives, before its consumers may run. Times in seconds; every figure below is a binary
fraction, so the sums are exact. Every case runs on both simulators: the compiled kernel and the Python
reference (``trace=True``).
"""

from dataclasses import replace

import numpy as np
from helpers import devices, kernel_and_reference, op, problem

from placement_core.model.devices import DeviceGraph
from placement_core.model.graph import Graph, Op
from placement_core.problem import Problem
from placement_core.simulate import SimSettings


def with_overhead(devs: DeviceGraph, *overheads: float) -> DeviceGraph:
    return DeviceGraph(devs.name, [replace(d, message_overhead=o) for d, o in zip(devs.devices, overheads)],
                       list(devs.channels))


def both(p, placement):
    return kernel_and_reference(p, placement)


def spans(ref, kind="op"):
    return {(e.op, e.phase, e.batch): (e.start, e.end) for e in ref.trace if e.kind == kind}


def timed(name, inputs, fwd, bwd, update, params=8.0):
    return Op(name=name, inputs=tuple(inputs), output_bytes=100, param_bytes=params,
              times={"cpu": {"fwd": fwd, "bwd": bwd, "update": update}})


CHAIN = [timed("a", [], 1.0, 2.0, 0.5), timed("b", ["a"], 3.0, 4.0, 0.75)]


def test_a_chain_over_two_devices_pays_each_overhead_once_per_message():
    # a on d0 -> b on d1. o_0 = 0.25, o_1 = 0.5; link: latency 0.125 + 100 B at 100 B/s = 1.125 s.
    #   a fwd [0, 1] · send on d0 [1, 1.25] · transfer [1.25, 2.375] · receive on d1 [2.375, 2.875]
    #   b fwd [2.875, 5.875] · b bwd [5.875, 9.875]
    #   send of b's input gradient on d1 [9.875, 10.375] (queued before b's update, which b's backward
    #   readies after its message) · b update [10.375, 11.125]
    #   transfer [10.375, 11.5] · receive on d0 [11.5, 11.75] · a bwd [11.75, 13.75] · a update [13.75, 14.25]
    # makespan = 1 + 0.25 + 1.125 + 0.5 + 3 + 4 + 0.5 + 1.125 + 0.25 + 2 + 0.5 = 14.25
    devs = with_overhead(devices(2, latency=0.125), 0.25, 0.5)
    p = problem(CHAIN, devs)
    fast, ref = both(p, [0, 1])
    ops, xfers = spans(ref), spans(ref, "transfer")
    sends, recvs = spans(ref, "send"), spans(ref, "recv")
    assert ops[("a", "fwd", 0)] == (0, 1)
    assert sends[("a", "fwd", 0)] == (1, 1.25)
    assert xfers[("a", "fwd", 0)] == (1.25, 2.375)
    assert recvs[("a", "fwd", 0)] == (2.375, 2.875)
    assert ops[("b", "fwd", 0)] == (2.875, 5.875)
    assert ops[("b", "bwd", 0)] == (5.875, 9.875)
    assert sends[("b", "bwd", 0)] == (9.875, 10.375)
    assert ops[("b", "update", 0)] == (10.375, 11.125)
    assert xfers[("b", "bwd", 0)] == (10.375, 11.5)
    assert recvs[("b", "bwd", 0)] == (11.5, 11.75)
    assert ops[("a", "bwd", 0)] == (11.75, 13.75)
    assert ops[("a", "update", 0)] == (13.75, 14.25)
    for r in (fast, ref):
        assert r.makespan == 1 + 0.25 + 1.125 + 0.5 + 3 + 4 + 0.5 + 1.125 + 0.25 + 2 + 0.5 == 14.25
        # busy time includes the overhead: d0 = 1 + 0.25 + 0.25 + 2 + 0.5, d1 = 0.5 + 3 + 4 + 0.5 + 0.75
        assert list(r.busy) == [4.0, 8.75]
        assert r.transfers == 2
        assert list(r.channel_bytes) == [200] and list(r.channel_busy) == [2.25]
    # without overhead the same step is 1.5 s shorter: 2 messages x (0.25 + 0.5)
    assert problem(CHAIN, devices(2, latency=0.125)).simulate([0, 1]).result.makespan == 14.25 - 1.5
    # the trace's send and receive tasks sit on the device rows and name the message
    send = next(e for e in ref.trace if e.kind == "send" and e.phase == "fwd")
    assert (send.resource, send.src, send.dst, send.bytes, send.batch) == ("d0", "d0", "d1", 100.0, 0)
    recv = next(e for e in ref.trace if e.kind == "recv" and e.phase == "bwd")
    assert (recv.op, recv.resource, recv.src, recv.dst, recv.bytes) == ("b", "d0", "d1", "d0", 100.0)


def test_memory_moves_when_the_message_arrives_not_when_it_is_received():
    # Same chain. d1 holds b's weights and their gradient (2 x 8 B) from 0 and the received copy of a's
    # output from its arrival at 2.375, while the receive task still runs [2.375, 2.875].
    p = problem(CHAIN, with_overhead(devices(2, latency=0.125), 0.25, 0.5))
    ref = p.simulate([0, 1], trace=True).result
    d1 = [(t, b) for t, d, b in ref.memory_timeline if d == 1]
    assert d1[:2] == [(0.0, 16.0), (2.375, 116.0)]
    d0 = [(t, b) for t, d, b in ref.memory_timeline if d == 0]
    assert (2.375, 16.0) in d0  # the sender's copy is released on arrival too
    assert list(p.simulate([0, 1]).result.peak_memory) == list(ref.peak_memory) == [116.0, 116.0]


def test_a_send_task_queues_behind_a_ready_op_on_its_device():
    # Forward only. a on d0 feeds c on d0 (2 s) and b on d1 (1 s); 100 B at 100 B/s = 1 s; o_0 = 0.5.
    # a's end readies c first (local consumers), then queues the send task (FIFO): c [1, 3], send [3, 3.5],
    # transfer [3.5, 4.5], b [4.5, 5.5]. Without overhead the transfer overlaps c: [1, 2], b [2, 3], so the
    # overhead costs 2.5 s here: 2 s waiting behind c plus the 0.5 s send itself.
    ops = [op("a"), op("b", ["a"], fwd=1), op("c", ["a"], fwd=2)]
    p = problem(ops, with_overhead(devices(2), 0.5, 0.0), forward_only=True)
    fast, ref = both(p, [0, 1, 0])
    assert spans(ref)[("c", "fwd", 0)] == (1, 3)
    assert spans(ref, "send")[("a", "fwd", 0)] == (3, 3.5)
    assert spans(ref, "transfer")[("a", "fwd", 0)] == (3.5, 4.5)
    assert spans(ref)[("b", "fwd", 0)] == (4.5, 5.5)
    assert not spans(ref, "recv")  # d1 has no overhead
    free = problem(ops, devices(2), forward_only=True).simulate([0, 1, 0]).result.makespan
    assert free == 3
    for r in (fast, ref):
        assert r.makespan == 5.5 == free + 2 + 0.5
        assert list(r.busy) == [1 + 2 + 0.5, 1]


def test_a_receive_task_queues_behind_a_running_op_and_a_tensor_is_received_once():
    # Forward only. a (d0, 1 s) feeds b and c on d1; z, a second input on d1, runs [0, 4]. o_1 = 0.5.
    # a's output crosses once [1, 2]; its receive task waits for z: [4, 4.5]; then b [4.5, 5.5], c [5.5, 6.5].
    # Without overhead b and c also wait for z: [4, 5], [5, 6]; the overhead adds just its 0.5 s.
    ops = [op("a"), op("z", fwd=4), op("b", ["a"]), op("c", ["a"])]
    p = problem(ops, with_overhead(devices(2), 0.0, 0.5), forward_only=True)
    fast, ref = both(p, [0, 1, 1, 1])
    assert spans(ref, "recv") == {("a", "fwd", 0): (4, 4.5)}
    assert spans(ref)[("b", "fwd", 0)] == (4.5, 5.5) and spans(ref)[("c", "fwd", 0)] == (5.5, 6.5)
    assert problem(ops, devices(2), forward_only=True).simulate([0, 1, 1, 1]).result.makespan == 6
    for r in (fast, ref):
        assert r.makespan == 6.5 and r.transfers == 1
        assert list(r.busy) == [1, 4 + 0.5 + 1 + 1]


def test_overhead_is_a_device_property_under_every_profile_and_zero_changes_nothing():
    ops = [op("a"), op("b", ["a"])]
    placement = [0, 1]
    for profile in ("default", "exprimo-2020"):
        plain = Problem(Graph("g", ops), devices(2), settings=SimSettings(forward_only=True), profile=profile)
        costly = Problem(Graph("g", ops), with_overhead(devices(2), 0.25, 0.125),
                         settings=SimSettings(forward_only=True), profile=profile)
        zero = Problem(Graph("g", ops), with_overhead(devices(2), 0.0, 0.0), settings=SimSettings(forward_only=True),
                       profile=profile)
        base = plain.simulate(placement).result
        assert costly.simulate(placement).result.makespan == base.makespan + 0.25 + 0.125
        assert costly.simulate(placement, trace=True).result.makespan == base.makespan + 0.25 + 0.125
        z = zero.simulate(placement).result
        assert z.makespan == base.makespan and np.array_equal(z.busy, base.busy)
        assert [e.kind for e in zero.simulate(placement, trace=True).result.trace] == ["op", "transfer", "op"]


def test_one_device_sends_nothing_and_pays_nothing():
    p = problem(CHAIN, with_overhead(devices(2), 0.25, 0.5))
    for r in both(p, [1, 1]):
        assert r.makespan == 1 + 3 + 4 + 2 + 0.75 + 0.5 == 11.25
        assert r.transfers == 0 and list(r.busy) == [0, r.makespan]


# -- what reads traces: labels, Gantt segments, the critical path, Chrome trace, pipeline blocks ----------------

def test_trace_views_know_send_and_receive_tasks():
    from placement_core.analysis.pipeline import schedule_blocks
    from placement_core.analysis.stats import device_stats, largest_transfers
    from placement_core.analysis.trace import critical_path, event_label, gantt_rows, gantt_segments
    from placement_core.simulate.chrome import chrome_trace

    p = problem(CHAIN, with_overhead(devices(2, latency=0.125), 0.25, 0.5))
    res = p.simulate([0, 1], trace=True).result
    trace = res.trace
    # the critical path runs through every send, transfer and receive of the chain
    path = [(trace[i].kind, trace[i].op, trace[i].phase) for i in critical_path(trace, p.graph)]
    assert path == [("op", "a", "fwd"), ("send", "a", "fwd"), ("transfer", "a", "fwd"), ("recv", "a", "fwd"),
                    ("op", "b", "fwd"), ("op", "b", "bwd"), ("send", "b", "bwd"), ("transfer", "b", "bwd"),
                    ("recv", "b", "bwd"), ("op", "a", "bwd"), ("op", "a", "update")]
    send = next(e for e in trace if e.kind == "send" and e.op == "a")
    assert event_label(send).startswith("<b>send to d1</b> (op a, 100 B) · output · batch 1<br>d0: message overhead")
    recv = next(e for e in trace if e.kind == "recv" and e.op == "b")
    assert event_label(recv).startswith("<b>receive from d1</b> (op b, 100 B) · gradients")
    rows = gantt_rows(p.devices.names, [c.name for c in p.devices.channels])
    segs = gantt_segments(trace, rows)
    assert [s.kind for s in segs] == ["op"] * 3 + ["send"] * 2 + ["recv"] * 2 + ["transfer"] * 2
    assert {(s.kind, int(r)) for s in segs if s.kind in ("send", "recv") for r in s.row} == {
        ("send", 0), ("send", 1), ("recv", 1), ("recv", 0)}  # on the device rows
    # statistics: overhead is busy time, not a transfer; d1 idles [0, 2.375] until the receive, then after its update
    assert [r["busy_s"] for r in device_stats(res, p.devices.names, p.capacity, trace)] == [4.0, 8.75]
    assert device_stats(res, p.devices.names, p.capacity, trace)[1]["longest_idle_s"] == 3.125  # [11.125, 14.25]
    assert len(largest_transfers(trace)) == 2
    # Chrome trace: grey slices on the device tracks
    chrome = [e for e in chrome_trace(res, ["d0", "d1"], ["bus"])["traceEvents"] if e.get("ph") == "X"]
    s = next(e for e in chrome if e["cat"] == "send,fwd")
    assert (s["name"], s["pid"], s["tid"], s["ts"], s["dur"]) == ("send a (fwd) to d1", 1, 0, 1e6, 0.25e6)
    assert s["args"]["bytes"] == 100 and s["cname"] == "grey"
    r = next(e for e in chrome if e["cat"] == "recv,bwd")
    assert (r["name"], r["pid"], r["tid"]) == ("receive b (bwd) from d1", 1, 0)
    # pipeline blocks: send and receive tasks are the stage's work, and thin bars of their own
    blocks = schedule_blocks(trace, ["d0", "d1", "bus"])
    d0 = [(b.kind, b.phase, b.start, b.end, b.events, b.messages, b.busy) for b in blocks if b.row == 0]
    assert d0 == [("op", "fwd", 0, 1.25, 1, 1, 1.25), ("op", "bwd", 11.5, 13.75, 1, 1, 2.25),
                  ("op", "update", 13.75, 14.25, 1, 0, 0.5),
                  ("overhead", "fwd", 1, 1.25, 1, 0, 0.25), ("overhead", "bwd", 11.5, 11.75, 1, 0, 0.25)]
    assert sum(b.busy for b in blocks if b.row == 0 and b.kind == "op") == res.busy[0]
