"""The parametric GPT (issue 28, item 1): its parameters and FLOPs against published closed forms and a
case worked by hand, its bytes per precision, and its spec's errors."""

from __future__ import annotations

import numpy as np
import pytest

from placement_core import InputError, Problem, load_devices, load_network
from placement_core.families.gpt import gpt_network, parse

MATMULS = ("linear", "matmul")


def _params(graph, elem_bytes):
    return sum(o.param_bytes for o in graph.ops) / elem_bytes


def test_gpt2_small_has_its_published_parameter_count():
    c = parse("gpt:layers=12,hidden=768,heads=12")  # seq 1024, vocab 50257, tied: GPT-2 small
    assert c.parameters() == 124_439_808
    g = gpt_network(c)
    assert _params(g, 2) == 124_439_808 + 50257 * 768  # the tied logit layer's copy, resident where it runs
    assert len(g) == 12 * 12 + 5  # 12 ops a layer; tokens, embed, ln_f, logits, loss


def test_untied_output_layer_adds_its_weights_and_bias():
    tied = parse("gpt:layers=2,hidden=64,heads=4,seq=32,vocab=100")
    untied = parse("gpt:layers=2,hidden=64,heads=4,seq=32,vocab=100,tied=0")
    assert untied.parameters() - tied.parameters() == 100 * 64 + 100
    assert _params(gpt_network(untied), 2) == untied.parameters()
    assert _params(gpt_network(tied), 2) == tied.parameters() + 100 * 64  # the copy
    assert _params(gpt_network(untied), 2) - _params(gpt_network(tied), 2) == 100  # the bias


def test_a_tiny_gpt_worked_by_hand():
    # L=1, H=4, A=2, S=3, V=5, B=2: rows = 6
    g = load_network("gpt:layers=1,hidden=4,heads=2,seq=3,vocab=5,batch=2")
    fwd = {o.name: o.fwd_flops for o in g.ops if o.kind in MATMULS}
    assert fwd == {"l0.qkv": 2 * 4 * 12 * 6, "l0.scores": 2 * 3 * 3 * 2 * 2 * 2,  # per head 2·S·S·(H/A), 2 heads, B=2
                   "l0.context": 144, "l0.proj": 2 * 4 * 4 * 6, "l0.fc1": 2 * 4 * 16 * 6, "l0.fc2": 768,
                   "logits": 2 * 4 * 5 * 6}
    assert sum(fwd.values()) == 2832
    total = sum(o.fwd_flops + o.bwd_flops for o in g.ops if o.kind in MATMULS)
    assert total == 3 * 2832 == 8496
    # Narayanan et al. (SC'21): 72·B·s·l·h²·(1 + s/6h + V/12lh) = 6912 · (1 + 1/8 + 5/48)
    assert parse("gpt:layers=1,hidden=4,heads=2,seq=3,vocab=5,batch=2").matmul_flops() == pytest.approx(8496)
    scores = g.op("l0.scores")
    assert scores.shape == (2, 2, 3, 3) and scores.output_bytes == 2 * 2 * 3 * 3 * 2  # bf16: 2 bytes


@pytest.mark.parametrize("spec", ["gpt:layers=4,hidden=256,heads=8,seq=128,vocab=1000,batch=3",
                                  "gpt:layers=24,hidden=2048,heads=16,seq=2048"])
def test_matmul_flops_are_the_published_closed_form(spec):
    c = parse(spec)
    g = gpt_network(c)
    total = sum(o.fwd_flops + o.bwd_flops for o in g.ops if o.kind in MATMULS)
    assert total == pytest.approx(c.matmul_flops(), rel=1e-12)


def test_attention_grows_with_the_square_of_the_sequence():
    a = load_network("gpt:layers=1,hidden=64,heads=4,seq=64,vocab=10")
    b = load_network("gpt:layers=1,hidden=64,heads=4,seq=128,vocab=10")
    assert b.op("l0.scores").fwd_flops == 4 * a.op("l0.scores").fwd_flops
    assert b.op("l0.qkv").fwd_flops == 2 * a.op("l0.qkv").fwd_flops


