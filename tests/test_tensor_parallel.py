"""Megatron tensor parallelism, sequence parallelism, recomputation and ZeRO-3 in ``placement plan`` (issue 28,
items 3 and 4): one rank's graph and its simulated plan against closed forms worked out here by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest

from placement_core import InputError, load_devices, load_network
from placement_core.cost import collectives
from placement_core.families import gpt, gpt_parallel
from placement_core.optimize.plans import PlanRequest, memory_parts, plan, simulate_plan

# one layer, hidden 64, 4 heads, sequences of 32, a vocabulary of 100, bf16
L, H, A, S, V = 1, 64, 4, 32, 100
SPEC = f"gpt:layers={L},hidden={H},heads={A},seq={S},vocab={V}"
MATMULS = ("qkv", "scores", "context", "proj", "fc1", "fc2")


class Recorder:
    """A collective model that records each (kind, bytes) it is asked for and answers 1 ms + 1 ns a byte."""

    def __init__(self):
        self.calls = []

    def __call__(self, kind, nbytes):
        self.calls.append((kind, nbytes))
        return 1e-3 + 1e-9 * nbytes


def _rank(t, batch=8, unit=2, **kw):
    return gpt_parallel.build(gpt.parse(SPEC, batch), t, Recorder(), unit_batch=unit, **kw)


def test_tp_1_is_the_gpt_graph():
    ref, one = gpt.gpt_network(gpt.parse(SPEC, 8)), _rank(1)
    assert one.totals() == ref.totals()
    assert [op.name for op in one.ops] == [op.name for op in ref.ops]


def test_tp_2_halves_each_gpus_matmul_flops_and_shapes():
    one, two = _rank(1), _rank(2)
    for name in MATMULS:
        assert two.op(f"l0.{name}").fwd_flops == one.op(f"l0.{name}").fwd_flops / 2
        assert two.op(f"l0.{name}").bwd_flops == one.op(f"l0.{name}").bwd_flops / 2
    # by hand, B = 8: QKV 2·B·s·h·3h/2 = 2·256·64·96; attention 2·B·s²·h/2 each; MLP 2·B·s·h·4h/2 each
    rows = 8 * S
    assert two.op("l0.qkv").fwd_flops == 2 * rows * H * 96
    assert two.op("l0.scores").fwd_flops == 2 * 8 * S * S * H / 2
    assert two.op("l0.fc1").fwd_flops == two.op("l0.fc2").fwd_flops == 2 * rows * H * 128
    # the GEMM shapes cost/gemm.py sees are the shards': column-parallel outputs 3h/2 and 4h/2 wide, two heads
    assert two.op("l0.qkv").shape == (8, S, 96) and two.op("l0.fc1").shape == (8, S, 128)
    assert two.op("l0.scores").shape == (8, A // 2, S, S) and two.op("l0.proj").shape == (8, S, H)
    from placement_core.cost.gemm import gemm_dims
    assert gemm_dims(two.op("l0.proj"))[3] == H // 2  # row-parallel: K = h/2
    assert gemm_dims(two.op("l0.scores"))[:4] == (8 * 2, S, S, H // A)
    # the logit layer splits the vocabulary
    assert two.op("logits").fwd_flops == one.op("logits").fwd_flops / 2


def test_megatron_has_two_all_reduces_forward_and_two_backward_per_layer():
    comm = Recorder()
    g = gpt_parallel.build(gpt.parse("gpt:layers=3,hidden=64,heads=4,seq=32,vocab=100", 8), 2, comm, unit_batch=2)
    unit_bytes = 2 * S * H * 2  # one micro-batch of 2 sequences: B·s·h bf16 elements
    coll = [op for op in g.ops if op.kind == "collective" and op.name.startswith("l1.")]
    assert [op.name for op in coll] == ["l1.attn.tp_grad_allreduce", "l1.attn.tp_allreduce",
                                        "l1.mlp.tp_grad_allreduce", "l1.mlp.tp_allreduce"]
    t = 1e-3 + 1e-9 * unit_bytes
    scale = 8 / 2  # times are written at the graph's batch, the simulator scales them to a unit of 2
    fwd = [op.times["gpu"]["fwd"] for op in coll]
    bwd = [op.times["gpu"]["bwd"] for op in coll]
    assert fwd == pytest.approx([0, t * scale, 0, t * scale]) and bwd == pytest.approx([t * scale, 0, t * scale, 0])
    # every layer asks for 4 all-reduces of B·s·h elements; the embedding 1, the logit layer's input 1, the loss
    # 3 of one fp32 number per token (counted once: the three are one op)
    per_layer = [("all-reduce", unit_bytes)] * 4
    assert comm.calls == [("all-reduce", unit_bytes)] + per_layer * 3 + [("all-reduce", unit_bytes),
                                                                          ("all-reduce", 2 * S * 4)]


def test_sequence_parallel_gathers_and_scatters_instead():
    comm = Recorder()
    g = gpt_parallel.build(gpt.parse(SPEC, 8), 2, comm, unit_batch=2, sequence_parallel=True)
    names = [op.name for op in g.ops if op.kind == "collective" and op.name.startswith("l0.")]
    assert names == ["l0.attn.tp_allgather", "l0.attn.tp_reducescatter", "l0.mlp.tp_allgather",
                     "l0.mlp.tp_reducescatter"]
    unit_bytes = 2 * S * H * 2
    # each op asks for its forward's collective, then its backward's: all-gather (reduce-scatter backward) before
    # the QKV and fc1, reduce-scatter (all-gather backward) after the projection and fc2
    gather, scatter = ("all-gather", unit_bytes), ("reduce-scatter", unit_bytes)
    assert comm.calls[2:10] == [gather, scatter, scatter, gather] * 2
    assert comm.calls[:2] == [scatter, gather]  # the embedding's output, scattered over the sequence
    assert comm.calls[10:12] == [gather, scatter] and len(comm.calls) == 13  # the logit layer's input; the loss
    # norms and adds work on half of the sequence
    assert g.op("l0.ln1").fwd_flops == 8 * S * H / 2 and g.op("l0.add2").fwd_flops == 8 * S * H / 2


def _kept(g, prefix="l0."):
    return sum(op.output_bytes for op in g.ops if op.name.startswith(prefix))


@pytest.mark.parametrize("t", [1, 2, 4])
def test_activations_kept_per_layer(t):
    """Per layer, bf16, what the graph keeps for the backward, by hand: the layer's input (the previous add),
    the norms' outputs, the second add's input and each half-layer's reduced output, 2·s·b·h bytes each
    (12 s·b·h, replicated), QKV 6/t, the context 2/t, fc1 and GeLU 8/t each (24 s·b·h / t), the scores and
    softmax 2·a·s²·b/t each. Korthikanti et al. (2022, Table 2) count s·b·h·(10 + 24/t) + 5·a·s²·b/t: the same
    sharded part; 1-byte dropout masks where the graph, which has no dropout, keeps the reduced outputs. With
    sequence parallelism all of it divided by t; selective recomputation drops the scores and softmax; full
    keeps the layer's input, 2·s·b·h."""
    B = 8
    sbh, as2b = S * B * H, A * S * S * B
    assert _kept(_rank(t)) == pytest.approx(sbh * (12 + 24 / t) + 4 * as2b / t)
    assert _kept(_rank(t, recompute="selective", layer_forward=_forward)) == pytest.approx(sbh * (12 + 24 / t))
    assert _kept(_rank(t, recompute="full", layer_forward=_forward)) == pytest.approx(2 * sbh)
    if t > 1:
        sp = _rank(t, sequence_parallel=True)
        assert _kept(sp) == pytest.approx(sbh * 36 / t + 4 * as2b / t)


