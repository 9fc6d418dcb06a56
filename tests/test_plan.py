"""``placement plan`` (issue 28, item 5, first part): pipeline × data-parallel plans of a GPT on a cluster."""

from __future__ import annotations

import json

import numpy as np
import pytest

from placement_core import InputError, load_devices, load_network
from placement_core.model.devices import devices_from_dict
from placement_core.optimize.plans import PlanRequest, candidates, plan, simulate_plan

TINY = "gpt:layers=2,hidden=64,heads=4,seq=32,vocab=100"


def test_the_candidates_by_hand():
    # 8 GPUs, 8 sequences: pp 1 (dp 8: micro-batch 1), pp 2 (dp 4: 1, 2), pp 4 (dp 2: 1, 2, 4), pp 8 (dp 1: 1..8)
    got = candidates(8, 100, PlanRequest(global_batch=8))
    assert got == [(1, 8, 1), (2, 4, 1), (2, 4, 2), (4, 2, 1), (4, 2, 2), (4, 2, 4),
                   (8, 1, 1), (8, 1, 2), (8, 1, 4), (8, 1, 8)]
    assert candidates(8, 100, PlanRequest(global_batch=8, pp=4, micro_batch=2)) == [(4, 2, 2)]
    assert candidates(8, 5, PlanRequest(global_batch=8)) == [(1, 8, 1), (2, 4, 1), (2, 4, 2), (4, 2, 1),
                                                            (4, 2, 2), (4, 2, 4)]  # 8 stages need 8 ops
    # 6 sequences: dp 4 and 8 do not divide them
    assert {(pp, dp) for pp, dp, _ in candidates(8, 100, PlanRequest(global_batch=6))} == {(4, 2), (8, 1)}
    # interleaved 1F1B runs micro-batches in rounds of pp
    assert candidates(4, 100, PlanRequest(global_batch=4, pp=2, schedule="interleaved-1f1b",
                                          virtual_stages=2)) == [(2, 2, 1)]


@pytest.mark.parametrize("req, words", [
    (PlanRequest(global_batch=8, pp=3), "does not divide the 8 GPUs"),
    (PlanRequest(global_batch=8, pp=2, dp=2), "is not the 8 GPUs"),
    (PlanRequest(global_batch=3, dp=8), "no plan of 8 GPUs"),
    (PlanRequest(global_batch=8, virtual_stages=2), "needs --schedule interleaved-1f1b"),
])
def test_what_cannot_be_planned_says_why(req, words):
    with pytest.raises(InputError, match=words):
        candidates(8, 100, req)


def _one_gpu():
    return devices_from_dict({"format": "placement-devices/1", "name": "one", "devices": [
        {"name": "gpu0", "kind": "gpu", "peak_flops": 1e13, "memory_bytes": 1e11, "mem_bandwidth": 1e12}]})


def test_a_one_gpu_plan_is_the_sum_of_its_ops():
    """One GPU, one micro-batch: the step runs every op's forward, backward and update in turn."""
    graph, devices = load_network(TINY), _one_gpu()
    [p] = plan(graph, devices, PlanRequest(global_batch=2, micro_batch=2, optimizer="sgd"))
    assert (p.pp, p.dp, p.micro_batch, p.micro_batches) == (1, 1, 2, 1)
    _, problem = simulate_plan(graph, devices, [0], 1, 1, 2, PlanRequest(global_batch=2, optimizer="sgd"))
    c = problem.costs
    assert p.step_time_s == pytest.approx(float(c.fwd.sum() + c.bwd.sum() + c.update.sum()), rel=1e-9)
    assert p.breakdown["compute_s"] == pytest.approx(p.step_time_s) and p.fits


def test_stages_run_on_their_groups_split_by_batch():
    graph, devices = load_network(TINY), load_devices("dgx-a100:nodes=1")
    p, problem = simulate_plan(graph, devices, list(range(8)), 2, 4, 1, PlanRequest(global_batch=8))
    first, last = problem.splits[p.placement[0] - 8], problem.splits[p.placement[-1] - 8]
    assert (first.dim, first.devices, last.devices) == ("batch", (0, 1, 2, 3), (4, 5, 6, 7))
    # contiguous stages: the first group's ops, then the second's (the tied weights, which have no batch, on the
    # group's first GPU)
    stage = [0 if g in (8, 0) else 1 if g in (9, 4) else None for g in p.placement.tolist()]
    assert None not in stage and stage == sorted(stage) and stage[0] == 0 and stage[-1] == 1
    assert p.micro_batches == 2 and p.breakdown["nvlink_bytes"] > 0 and p.breakdown["infiniband_bytes"] == 0


