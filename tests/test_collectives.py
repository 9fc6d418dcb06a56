"""The alpha-beta model of collectives (issue 28, item 3): tiny cases worked out by hand."""

from __future__ import annotations

import pytest

from placement_core.cost import collectives as co

A = 5e-6  # seconds per step
B = 1e-11  # seconds per byte: 100 GB/s


def test_two_ranks_exchange_half_each_way():
    # ring all-reduce on 2 ranks: reduce-scatter (1 step, 0.5 MB) + all-gather (1 step, 0.5 MB)
    # = 2 * 5 us + 2 * 0.5e6 B * 1e-11 s/B = 10 us + 10 us
    assert co.ring_allreduce(1e6, 2, A, B) == pytest.approx(20e-6)
    assert co.ring_allgather(1e6, 2, A, B) == pytest.approx(10e-6)
    assert co.ring_reduce_scatter(1e6, 2, A, B) == pytest.approx(10e-6)
    # tree on 2 ranks: 2 * ceil(log2 2) = 2 steps, 2 * 1 MB * 1e-11 = 20 us
    assert co.tree_allreduce(1e6, 2, A, B) == pytest.approx(10e-6 + 20e-6)


def test_four_ranks_by_hand():
    # ring: 2 * 3 steps * 5 us = 30 us; 2 * 3/4 * 1e6 * 1e-11 = 15 us
    assert co.ring_allreduce(1e6, 4, A, B) == pytest.approx(45e-6)
    # tree: 2 * log2(4) * 5 us = 20 us; 2 * 1e6 * 1e-11 = 20 us
    assert co.tree_allreduce(1e6, 4, A, B) == pytest.approx(40e-6)
    assert co.allreduce(1e6, 4, A, B) == pytest.approx(40e-6)  # auto: the faster
    # all-gather of 1 MB in all: 3 steps, 3/4 MB sent per rank
    assert co.ring_allgather(1e6, 4, A, B) == pytest.approx(15e-6 + 7.5e-6)
    assert co.collective("reduce-scatter", 1e6, 4, A, B, "tree") == pytest.approx(22.5e-6)  # rings only


def test_latency_dominates_small_messages_and_the_tree_wins():
    # 8 bytes on 4 ranks: ring 30 us + 1.2e-10 s, tree 20 us + 1.6e-10 s
    ring, tree = co.ring_allreduce(8, 4, A, B), co.tree_allreduce(8, 4, A, B)
    assert ring == pytest.approx(30e-6 + 1.2e-10) and tree == pytest.approx(20e-6 + 1.6e-10)
    assert co.allreduce(8, 4, A, B) == tree
    # 8 ranks: ring 2 * 7 steps = 70 us, tree 2 * 3 = 30 us
    assert co.ring_allreduce(0, 8, A, B) == pytest.approx(70e-6)
    assert co.tree_allreduce(0, 8, A, B) == pytest.approx(30e-6)


def test_bandwidth_dominates_large_messages_and_the_ring_wins():
    # 1 GB on 4 ranks: ring 30 us + 1.5 * 1e9 * 1e-11 = 15 ms; tree 20 us + 20 ms
    ring, tree = co.ring_allreduce(1e9, 4, A, B), co.tree_allreduce(1e9, 4, A, B)
    assert ring == pytest.approx(30e-6 + 15e-3) and tree == pytest.approx(20e-6 + 20e-3)
    assert co.allreduce(1e9, 4, A, B) == ring


def test_one_rank_costs_nothing():
    for f in (co.ring_allreduce, co.tree_allreduce, co.ring_allgather):
        assert f(1e6, 1, A, B) == 0.0


def test_hierarchical_across_two_nodes_by_hand():
    intra, inter = (5e-6, 1 / 300e9), (5e-6, 1 / 25e9)
    n = 16e6
    # reduce-scatter in the node: 7 * 5 us + 7/8 * 16 MB / 300 GB/s = 35 us + 46.667 us
    rs = 35e-6 + 7 / 8 * 16e6 / 300e9
    # across the 2 nodes each rank all-reduces its 2 MB share: ring 2 * 5 us + 2 MB / 25 GB/s = 90 us
    # (tree: 10 us + 4 MB / 25 GB/s = 170 us)
    cross = 10e-6 + 2e6 / 25e9
    assert co.hierarchical("all-reduce", n, 8, 2, intra, inter) == pytest.approx(rs + cross + rs)
    # all-gather: across nodes 1 step of 1 MB (half of the 2 MB share), then in the node 7 steps, 7/8 of 16 MB
    ag = (5e-6 + 0.5 * 2e6 / 25e9) + rs
    assert co.hierarchical("all-gather", n, 8, 2, intra, inter) == pytest.approx(ag)
    # one node or one rank per node: the one-level collective on that level's link
    assert co.hierarchical("all-reduce", n, 8, 1, intra, inter) == co.allreduce(n, 8, *intra)
    assert co.hierarchical("all-reduce", n, 1, 4, intra, inter) == co.allreduce(n, 4, *inter)


def test_bus_bandwidth_of_a_latency_free_ring_is_the_link():
    # NCCL's busBw = algBw * 2(n-1)/n: a ring without latency moves exactly the link's bandwidth
    for p in (2, 4, 8):
        t = co.ring_allreduce(1e8, p, 0.0, B)
        assert co.bus_bandwidth("all-reduce", 1e8, t, p) == pytest.approx(1 / B)
        t = co.ring_allgather(1e8, p, 0.0, B)
        assert co.bus_bandwidth("all-gather", 1e8, t, p) == pytest.approx(1 / B)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        co.ring_allreduce(1e6, 0, A, B)
    with pytest.raises(ValueError):
        co.allreduce(1e6, 4, A, B, "butterfly")
    with pytest.raises(ValueError):
        co.collective("broadcast", 1e6, 4, A, B)