def _forward(g):
    return {op.name: 1e-6 * (i + 1) for i, op in enumerate(g.ops)}


def test_full_recomputation_adds_one_forward_to_the_backward():
    none, full = _rank(2), _rank(2, recompute="full", layer_forward=_forward)
    B, t = 8, 2
    # a layer's forward FLOPs on one of 2 GPUs: matmuls (24·B·s·h² + 4·B·s²·h)/t; memory-bound ops one FLOP an
    # element: 2 norms and 2 adds B·s·h each, GeLU 4·B·s·h/t, softmax a·s²·B/t
    layer = (24 * B * S * H * H + 4 * B * S * S * H) / t + 4 * B * S * H + 4 * B * S * H / t + A * S * S * B / t
    assert full.totals()["bwd_flops"] - none.totals()["bwd_flops"] == pytest.approx(layer)
    assert full.totals()["fwd_flops"] == none.totals()["fwd_flops"]
    # the recomputation op's backward is the layer's forward, timed on a one-layer copy at the unit (2 sequences)
    one = gpt_parallel._build(gpt.parse(SPEC, 2), 2, Recorder(), 1.0, False, "none", {})
    seconds = sum(t for name, t in _forward(one).items() if name.startswith("l0."))
    assert full.op("l0.recompute").times["gpu"] == pytest.approx({"fwd": 0.0, "bwd": seconds * 4})
    sel = _rank(2, recompute="selective", layer_forward=_forward)
    assert sel.op("l0.attn.recompute").bwd_flops == pytest.approx(
        sel.op("l0.scores").fwd_flops + sel.op("l0.softmax").fwd_flops)


