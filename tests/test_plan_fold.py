"""Folded data-parallel replicas (issue 28, item 5: plans of up to 3,072 GPUs and beyond).

A plan on a :class:`Cluster` simulates one replica and charges each op's gradient collective over the
data-parallel group to its update. Every expected figure is worked by hand from the datasheet links
(NVLink 300 GB/s and InfiniBand 25 GB/s per direction, 5 µs latency) at what NCCL reaches on them (NVLink
370/450 of its line rate, InfiniBand 376.7/400: docs/clusters.md "What the hardware reaches") and the
GPT's weights: a weighted op holds ``n`` bytes; a ring all-reduce over p ranks takes
2(p-1)·α + 2(p-1)/p·n·β, a tree 2⌈log2 p⌉·α + 2n·β (Thakur et al. 2005; NCCL's trees).
"""

from __future__ import annotations

import json
import math

import pytest

from placement_core import InputError, load_devices, load_network
from placement_core.families import gpt
from placement_core.formats import clusters
from placement_core.formats.clusters import Cluster
from placement_core.optimize.plans import PlanRequest, gpus_of, simulate_plan

NET = "gpt:layers=2,hidden=256,heads=8,seq=128"  # vocab 50,257, bf16, tied embedding
L, H, S, V = 2, 256, 128, 50257
ALPHA = 5e-6
BETA_NVLINK = 1 / (300e9 * 370 / 450)
BETA_IB = 1 / (25e9 * 376.7 / 400)


def _run(devices, pp, dp, b, **req):
    graph, config = load_network(NET), gpt.parse(NET)
    return simulate_plan(graph, devices, gpus_of(devices), pp, dp, b, PlanRequest(**req), config)[0]


