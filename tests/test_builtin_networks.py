"""The built-in networks: sizes against published figures, and reproducible from torchvision."""

import pytest

from placement_core.catalog import builtin_networks, load_network
from placement_core.netformat import network_to_dict

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


@pytest.mark.parametrize("name", builtin_networks())
def test_committed_json_is_what_the_script_generates(name):
    pytest.importorskip("torchvision")
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
    from make_builtin_networks import BATCH, MODELS

    from placement_core.torch.model_import import import_module
    build, shape = MODELS[name]
    fresh = import_module(build(), shape, name=name, batch_size=BATCH)
    assert network_to_dict(fresh) == network_to_dict(load_network(name))
