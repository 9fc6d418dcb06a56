"""One data-parallel all-reduce model for a plan, folded or not, and what-if bandwidth moving it (issue 28).

A plan's gradients are all-reduced over each data-parallel group by the hierarchical collective model
(cost.collectives: reduce-scatter on NVLink, all-reduce of a rank's share across nodes on its InfiniBand rail,
all-gather on NVLink), charged to each op's update, whether the replicas are simulated one by one (≤ 32 nodes)
or folded into one. Figures by hand from the links as NCCL reaches them (docs/clusters.md): NVLink 300 GB/s ×
370/450, InfiniBand 25 GB/s × 376.7/400, 5 µs a step; the GPT's weight bytes as in test_plan_fold.
"""

from __future__ import annotations

import numpy as np
import pytest

from placement_core import load_devices, load_network
from placement_core.analysis.sensitivity import what_if, what_if_problem
from placement_core.families import gpt
from placement_core.formats.clusters import Cluster
from placement_core.optimize.plans import PlanRequest, gpus_of, simulate_plan

NET = "gpt:layers=2,hidden=256,heads=8,seq=128"
ALPHA = 5e-6
BETA_NVLINK = 1 / (300e9 * 370 / 450)
BETA_IB = 1 / (25e9 * 376.7 / 400)
OPS, BYTES_TP1, BYTES_TP8 = 15, 54_688_768, 6_900_608  # weighted ops, a rank's weight bytes (test_plan_fold)


def _run(devices, pp, dp, b, **req):
    graph, config = load_network(NET), gpt.parse(NET)
    return simulate_plan(graph, devices, gpus_of(devices), pp, dp, b, PlanRequest(**req), config)


def test_sixteen_replicas_on_two_nodes_all_reduce_hierarchically_folded_or_not():
    # dp 16 = 8 ranks × 2 nodes; per op of n bytes: ring reduce-scatter in the node 7α + 7/8·n·β_nvl, all-reduce
    # of n/8 across the 2 nodes (ring 2α + n/8·β_ib; the tree's 2α + 2·n/8·β_ib is slower), all-gather 7α + 7/8·n·β_nvl
    by_hand = OPS * 16 * ALPHA + 7 / 4 * BYTES_TP1 * BETA_NVLINK + BYTES_TP1 / 8 * BETA_IB
    assert by_hand == pytest.approx(1.2e-3 + 3.879952e-4 + 2.903573e-4, rel=1e-6)
    base = _run(load_devices("dgx-a100:nodes=1"), 1, 1, 1, global_batch=1)[0]  # one replica's share alone
    for devices in (load_devices("dgx-a100:nodes=2"), Cluster("dgx-a100", 2)):
        plan = _run(devices, 1, 16, 1, global_batch=16)[0]
        assert plan.breakdown["data_parallel_comm_s"] == pytest.approx(by_hand, rel=1e-12)
        assert plan.step_time_s - base.step_time_s == pytest.approx(by_hand, rel=1e-9)  # pp 1: the GPU runs it all


@pytest.mark.parametrize("nodes, tp, pp, dp", [(1, 1, 4, 2), (1, 2, 1, 4), (2, 8, 1, 2), (2, 2, 2, 4),
                                               (4, 4, 2, 4), (4, 8, 2, 2)])
def test_a_plan_costs_the_same_folded_or_not(nodes, tp, pp, dp):
    # the replicas are identical, so simulating every one of them (≤ 32 nodes) and folding them into one
    # give the same step and data-parallel time (before issue 28's one model they differed by up
    # to 44 %: docs/clusters.md "One data-parallel model")
    unfolded = _run(load_devices(f"dgx-a100:nodes={nodes}"), pp, dp, 1, global_batch=4 * dp, tp=tp)[0]
    folded = _run(Cluster("dgx-a100", nodes), pp, dp, 1, global_batch=4 * dp, tp=tp)[0]
    assert folded.step_time_s == pytest.approx(unfolded.step_time_s, rel=1e-9)
    if pp == 1:
        assert folded.peak_memory_bytes == unfolded.peak_memory_bytes
    else:  # the unfolded shards' messages between stages arrive at different times: up to one more logits
        # output (25.7 MB, pp 4 on one node) held on the fullest GPU; 8-33 kB in the other pipelines
        assert folded.peak_memory_bytes <= unfolded.peak_memory_bytes <= 1.12 * folded.peak_memory_bytes
    assert folded.breakdown["data_parallel_comm_s"] == pytest.approx(unfolded.breakdown["data_parallel_comm_s"])
    assert folded.breakdown["data_parallel_comm_s"] > 0