def _weights_bytes(t: int) -> tuple[int, int]:
    """(weighted ops, bytes of weights) of one tensor-parallel rank of NET, by hand: the embedding's
    ⌈V/t⌉ vocabulary rows and s positions, per layer (12h² + 7h)/t + 6h, the final norm's 2h, the logit
    layer's ⌈V/t⌉ rows (its own copy of the tied matrix)."""
    rows = -(-V // t)
    params = (rows + S) * H + L * ((12 * H * H + 7 * H) // t + 6 * H) + 2 * H + rows * H
    return 6 * L + 3, 2 * params


def test_the_rank_weights_by_hand():
    assert _weights_bytes(1) == (15, 54_688_768)  # 2·[(2V + s)h + l(12h² + 13h) + 2h]
    assert _weights_bytes(8) == (15, 6_900_608)


def test_two_replicas_in_a_node_add_one_ring_all_reduce_per_weighted_op():
    # pp 1: the one GPU runs every task in turn, so the folded step is one replica's (dp 1, half the batch)
    # plus the 15 all-reduces of 2 ranks over NVLink: ring 2α + nβ (the tree's 2α + 2nβ is slower)
    base = _run(load_devices("dgx-a100:nodes=1"), 1, 1, 2, global_batch=4)
    folded = _run(Cluster("dgx-a100", 1), 1, 2, 2, global_batch=8)
    ops, nbytes = _weights_bytes(1)
    by_hand = ops * 2 * ALPHA + nbytes * BETA_NVLINK  # 1.5e-4 + 54,688,768 B / 246.67 GB/s = 2.21711e-4 s
    assert by_hand == pytest.approx(3.71711222e-4)
    assert folded.breakdown["data_parallel_comm_s"] == pytest.approx(by_hand, rel=1e-12)
    assert folded.step_time_s - base.step_time_s == pytest.approx(by_hand, rel=1e-9)
    assert folded.breakdown["compute_s"] == pytest.approx(base.breakdown["compute_s"], rel=1e-12)
    assert folded.peak_memory_bytes == base.peak_memory_bytes


def test_folded_and_unfolded_on_two_nodes_run_the_same_gradient_all_reduce():
    # tp 8 × dp 2 on two nodes: each replica's tensor-parallel group fills a node, so every rank's gradients
    # cross InfiniBand to the same rank of the other node (one rail per rank)
    base = _run(load_devices("dgx-a100:nodes=1"), 1, 1, 2, global_batch=4, tp=8)
    folded = _run(Cluster("dgx-a100", 2), 1, 2, 2, global_batch=8, tp=8)
    unfolded = _run(load_devices("dgx-a100:nodes=2"), 1, 2, 2, global_batch=8, tp=8)
    ops, nbytes = _weights_bytes(8)
    by_hand = ops * 2 * ALPHA + nbytes * BETA_IB  # 1.5e-4 + 6,900,608 B / 23.544 GB/s = 2.93097e-4 s
    assert by_hand == pytest.approx(4.43097234e-4)
    # one model whether the replicas are folded or not: each op's update carries its all-reduce (2 ranks on
    # InfiniBand: the ring's 2α + nβ beats the tree's 2α + 2nβ), no ring of messages on the channels
    for plan in (folded, unfolded):
        assert plan.step_time_s - base.step_time_s == pytest.approx(by_hand, rel=1e-9)
        assert plan.breakdown["data_parallel_comm_s"] == pytest.approx(by_hand, rel=1e-12)
    assert unfolded.breakdown["infiniband_bytes"] == 0.0
    # memory: ZeRO partitions over the folded group exactly as over the batch split
    for zero in (0, 1, 2, 3):
        f = _run(Cluster("dgx-a100", 2), 1, 2, 2, global_batch=8, tp=8, zero=zero)
        u = _run(load_devices("dgx-a100:nodes=2"), 1, 2, 2, global_batch=8, tp=8, zero=zero)
        assert f.peak_memory_bytes == u.peak_memory_bytes
    # ZeRO-3 reduce-scatters the gradients: (p-1)α + (p-1)/p·n·β per op
    z3 = _run(Cluster("dgx-a100", 2), 1, 2, 2, global_batch=8, tp=8, zero=3)
    assert z3.breakdown["data_parallel_comm_s"] == pytest.approx(ops * ALPHA + nbytes / 2 * BETA_IB, rel=1e-12)


def test_the_cli_plans_3072_gpus_with_a_tree_across_192_nodes(capsys):
    from placement_core.cli import main

    assert main(["plan", "--network", NET, "--devices", "dgx-a100:nodes=384", "--global-batch", "3072",
                 "--tp", "8", "--pp", "2", "--micro-batch", "16", "--json"]) == 0
    best = json.loads(capsys.readouterr().out)["best"]
    assert (best["tp"], best["pp"], best["dp"], best["micro_batches"]) == (8, 2, 192, 1)
    # the last stage (layer 1, the final norm, the logits) is the busiest; each rank's data-parallel group is
    # one GPU per node in 192 nodes: a tree, 2·8·α + 2n·β, beats the ring's 2·191·α = 1.91 ms of latency
    rows = -(-V // 8)
    sizes = [2 * H, 3 * H * H // 8 + 3 * H // 8, H * H // 8 + H, 2 * H, 4 * H * H // 8 + 4 * H // 8,
             4 * H * H // 8 + H, 2 * H, rows * H]
    tree = sum(2 * math.ceil(math.log2(192)) * ALPHA + 2 * 2 * n * BETA_IB for n in sizes)
    ring = sum(2 * 191 * ALPHA + 2 * 191 / 192 * 2 * n * BETA_IB for n in sizes)
    assert tree < ring
    assert tree == pytest.approx(6.4e-4 + 4 * 1_709_024 / 23.54375e9)  # 9.30357e-4 s
    assert best["breakdown"]["busiest_gpu"] == "n192g0"  # stage 1 starts at GPU dp · tp = 1,536
    assert best["breakdown"]["data_parallel_comm_s"] == pytest.approx(tree, rel=1e-12)


def test_a_replica_graph_holds_only_its_gpus():
    c = Cluster("dgx-a100", 384)
    g = c.graph([0, 48, 96, 100])
    assert g.names == ["n0g0", "n6g0", "n12g0", "n12g4"]
    assert [ch.name for ch in g.channels] == ["ib-n0g0", "ib-n6g0", "nvl-n12g0", "ib-n12g0", "nvl-n12g4", "ib-n12g4"]
    assert g.channel_for(2, 3).name == "nvl-n12g0" and g.channel_for(3, 0).name == "ib-n12g4"
    assert c.n_gpus == 3072 and c.link(0, 7) == (5e-6, 300e9) and c.link(0, 8) == (5e-6, 25e9)


@pytest.mark.parametrize("spec, words", [
    ("dgx-a100:nodes=0", "nodes=0 is outside 1..1024. Write dgx-a100:nodes=N or dgx-h100:nodes=N, N from 1 to 1024"),
    ("dgx-h100:nodes=100000", "nodes=100000 is outside 1..1024"),
])
def test_the_cli_refuses_a_cluster_out_of_range_in_one_line(capsys, spec, words):
    from placement_core.cli import main

    assert main(["plan", "--network", NET, "--devices", spec, "--global-batch", "8"]) == 2
    err = capsys.readouterr().err
    assert words in err and err.strip().count("\n") == 0


def test_a_whole_device_graph_above_32_nodes_points_to_placement_plan():
    with pytest.raises(InputError, match=r"outside 1\.\.32.*`placement plan` takes up to 1024 nodes"):
        load_devices("dgx-a100:nodes=40")
    with pytest.raises(InputError, match="outside 1..1024"):
        clusters.load_plan_cluster("dgx-a100:nodes=1025")


def test_fold_needs_a_cluster(capsys):
    from placement_core.cli import main

    assert main(["plan", "--network", NET, "--devices", "malvik", "--global-batch", "8", "--fold"]) == 2
    assert "--fold" in capsys.readouterr().err