def test_the_weights_of_a_rank():
    for t in (1, 2, 4):
        g = _rank(t)
        layer = sum(op.param_bytes for op in g.ops if op.name.startswith("l0."))
        # column-parallel QKV and fc1 (weights and biases), row-parallel proj and fc2 weights split; two norms
        # (2h each) and the two row-parallel biases (h each) whole: (12h² + 7h)/t + 6h parameters, 2 bytes each
        assert layer == 2 * ((12 * H * H + 7 * H) / t + 6 * H)
        assert g.op("embed").param_bytes == 2 * (-(-V // t) + S) * H


def test_a_tp_plan_simulates_its_collectives_as_named_ops():
    spec = "gpt:layers=2,hidden=64,heads=4,seq=32,vocab=100"
    graph, devices, config = load_network(spec), load_devices("dgx-a100:nodes=1"), gpt.parse(spec)
    req = PlanRequest(global_batch=8, tp=2, comm_efficiency=0.5)
    p, problem = simulate_plan(graph, devices, list(range(8)), 2, 2, 2, req, config)
    assert (p.tp, p.pp, p.dp, p.micro_batches) == (2, 2, 2, 2)
    # the simulated GPUs are the first of each pair; stage 0 on GPUs 0 and 2, stage 1 on 4 and 6
    used = {d for g in p.placement.tolist() for d in ((g,) if g < 8 else problem.splits[g - 8].devices)}
    assert used == {0, 2, 4, 6}
    # one all-reduce of a micro-batch shard's B·s·h (2 sequences) on the NVLink between two GPUs, by hand:
    # 2 steps of 5 µs and 2·(1/2)·n bytes at 300 GB/s × 0.5
    n = 2 * S * H * 2
    t_ar = 2 * 5e-6 + n / (300e9 * 0.5)
    assert t_ar == pytest.approx(collectives.ring_allreduce(n, 2, 5e-6, 1 / 150e9))
    trace = problem.simulate(p.placement, trace=True).result.trace
    ars = [e for e in trace if e.kind == "op" and e.op == "l0.attn.tp_allreduce" and e.phase == "fwd"]
    assert len(ars) == 2 * 2  # 2 micro-batches on each of the stage's 2 data-parallel replicas
    assert all(e.end - e.start == pytest.approx(t_ar) for e in ars)
    back = [e for e in trace if e.kind == "op" and e.op == "l1.mlp.tp_grad_allreduce" and e.phase == "bwd"]
    assert len(back) == 4 and all(e.end - e.start == pytest.approx(t_ar) for e in back)
    # the breakdown: the busiest stage's tensor-parallel collectives per step (2 micro-batches), all exposed (a
    # collective occupies its GPU). Stage 0: the embedding's all-reduce and layer 0's four; stage 1: layer 1's
    # four, the logit layer input's (backward) and the loss' three of one fp32 number a token.
    loss = 3 * collectives.allreduce(2 * S * 4, 2, 5e-6, 1 / 150e9)
    stage = {"n0g0": 5 * t_ar, "n0g2": 5 * t_ar, "n0g4": 5 * t_ar + loss, "n0g6": 5 * t_ar + loss}
    assert p.breakdown["tensor_parallel_comm_s"] == pytest.approx(2 * stage[p.breakdown["busiest_gpu"]])
    assert p.breakdown["compute_s"] + p.breakdown["tensor_parallel_comm_s"] + p.breakdown["other_s"] \
        + p.breakdown["data_parallel_comm_s"] == pytest.approx(p.step_time_s)


def test_memory_with_tp_divides_the_layer_weights():
    graph, devices, config = load_network(SPEC), load_devices("dgx-a100:nodes=1"), gpt.parse(SPEC)
    weights = {}
    for t in (1, 2):
        req = PlanRequest(global_batch=8, tp=t, optimizer="sgd")
        p, problem = simulate_plan(graph, devices, list(range(8)), 1, 1, 8, req, config)
        weights[t] = memory_parts(problem, p.placement)["weights"][0]
    # 2 bytes a parameter: the layer (12h² + 7h)/t + 6h, the embedding (V/t + s)·h, the tied logit copy h·V/t,
    # the final norm 2h
    def rank(t):
        return 2 * ((12 * H * H + 7 * H) / t + 6 * H + (V / t + S) * H + H * V / t + 2 * H)
    assert weights[1] == pytest.approx(rank(1)) and weights[2] == pytest.approx(rank(2))


def test_zero_3_shards_the_weights_and_gathers_them_per_layer():
    graph, devices, config = load_network(SPEC), load_devices("dgx-a100:nodes=1"), gpt.parse(SPEC)
    p, problem = simulate_plan(graph, devices, list(range(8)), 1, 4, 2, PlanRequest(global_batch=8, tp=2, zero=3),
                               config)
    ag = problem.graph.op("l0.zero3_allgather")
    layer = sum(op.param_bytes for op in problem.graph.ops if op.name.startswith("l0."))
    # four data-parallel ranks (GPUs 0, 2, 4, 6) in one node: a ring all-gather of the layer's bytes on NVLink
    # at what NCCL reaches on it, 370/450 of the 300 GB/s line rate
    t = collectives.ring_allgather(layer, 4, 5e-6, 1 / (300e9 * 370 / 450))
    unit = 2 / problem.graph.batch_size
    assert ag.times["gpu"]["fwd"] * unit == pytest.approx(t) and ag.times["gpu"]["bwd"] * unit == pytest.approx(t)
    parts = memory_parts(problem, p.placement)
    params = sum(op.param_bytes for op in problem.graph.ops)
    assert parts["weights"][0] == pytest.approx(params / 4)
    assert p.breakdown["zero3_gather_s"] > 0


def test_the_search_covers_tensor_degrees():
    plans = plan(load_network(SPEC), load_devices("dgx-a100:nodes=1"), PlanRequest(global_batch=8),
                 gpt.parse(SPEC))
    # heads 4: tp 1, 2 and 4; t·pp·dp = 8 every time
    assert {p.tp for p in plans} == {1, 2, 4}
    assert all(p.tp * p.pp * p.dp == 8 for p in plans)
    assert [p.step_time_s for p in plans if p.fits] == sorted(p.step_time_s for p in plans if p.fits)


@pytest.mark.parametrize("args, words", [
    (["--tp", "8"], "does not divide the 4 attention heads"),
    (["--tp", "3"], "does not divide the 8 GPUs of a node"),
    (["--tp", "1", "--sequence-parallel"], "sequence parallelism"),
])
def test_what_tensor_parallelism_cannot_do_says_why(capsys, args, words):
    from placement_core.cli import main
    base = ["plan", "--network", SPEC, "--devices", "dgx-a100:nodes=1", "--global-batch", "8"]
    assert main(base + args) == 2
    assert words in capsys.readouterr().err


def test_tp_needs_a_gpt_network():
    with pytest.raises(InputError, match="gpt: network"):
        plan(load_network("resnet50"), load_devices("dgx-a100:nodes=1"), PlanRequest(global_batch=8, tp=2))


def test_the_cli_plans_with_tp_2(capsys):
    from placement_core.cli import main
    code = main(["plan", "--network", SPEC, "--devices", "dgx-a100:nodes=2", "--global-batch", "16", "--tp", "2",
                 "--sequence-parallel", "--recompute", "selective", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    best = out["best"]
    assert (best["tp"], best["sequence_parallel"], best["recompute"]) == (2, True, "selective")
    assert best["tp"] * best["pp"] * best["dp"] == 16 == out["model"]["gpus"]
    assert best["breakdown"]["tensor_parallel_comm_s"] > 0 and np.isfinite(best["step_time_s"])
    assert all(c["tp"] == 2 for c in out["candidates"])
    assert main(["plan", "--network", SPEC, "--devices", "dgx-a100:nodes=1", "--global-batch", "8", "--tp", "2",
                 "--pp", "1", "--micro-batch", "2", "--recompute", "full", "--export", "megatron"]) == 0
    cmd = capsys.readouterr().out
    assert "--tensor-model-parallel-size 2" in cmd and "--recompute-granularity full" in cmd


def test_zero_3_with_full_recomputation_gathers_once_per_pass():
    """Under ZeRO-3 the backward's gather serves the recomputation: the recomputed forward leaves it out."""
    def gather(nbytes):
        return 1.0  # a second: easy to see if it were counted
    g = _rank(2, recompute="full", layer_forward=_forward, param_gather=gather)
    one = gpt_parallel._build(gpt.parse(SPEC, 2), 2, Recorder(), 1.0, False, "none", {}, gather)
    seconds = sum(t for name, t in _forward(one).items() if name.startswith("l0.") and "zero3" not in name)
    assert g.op("l0.recompute").times["gpu"]["bwd"] == pytest.approx(seconds * 4)
    assert g.op("l0.zero3_allgather").times["gpu"] == {"fwd": 4.0, "bwd": 4.0}  # 1 s a unit, at 4 units' batch
