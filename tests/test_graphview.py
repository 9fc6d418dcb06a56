"""The node-link views' data (placement_core.analysis.graphview): positions, sizes, widths, cross-device edges,
cards, modules for large networks, and the device graph with what each channel carries. Numbers worked out by
hand on small networks; invariants by hypothesis on random ones."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import devices, examples, op, problem
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_core.analysis import layered_layout
from placement_core.analysis.graphview import (COLLAPSE_ABOVE, LAYER_DX, ROW_DY, device_graph_view, edge_width,
                                               module_count, network_view)
from placement_core.model.devices import Channel, Device, DeviceGraph
from placement_core.model.graph import Graph, Op

# a -> b, a -> c, b -> d, c -> d; compute (forward + backward) 0, 100, 400, 25 GFLOP; a's output is 400 bytes,
# b's and c's 100, d's 25
DIAMOND = [Op("a", "input", (), 0, 0, 400), Op("b", "conv", ("a",), 60e9, 40e9, 100),
           Op("c", "conv", ("a",), 100e9, 300e9, 100), Op("d", "linear", ("b", "c"), 5e9, 20e9, 25)]


def diamond_view(placement=None, names=None, costs=None):
    g = Graph("diamond", DIAMOND)
    return g, network_view(g, layered_layout(g), placement, names, costs)


def test_positions_sizes_and_widths_by_hand():
    g, v = diamond_view()
    x = {n["name"]: n["x"] for n in v["nodes"]}
    assert x == {"a": 0.0, "b": LAYER_DX, "c": LAYER_DX, "d": 2 * LAYER_DX}  # one column per layer, left to right
    assert sorted(n["y"] for n in v["nodes"] if n["name"] in "bc") == [-ROW_DY / 2, ROW_DY / 2]
    # area ∝ compute: radius 6 + 24 · sqrt(compute / the largest)
    size = {n["name"]: n["size"] for n in v["nodes"]}
    assert size["a"] == 6.0 and size["c"] == 30.0
    assert size["b"] == pytest.approx(6 + 24 * math.sqrt(100 / 400)) == 18.0
    assert size["d"] == pytest.approx(6 + 24 * math.sqrt(25 / 400)) == 12.0
    # width 1 + 7 · sqrt(bytes / the largest tensor): a's 400 bytes to b and c, b's and c's 100 bytes to d
    widths = {(v["nodes"][e["from"]]["name"], v["nodes"][e["to"]]["name"]): e["width"] for e in v["edges"]}
    assert widths[("a", "b")] == widths[("a", "c")] == 8.0
    assert widths[("b", "d")] == pytest.approx(1 + 7 * math.sqrt(100 / 400)) == 4.5
    assert v["max_bytes"] == 400 and [e["span"] for e in v["edges"]] == [1, 1, 1, 1]
    assert v["modules"] == [] and all(n["module"] is None for n in v["nodes"])


def test_edge_width_clamps_a_module_sum_above_the_largest_tensor():
    assert edge_width([0, 100, 400, 1600], 400).tolist() == [1.0, 4.5, 8.0, 8.0]


def test_cross_device_edges_and_the_card():
    ops = [op("a", fwd=1.0, bwd=2.0, out=400), op("b", ["a"], fwd=3.0, bwd=4.0, out=100),
           op("c", ["a"], out=100), op("d", ["b", "c"], out=25)]
    p = problem(ops, devices(2))
    placement = np.array([0, 0, 1, 1])
    v = network_view(p.graph, layered_layout(p.graph), placement, p.devices.names, p.costs)
    cross = {(v["nodes"][e["from"]]["name"], v["nodes"][e["to"]]["name"]): e["cross"] for e in v["edges"]}
    assert cross == {("a", "b"): False, ("a", "c"): True, ("b", "d"): True, ("c", "d"): False}
    card = dict(map(tuple, v["nodes"][1]["card"]))
    assert card["op"] == "b" and card["device"] == "d0" and card["output"] == "100 B"
    # measured times (helpers.op): the same on both cpu devices
    assert card["on d0 (per batch)"] == card["on d1 (per batch)"] == "forward 3 s · backward 4 s"
    assert [n["device"] for n in v["nodes"]] == ["d0", "d0", "d1", "d1"]


def test_without_a_placement_nothing_is_cross_and_the_card_has_no_device():
    _, v = diamond_view()
    assert not any(e["cross"] for e in v["edges"])
    assert "device" not in dict(map(tuple, v["nodes"][0]["card"]))


def chain_of_blocks(blocks: int) -> Graph:
    """A ResNet-like chain: per block conv -> norm -> relu, plus a skip add; 4 ops a block."""
    ops, prev = [Op("x", "input", (), 0, 0, 1e6)], "x"
    for k in range(blocks):
        c, n, r, a = f"b{k}.conv", f"b{k}.bn", f"b{k}.relu", f"b{k}.add"
        ops += [Op(c, "conv", (prev,), 1e9 * (1 + k % 3), 2e9, 1e6), Op(n, "norm", (c,), 1e7, 1e7, 1e6),
                Op(r, "activation", (n,), 0, 0, 1e6), Op(a, "elementwise", (r, prev), 0, 0, 1e6)]
        prev = a
    return Graph("chain", ops)


@pytest.mark.slow
def test_a_large_network_gets_modules_that_partition_its_ops():
    g = chain_of_blocks(300)  # 1,201 ops
    assert len(g) > COLLAPSE_ABOVE
    placement = np.array([i * 2 // len(g) for i in range(len(g))])
    v = network_view(g, layered_layout(g), placement, ["d0", "d1"])
    mods = v["modules"]
    assert 0 < len(mods) <= module_count(len(g)) == 120
    members = [i for m in mods for i in m["members"]]
    assert len(members) == len(set(members))  # disjoint
    alone = [i for i, n in enumerate(v["nodes"]) if n["module"] is None]
    assert sorted(members + alone) == list(range(len(g)))  # together with the ops left alone: every op once
    assert 0 in alone  # the network's input stays an op of its own (coarsening keeps inputs apart)
    for k, m in enumerate(mods):
        assert all(v["nodes"][i]["module"] == k for i in m["members"]) and len(m["members"]) > 1
        assert m["x"] == pytest.approx(np.mean([v["nodes"][i]["x"] for i in m["members"]]))
        on = {v["nodes"][i]["device"] for i in m["members"]}
        assert m["device"] == (on.pop() if len(on) == 1 else None)
        card = dict(map(tuple, m["card"]))
        assert card["ops"].startswith(f"{len(m['members'])}: ")
    small = network_view(g, layered_layout(g), collapse_above=len(g))
    assert small["modules"] == []  # at the threshold itself: every op


@st.composite
def dags(draw):
    n = draw(st.integers(2, 25))
    ops = []
    for i in range(n):
        parents = draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else []
        ops.append(Op(f"o{i}", "conv", tuple(f"o{p}" for p in parents), draw(st.floats(0, 1e12)), 0.0,
                      draw(st.floats(0, 1e9))))
    placement = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
    return Graph("random", ops), np.array(placement)


@settings(max_examples=examples(60), deadline=None)
@given(dags())
def test_invariants_on_random_networks(case):
    g, placement = case
    v = network_view(g, layered_layout(g), placement, ["d0", "d1", "d2"], collapse_above=5)
    nodes = v["nodes"]
    for e in v["edges"]:
        assert nodes[e["to"]]["x"] > nodes[e["from"]]["x"]  # every arrow points right: the data direction
        assert e["cross"] == (placement[e["from"]] != placement[e["to"]])
        assert 1.0 <= e["width"] <= 8.0
    by_bytes = sorted(v["edges"], key=lambda e: e["bytes"])
    assert [e["width"] for e in by_bytes] == sorted(e["width"] for e in by_bytes)  # wider for larger tensors
    assert all(6.0 <= n["size"] <= 30.0 for n in nodes)
    members = [i for m in v["modules"] for i in m["members"]]
    assert len(members) == len(set(members))


# -- the device graph ----------------------------------------------------------------------------------

def three_devices() -> DeviceGraph:
    """a, b, c; 'bus' (10 GB/s) carries every route from and to a, 'link' (40 GB/s) b <-> c."""
    devs = [Device(n, "gpu", 1e12, 1e10, 1e11) for n in "abc"]
    return DeviceGraph("three", devs, [
        Channel("bus", 10e9, 1e-6, (("a", "b"), ("b", "a"), ("a", "c"), ("c", "a"))),
        Channel("link", 40e9, 0.0, (("b", "c"), ("c", "b")))])


def test_device_graph_hubs_edges_and_widths():
    v = device_graph_view(three_devices())
    ids = {n["name"]: n["id"] for n in v["nodes"]}
    assert [n["role"] for n in v["nodes"]] == ["device"] * 3 + ["channel"] * 2
    edges = {(e["from"], e["to"]): e["width"] for e in v["edges"]}
    # device -> channel for each route's source, channel -> device for its destination
    assert set(edges) == {("d0", "c0"), ("d1", "c0"), ("d2", "c0"), ("c0", "d1"), ("c0", "d0"), ("c0", "d2"),
                          ("d1", "c1"), ("d2", "c1"), ("c1", "d2"), ("c1", "d1")}
    assert edges[("d0", "c0")] == pytest.approx(1.5 + 7.5 * 10 / 40) and edges[("d1", "c1")] == 9.0
    assert ids == {"a": "d0", "b": "d1", "c": "d2", "bus": "c0", "link": "c1"}
    hubs = np.array([[n["x"], n["y"]] for n in v["nodes"] if n["role"] == "channel"])
    assert np.hypot(*(hubs[0] - hubs[1])) >= 130 - 1e-6  # hubs apart, labels readable
    card = dict(map(tuple, v["nodes"][3]["card"]))
    assert card["bandwidth"] == "10 GB/s" and card["latency"] == "1 µs"
    assert card["routes"] == "a → b, b → a, a → c, c → a"


def test_device_graph_says_what_each_channel_carries_under_the_placement():
    # x on d0 sends its 100 bytes to y on d1 (bus); y's gradient goes back (100 bytes): 200 bytes on bus
    ops = [op("x", out=100), op("y", ["x"], out=50)]
    p = problem(ops, devices(2, bandwidth=100.0))
    placement = np.array([0, 1])
    result = p.simulate(placement).result
    v = device_graph_view(p.devices, result, placement, p.graph)
    bus = next(n for n in v["nodes"] if n["name"] == "bus")
    card = dict(map(tuple, bus["card"]))
    assert card["carries"] == "200 B" and "carries 200 B" in bus["label"]
    # each transfer takes 100 / 100 = 1 s: busy 2 s of the step
    assert card["busy"].startswith("2 s (")
    d0 = dict(map(tuple, v["nodes"][0]["card"]))
    assert d0["placed here"] == "1 ops, 0 FLOP" and "1 ops" in v["nodes"][0]["label"]