def test_precision_sets_the_bytes():
    bf16 = load_network("gpt:layers=1,hidden=64,heads=4,seq=16,vocab=10")
    fp32 = load_network("gpt:layers=1,hidden=64,heads=4,seq=16,vocab=10,precision=fp32")
    for a, b in zip(bf16.ops, fp32.ops):
        assert b.output_bytes == 2 * a.output_bytes and b.param_bytes == 2 * a.param_bytes
        assert a.fwd_flops == b.fwd_flops
    assert bf16.op("l0.fc1").output_bytes == 8 * 16 * 256 * 2  # batch 8 × seq 16 × 4H, bf16


def test_batch_size_of_the_loader_replaces_the_specs():
    g = load_network("gpt:layers=1,hidden=64,heads=4,seq=16,vocab=10,batch=2", batch_size=6)
    assert g.batch_size == 6 and g.op("l0.qkv").fwd_flops == 2 * 64 * 192 * 6 * 16


def test_one_gpu_runs_every_op_in_turn():
    """On a single device the step is the sum of its ops' times (no transfer, nothing in parallel)."""
    p = Problem(load_network("gpt:layers=2,hidden=128,heads=4,seq=64,vocab=500,batch=2"), load_devices("malvik"))
    d = p.devices.names.index("gpu0")
    r = p.simulate(np.full(p.n_ops, d, dtype=np.int32)).result
    a = p.costs
    assert r.makespan == pytest.approx(float(a.fwd[:, d].sum() + a.bwd[:, d].sum() + a.update[:, d].sum()),
                                       rel=1e-9)


@pytest.mark.parametrize("spec, words", [
    ("gpt:hidden=64,heads=4", "lacks layers"),
    ("gpt:layers=2,hidden=63,heads=4", "not a multiple of heads=4"),
    ("gpt:layers=two,hidden=64,heads=4", "not a whole number"),
    ("gpt:layers=0,hidden=64,heads=4", "outside 1..2,048"),
    ("gpt:layers=2,hidden=64,heads=4,precision=int3", "precision 'int3'"),
    ("gpt:layers=2,layers=3,hidden=64,heads=4", "given twice"),
    ("gpt:layers=2,hidden=64,heads=4,depth=3", "no field 'depth'"),
    ("gpt:layers", "not key=value"),
])
def test_a_bad_spec_names_what_is_wrong(spec, words):
    with pytest.raises(InputError) as err:
        load_network(spec)
    assert words in str(err.value) and err.value.field == "network"


def test_the_cli_simulates_a_gpt(capsys):
    from placement_core.cli import main
    code = main(["simulate", "--network", "gpt:layers=2,hidden=128,heads=4,seq=64,vocab=500",
                 "--devices", "nvlink-8gpu", "--placement", "stages:2", "--schedule", "1f1b",
                 "--micro-batches", "4"])
    out = capsys.readouterr().out
    assert code == 0 and "gpt(layers=2,hidden=128,heads=4,seq=64,vocab=500) (29 ops, batch 8, bf16)" in out
    assert main(["simulate", "--network", "gpt:layers=2,hidden=7,heads=2", "--devices", "malvik",
                 "--placement", "single:gpu0"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "error: network: hidden=7 is not a multiple of heads=2. Give a number of heads that divides the hidden size"]


def test_every_op_with_a_batch_splits_by_batch():
    """Data parallelism splits every op by batch."""
    from placement_core.model.sharding import extent
    g = load_network("gpt:layers=2,hidden=64,heads=4,seq=16,vocab=10,batch=4")
    whole = [op.name for op in g.ops if extent(op, g, "batch")[0] != 4]
    assert whole == []