def test_the_best_plan_is_the_fastest_that_fits():
    plans = plan(load_network(TINY), load_devices("dgx-a100:nodes=1"), PlanRequest(global_batch=8))
    assert len(plans) == 10 and all(p.fits for p in plans)
    steps = [p.step_time_s for p in plans]
    assert steps == sorted(steps)
    tight = devices_from_dict({"format": "placement-devices/1", "name": "small", "devices": [
        {"name": f"gpu{i}", "kind": "gpu", "peak_flops": 1e13, "memory_bytes": 2e6, "mem_bandwidth": 1e12}
        for i in range(2)], "channels": [{"name": "l", "bandwidth": 1e10, "latency": 1e-6,
                                          "routes": [["gpu0", "gpu1"], ["gpu1", "gpu0"]]}]})
    plans = plan(load_network(TINY), tight, PlanRequest(global_batch=2))
    assert [p.fits for p in plans] == sorted((p.fits for p in plans), reverse=True)  # fitting ones first


def test_the_cli_prints_the_plans(capsys):
    from placement_core.cli import main
    code = main(["plan", "--network", TINY, "--devices", "dgx-a100:nodes=2", "--global-batch", "16", "--pp", "2",
                 "--micro-batch", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    best = out["best"]
    assert {"tp", "pp", "dp", "micro_batch", "schedule", "virtual_stages", "recompute", "zero", "step_time_s",
            "peak_memory_bytes", "fits", "breakdown"} <= set(best)
    assert (best["tp"], best["pp"], best["dp"], best["micro_batches"]) == (1, 2, 8, 1)
    model = out["model"]
    assert model["gpus"] == 16 and model["tokens_per_step"] == 16 * 32
    assert best["model_tflops_per_gpu"] == pytest.approx(model["matmul_flops_per_step"] / best["step_time_s"] / 16 / 1e12)
    assert best["breakdown"]["infiniband_bytes"] > 0  # the second stage is the second node
    assert main(["plan", "--network", TINY, "--devices", "dgx-a100:nodes=1", "--global-batch", "8", "--tp", "3"]) == 2
    assert "does not divide" in capsys.readouterr().err
    assert main(["plan", "--network", TINY, "--devices", "dgx-a100:nodes=1", "--global-batch", "8", "--pp", "8"]) == 0
    text = capsys.readouterr().out
    assert "tp  pp  dp" in text and "plans simulated" in text
    assert np.isfinite(best["step_time_s"])


def test_a_gpus_memory_in_its_parts():
    """One GPU, SGD: weights and gradients are the network's parameter bytes each, no optimizer state; the rest
    of the peak is activations. Adam adds 6 bytes per bf16 weight byte; ZeRO-1 over a group of 4 a quarter."""
    from placement_core.optimize.plans import memory_parts
    graph = load_network(TINY)
    params = sum(op.param_bytes for op in graph.ops)
    p, problem = simulate_plan(graph, _one_gpu(), [0], 1, 1, 2, PlanRequest(global_batch=2, optimizer="sgd"))
    parts = memory_parts(problem, p.placement)
    assert parts["weights"][0] == pytest.approx(params) and parts["gradients"][0] == pytest.approx(params)
    assert parts["optimizer"][0] == 0.0
    assert sum(v[0] for v in parts.values()) == pytest.approx(p.peak_memory_bytes)
    devices = load_devices("dgx-a100:nodes=1")
    p, problem = simulate_plan(graph, devices, list(range(8)), 2, 4, 1, PlanRequest(global_batch=8, zero=1))
    parts = memory_parts(problem, p.placement)
    assert sum(parts["weights"]) == pytest.approx(4 * params)  # four replicas of each stage's weights
    assert sum(parts["optimizer"]) == pytest.approx(6 * params)  # 6 per weight byte, a quarter on each replica


def test_a_transformer_is_cut_evenly_by_layers_as_megatron_does():
    from placement_core.optimize.plans import even_layer_cuts
    g = load_network("gpt:layers=4,hidden=64,heads=4,seq=32,vocab=100")
    starts = [i for i, op in enumerate(g.ops) if op.name.endswith(".ln1")]
    assert even_layer_cuts(g, 2) == [0, starts[2], len(g)]  # tokens, embed, l0, l1 | l2, l3, ln_f, logits, loss
    assert even_layer_cuts(g, 3) is None and even_layer_cuts(load_network("resnet50"), 2) is None


def test_exports_of_a_plan():
    from placement_core.families.gpt import parse
    from placement_core.optimize.plan_export import export
    spec = "gpt:layers=4,hidden=64,heads=4,seq=32,vocab=100"
    graph, devices = load_network(spec), load_devices("dgx-a100:nodes=2")
    p, _ = simulate_plan(graph, devices, list(range(16)), 2, 8, 1, PlanRequest(global_batch=32, zero=1))
    config = parse(spec)
    cmd = export("megatron", graph, config, p, 2, 8, 32, "adam")
    assert cmd == ("torchrun --nnodes=2 --nproc-per-node=8 pretrain_gpt.py --tensor-model-parallel-size 1 "
                   "--pipeline-model-parallel-size 2 --micro-batch-size 1 --global-batch-size 32 --num-layers 4 "
                   "--hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 --bf16 "
                   "--use-distributed-optimizer")
    nemo = export("nemo", graph, config, p, 2, 8, 32, "adam")
    assert "model.pipeline_model_parallel_size=2" in nemo and "trainer.num_nodes=2" in nemo
    stages = json.loads(export("stages", graph, config, p, 2, 8, 32, "adam"))
    assert [(c["first_op"], c["last_op"], c["layers"]) for c in stages["chunks"]] == [
        ("tokens", "l1.add2", [0, 1]), ("l2.ln1", "loss", [2, 3])]
    with pytest.raises(InputError, match="Megatron-LM trains with Adam"):
        export("megatron", graph, config, p, 2, 8, 32, "sgd")
    with pytest.raises(InputError, match="need a gpt: network"):
        export("megatron", graph, None, p, 2, 8, 32, "adam")
    odd = load_network("gpt:layers=3,hidden=64,heads=4,seq=32,vocab=100")
    q, _ = simulate_plan(odd, devices, list(range(16)), 2, 8, 1, PlanRequest(global_batch=32))
    with pytest.raises(InputError, match="unevenly"):
        export("megatron", odd, parse("gpt:layers=3,hidden=64,heads=4,seq=32,vocab=100"), q, 2, 8, 32, "adam")


def test_the_cli_exports_the_picked_plan(capsys):
    from placement_core.cli import main
    base = ["plan", "--network", TINY, "--devices", "dgx-a100:nodes=1", "--global-batch", "8"]
    assert main(base + ["--pp", "2", "--micro-batch", "2", "--export", "megatron"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("torchrun --nnodes=1 --nproc-per-node=8 pretrain_gpt.py") and "--micro-batch-size 2" in out
    assert main(base + ["--tp", "1", "--export", "stages", "--pick", "11"]) == 2
    assert "there are 10 plans, not 11" in capsys.readouterr().err


def test_recomputed_flops_by_hand_and_the_hardware_rate_of_a_plan(capsys):
    """Full recomputation runs each layer's forward again: 72 becomes 96 on the layers, so the step's hardware
    FLOPs are Narayanan et al.'s 96·B·s·L·h²·(1 + s/6h + V/16Lh); selective recomputation re-runs the
    attention's two s x s matmuls, 4·B·s²·h a layer."""
    from placement_core.cli import main
    from placement_core.families import gpt

    c = gpt.parse("gpt:layers=2,hidden=64,heads=4,seq=32,vocab=100", 8)
    B, s, L, h, V = 8, 32, 2, 64, 100
    assert c.matmul_flops() + c.recomputed_flops("full") == pytest.approx(
        96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h)))
    assert c.recomputed_flops("selective") == 4 * B * s * s * h * L == 4_194_304
    assert c.recomputed_flops("none") == 0
    args = ["plan", "--network", "gpt:layers=2,hidden=64,heads=4,seq=32,vocab=100", "--devices", "dgx-a100:nodes=1",
            "--global-batch", "8", "--tp", "1", "--pp", "1", "--micro-batch", "1", "--recompute", "full"]
    assert main(args + ["--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    best = out["best"]
    assert best["recompute"] == "full"
    assert best["hardware_tflops_per_gpu"] == pytest.approx(
        (c.matmul_flops() + c.recomputed_flops("full")) / best["step_time_s"] / 8 / 1e12)
    assert best["hardware_tflops_per_gpu"] > best["model_tflops_per_gpu"]
    assert main(args) == 0
    header = [line for line in capsys.readouterr().out.splitlines() if line.startswith("tp ")][0]
    assert header.rstrip().endswith("TFLOP/s per GPU  with recompute")
