"""The built-in networks: sizes against published figures, and reproducible from torchvision."""

import pytest

from placement_core.formats.catalog import builtin_networks, load_network
from placement_core.formats.network import network_to_dict

# Published per-image multiply-accumulates (torchvision model docs, "GFLOPS" there = GMACs) and parameters.
PUBLISHED = {
    "alexnet": (0.71e9, 61.10e6),
    "vgg16": (15.47e9, 138.36e6),
    "resnet50": (4.09e9, 25.56e6),
    "inception_v3": (5.71e9, 23.83e6),  # without the auxiliary classifier (27.16M with it)
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_sizes_match_published_figures(name):
    g = load_network(name)
    assert g.batch_size == 128
    macs, params = PUBLISHED[name]
    t = g.totals()
    compute = sum(o.fwd_flops for o in g.ops if o.kind in ("conv", "linear"))
    assert compute / 128 / 2 == pytest.approx(macs, rel=0.02)
    assert t["param_bytes"] / 4 == pytest.approx(params, rel=0.01)
    # backward: input + weight gradients, except the first layer's input gradient
    first = [o for o in g.ops if o.kind == "conv" and o.inputs == (g.ops[0].name,)]
    assert len(first) == 1 and first[0].bwd_flops == first[0].fwd_flops
    bwd = sum(o.bwd_flops for o in g.ops if o.kind in ("conv", "linear"))
    assert bwd == pytest.approx(2 * compute - first[0].fwd_flops)


def test_batch_size_is_a_parameter():
    g32 = load_network("resnet50", batch_size=32)
    g128 = load_network("resnet50")
    assert g32.totals()["fwd_flops"] == pytest.approx(g128.totals()["fwd_flops"] / 4)
    assert g32.totals()["param_bytes"] == g128.totals()["param_bytes"]
    assert g32.ops[0].shape == (32, 3, 224, 224)


@pytest.mark.slow
@pytest.mark.parametrize("name", builtin_networks())
def test_committed_json_is_what_the_script_generates(name):
    pytest.importorskip("torchvision")
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from make_builtin_networks import BATCH, MODELS

    from placement_core.torch.model_import import import_module
    build, shape, *batch = MODELS[name]
    fresh = import_module(build(), shape, name=name, batch_size=batch[0] if batch else BATCH)
    assert network_to_dict(fresh) == network_to_dict(load_network(name))


def test_transformers_match_published_figures():
    """ViT-B/16: 86.57M parameters, 17.56 GMACs per image (torchvision's docs); GPT-2 small: 124.44M with the
    tied head. Both split their backward into input and weight gradients per op (zb-h1)."""
    vit, gpt = load_network("vit_b_16"), load_network("gpt2")
    assert vit.batch_size == 128 and gpt.batch_size == 32
    assert vit.totals()["param_bytes"] / 4 == pytest.approx(86.57e6, rel=1e-3)
    compute = sum(o.fwd_flops for o in vit.ops if o.kind in ("conv", "linear", "attention"))
    assert compute / 128 / 2 == pytest.approx(17.56e9, rel=0.01)
    assert gpt.totals()["param_bytes"] == 124_439_808 * 4
    assert gpt.ops[0].shape == (32, 1024) and gpt.op("wte").kind == "embedding"
    for g in (vit, gpt):
        shares = {o.kind: o.weight_grad_share for o in g.ops if o.bwd_flops > 0}
        assert shares["linear"] == 0.5 and shares["attention"] in (0.0, 0.5) and shares.get("reshape", 0.0) == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["gpt2", "vit_b_16"])
def test_transformers_simulate_on_every_preset(name):
    """Every preset, every schedule: a pipeline of the preset's GPUs (stages:P, or P x 2 chunks for
    interleaved 1F1B) simulates to a positive step with the bubble between 0 and 1."""
    from placement_core.analysis.pipeline import even_stages
    from placement_core.formats.catalog import builtin_devices, load_devices
    from placement_core.problem import ProblemSpec
    g = load_network(name)
    for preset in builtin_devices():
        d = load_devices(preset)
        p = min(4, sum(dv.kind == "gpu" for dv in d.devices) or len(d))
        for schedule, v in (("thesis", 1), ("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2), ("zb-h1", 1)):
            placement = even_stages(g, d, p, virtual_stages=v)
            spec = ProblemSpec(schedule=schedule, micro_batches=1 if schedule == "thesis" else 8, virtual_stages=v)
            r = spec.build(g, d).simulate(placement).result
            used = r.busy > 0
            assert r.makespan > 0 and used.sum() == p
            assert 0 <= r.idle_fraction()[used].mean() < 1