def test_halving_infiniband_lengthens_an_unfolded_plans_all_reduce_by_hand():
    # tp 8 × dp 2 on two nodes, pp 1: each op's all-reduce is 2 ranks on InfiniBand, 2α + nβ (ring); at half
    # the bandwidth 2α + 2nβ (still the ring: the tree's 2α + 4nβ), so the step grows by Σn·β_ib, nothing else
    # moving (no pipeline transfers)
    plan, problem = _run(load_devices("dgx-a100:nodes=2"), 1, 2, 2, global_batch=8, tp=8)
    half = {c.name: 0.5 for c in problem.devices.channels if c.name.startswith("ib-")}
    r = what_if(problem, plan.placement, bandwidth=half)
    assert r["delta_s"] == pytest.approx(BYTES_TP8 * BETA_IB, rel=1e-9)  # 2.93097e-4 s
    assert r["delta_s"] == pytest.approx(2.930971e-4, rel=1e-6)
    nvl = {c.name: 0.5 for c in problem.devices.channels if c.name.startswith("nvl-")}
    assert what_if(problem, plan.placement, bandwidth=nvl)["delta_s"] == pytest.approx(0.0, abs=1e-12)


def test_halving_a_rail_lengthens_a_folded_plans_all_reduce_on_that_gpu_only():
    # 4 nodes, tp 8 × pp 2 × dp 2: the replica's GPUs are n0g0 (stage 0) and n2g0 (stage 1); each rank's
    # group is one GPU in each of two nodes, so its all-reduce is 2α + nβ_ib, 2α + 2nβ_ib on a halved rail
    plan, problem = _run(Cluster("dgx-a100", 4), 2, 2, 1, global_batch=4, tp=8)
    assert problem.devices.names == ["n0g0", "n2g0"]
    params = np.array([op.param_bytes for op in problem.graph.ops], dtype=float)
    assert (params > 0).sum() == OPS
    before = problem.costs.update
    slow = what_if_problem(problem, bandwidth={"ib-n0g0": 0.5})
    np.testing.assert_allclose(slow.costs.update[:, 0] - before[:, 0], params * BETA_IB, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(slow.costs.update[:, 1], before[:, 1], rtol=1e-12)
    assert slow.simulate(plan.placement).result.makespan > problem.simulate(plan.placement).result.makespan
    # a device twice as fast updates in half the time, its all-reduce as long as before
    fast = what_if_problem(problem, speed={"n0g0": 2.0})
    comm = np.where(params > 0, 2 * ALPHA + params * BETA_IB, 0.0)
    np.testing.assert_allclose(fast.costs.update[:, 0], (before[:, 0] - comm) / 2 + comm, rtol=1e-9, atol=1e-15)


def test_the_kernel_and_the_reference_charge_the_same_all_reduce():
    # the charged all-reduce lives in the shard table both simulators read: the Python reference runs an
    # unfolded plan (2 nodes, tp 2 × pp 2 × dp 4, 4 micro-batches) to the kernel's figures
    from helpers import require_kernel
    from placement_core.problem import Problem

    plan, fast = _run(load_devices("dgx-a100:nodes=2"), 2, 4, 1, global_batch=16, tp=2)
    require_kernel(fast)
    slow = Problem(fast.graph, fast.devices, profile=fast.profile, settings=fast.settings, penalty=fast.penalty,
                   splits=fast.splits, fast=False)
    a, b = fast.simulate(plan.placement).result, slow.simulate(plan.placement).result
    assert a.makespan == pytest.approx(b.makespan, rel=1e-12)
    assert a.makespan == pytest.approx(plan.step_time_s, rel=1e-12)
    for name in ("busy", "peak_memory", "channel_bytes"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=1e-12, atol=1e-9)
    assert plan.breakdown["data_parallel_comm_s"] > 0
