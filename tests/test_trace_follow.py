"""Following a trace (placement_core.analysis.trace_follow): search by name, an op's events and flows, what a
time window holds, which bars can carry their names, and capacity labels kept apart. Worked out by hand."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import devices, op, problem
from hypothesis import given
from hypothesis import strategies as st

from placement_core.analysis.layout import spread
from placement_core.analysis.trace_follow import bar_labels, matching_ops, op_events, op_flows, window_stats
from placement_core.simulate import TraceEvent


def test_matching_ops_is_case_insensitive_with_the_exact_name_first():
    names = ["conv1", "Conv2", "relu", "conv", "conv1"]
    assert matching_ops(names, "conv") == ["conv", "conv1", "Conv2"]
    assert matching_ops(names, "  RELU ") == ["relu"]
    assert matching_ops(names, "") == [] and matching_ops(names, "   ") == [] and matching_ops(names, "pool") == []


def chain():
    """a on d0 -> b on d1 -> c on d1: a's 100 bytes cross the bus (1 s at 100 B/s), b -> c stays on d1."""
    p = problem([op("a", out=100), op("b", ["a"], out=50), op("c", ["b"], out=10)], devices(2, bandwidth=100.0))
    return p, p.simulate(np.array([0, 1, 1]), trace=True).result


def test_an_ops_events_and_flows():
    p, res = chain()
    trace = res.trace
    kinds = sorted((trace[i].kind, trace[i].phase) for i in op_events(trace, "a"))
    # a's forward, backward, the transfer of its output; b's gradient back to a is b's (its input gradients)
    assert kinds == [("op", "bwd"), ("op", "fwd"), ("transfer", "fwd")]
    [flow] = op_flows(trace, p.graph, "b")
    assert (flow["producer"], flow["consumer"], flow["batch"]) == ("a", "b", 0)
    src, hop, dst = (trace[flow[k]] for k in ("src", "hop", "dst"))
    assert (src.op, src.resource, src.start, src.end) == ("a", "d0", 0.0, 1.0)  # forward 1 s (helpers.op)
    assert (hop.kind, hop.resource, hop.start, hop.end) == ("transfer", "bus", 1.0, 2.0)  # 100 B at 100 B/s
    assert (dst.op, dst.resource, dst.start) == ("b", "d1", 2.0)
    assert op_flows(trace, p.graph, "a") == [flow]
    assert op_flows(trace, p.graph, "c") == []  # b -> c stays on d1


def ev(kind, resource, start, end, nbytes=0.0, op_name="x"):
    return TraceEvent(kind, op_name, 0, "fwd", resource, start, end, "d0", "d1", nbytes)


def test_window_stats_by_hand():
    trace = [ev("op", "d0", 0, 2), ev("op", "d0", 3, 5), ev("recv", "d1", 1.5, 1.75),
             ev("transfer", "bus", 1, 3, 100), ev("transfer", "bus", 3.5, 5.5, 40), ev("transfer", "bus", 2, 2, 7)]
    w = window_stats(trace, 1.0, 4.0, ["d0", "d1"], ["bus", "idle"])
    assert w["span_s"] == 3.0
    d = {r["device"]: r for r in w["devices"]}
    assert d["d0"]["busy_s"] == 2.0 and d["d0"]["share"] == pytest.approx(2 / 3)  # [1, 2] and [3, 4]
    assert d["d1"]["busy_s"] == 0.25  # a receive task keeps its device busy
    c = {r["channel"]: r for r in w["channels"]}
    # all of the first transfer, a quarter of the second (0.5 s of its 2 s), the instantaneous one whole
    assert c["bus"]["bytes"] == pytest.approx(100 + 10 + 7)
    assert c["bus"]["busy_s"] == pytest.approx(2.5) and c["idle"]["bytes"] == 0.0
    assert window_stats(trace, 4.0, 1.0, ["d0", "d1"], ["bus"])["devices"][0]["busy_s"] == 2.0  # either order


@given(st.floats(0, 10), st.floats(0, 10))
def test_the_whole_run_in_windows_adds_up(a, b):
    p, res = chain()
    cut = min(a, b, res.makespan)
    names, chans = p.devices.names, ["bus"]
    whole = window_stats(res.trace, 0.0, res.makespan, names, chans)
    left, right = (window_stats(res.trace, 0.0, cut, names, chans), window_stats(res.trace, cut, res.makespan,
                                                                                   names, chans))
    for k in range(len(names)):
        assert left["devices"][k]["busy_s"] + right["devices"][k]["busy_s"] == pytest.approx(
            whole["devices"][k]["busy_s"]) == pytest.approx(res.busy[k])
    assert left["channels"][0]["bytes"] + right["channels"][0]["bytes"] == pytest.approx(res.channel_bytes[0])


def test_bar_labels_only_where_the_whole_name_fits():
    # an axis of 10 s drawn 1,000 px wide: 100 px per second; "abcd" needs 4 · 6.2 + 8 = 32.8 px
    trace = [ev("op", "d0", 0, 0.3, op_name="abcd"), ev("op", "d0", 1, 1.4, op_name="abcd"),
             ev("transfer", "bus", 2, 3, op_name="abcdefghijklmn"), ev("recv", "d0", 5, 9, op_name="abcd"),
             ev("op", "d0", 9.8, 12, op_name="abcd")]
    labels = bar_labels(trace, 0.0, 10.0, 1000.0)
    # 30 px: no; 40 px: yes; a 14-letter transfer over 100 px: 94.8 needed, yes; receive tasks carry no name;
    # the last bar shows only 0.2 s (20 px) of itself on the axis: no
    assert labels == [(2, "abcdefghijklmn"), (1, "abcd")]
    assert bar_labels(trace, 0.0, 10.0, 1000.0, limit=1) == [(2, "abcdefghijklmn")]
    assert bar_labels(trace, 5.0, 5.0, 1000.0) == []


def test_spread_keeps_labels_apart_and_as_close_as_it_can():
    assert spread([16, 16.2, 32, 5], 1.0) == pytest.approx([15.6, 16.6, 32.0, 5.0])
    assert spread([3.0], 1.0) == [3.0] and spread([], 1.0) == []


@given(st.lists(st.floats(-100, 100), max_size=12), st.floats(0.1, 5))
def test_spread_invariants(values, gap):
    out = spread(values, gap)
    ordered = sorted(zip(values, range(len(values))))
    placed = [out[k] for _, k in ordered]
    assert all(b - a >= gap - 1e-6 for a, b in zip(placed, placed[1:]))  # apart, in the values' order
    assert sum(out) == pytest.approx(sum(values), abs=1e-6)  # least squares moves them without drifting
