"""Importing PyTorch models: FLOPs and shapes by hand, torchvision, the export fallback, clear errors,
and coarsening into groups (Merge-and-Colocate)."""

from pathlib import Path

import pytest

from placement_core.base.errors import InputError
from placement_core.model.graph import Graph, Op
from placement_core.model.coarsen import coarsen, contract, expand_assignment, groups_path, read_groups, write_groups
from placement_core.torch.sources import parse_input_shape, parse_source

torch = pytest.importorskip("torch")

from placement_core.torch.model_import import import_module, trace_for_batch, trace_model  # noqa: E402
from placement_core.torch.sources import load_model  # noqa: E402

MODELS = str(Path(__file__).resolve().parent / "torch_models.py")


def src(name: str) -> str:
    return f"{MODELS}:{name}"


def test_small_cnn_flops_and_shapes_by_hand():
    g = import_module(load_model(src("SmallCNN")), (2, 3, 8, 8), name="small")
    assert [o.name for o in g.ops] == ["x", "conv1", "relu", "pool", "flatten", "fc"]
    assert [o.kind for o in g.ops] == ["input", "conv", "activation", "pool", "reshape", "linear"]
    assert [o.inputs for o in g.ops] == [(), ("x",), ("conv1",), ("relu",), ("pool",), ("flatten",)]
    ops = {o.name: o for o in g.ops}
    assert ops["conv1"].shape == (2, 4, 8, 8) and ops["pool"].shape == (2, 4, 4, 4) and ops["fc"].shape == (2, 10)
    # conv: 2 * kh*kw*cin * cout * Hout*Wout * N; the first layer needs no input gradient, so bwd = fwd
    assert ops["conv1"].fwd_flops == 2 * 3 * 3 * 3 * 4 * 8 * 8 * 2 == 27648
    assert ops["conv1"].bwd_flops == 27648
    # linear: 2 * in * out * N, backward twice that (input and weight gradients)
    assert ops["fc"].fwd_flops == 2 * 64 * 10 * 2 and ops["fc"].bwd_flops == 2 * 2560
    # pooling: kh*kw * C*Hout*Wout*N; the activation counts one FLOP per element
    assert ops["pool"].fwd_flops == 2 * 2 * 4 * 4 * 4 * 2
    assert ops["relu"].fwd_flops == 4 * 8 * 8 * 2
    assert ops["flatten"].fwd_flops == 0
    # bytes (float32): parameters (weights + biases), activations, traffic = inputs + output + parameters
    assert ops["conv1"].param_bytes == 4 * (3 * 3 * 3 * 4 + 4) and ops["fc"].param_bytes == 4 * (64 * 10 + 10)
    assert ops["x"].output_bytes == 4 * 2 * 3 * 8 * 8 and ops["conv1"].output_bytes == 4 * 2 * 4 * 8 * 8
    assert ops["conv1"].mem_bytes == 1536 + 2048 + 448
    assert ops["conv1"].module == "conv1" and ops["flatten"].module is None


def test_batch_size_scales_what_it_should():
    g2 = import_module(load_model(src("SmallCNN")), (2, 3, 8, 8))
    g8 = import_module(load_model(src("SmallCNN")), (2, 3, 8, 8), batch_size=8)
    assert g8.batch_size == 8 and g8.op("fc").shape == (8, 10)
    assert g8.totals()["fwd_flops"] == pytest.approx(4 * g2.totals()["fwd_flops"])
    assert g8.totals()["param_bytes"] == g2.totals()["param_bytes"]


@pytest.mark.slow
def test_torchvision_resnet18_matches_published_size():
    g = import_module(load_model("torchvision:resnet18"), (2, 3, 224, 224), name="resnet18")
    convs = [o for o in g.ops if o.kind == "conv"]
    assert len(convs) == 20 and sum(o.kind == "linear" for o in g.ops) == 1
    macs = sum(o.fwd_flops for o in g.ops if o.kind in ("conv", "linear")) / 2 / 2
    assert macs == pytest.approx(1.814e9, rel=0.02)  # torchvision: 1.81 GFLOPS (= GMACs) per image
    assert g.totals()["param_bytes"] / 4 == pytest.approx(11_689_512, rel=1e-6)
    assert g.op("layer1.0.relu#2").module == "layer1.0.relu"  # a module called twice


def test_export_fallback_when_fx_cannot_trace():
    traced = trace_model(load_model(src("ShapeBranch")), (2, 3, 8, 8), name="shape")
    assert traced.method == "export"
    g = traced.graph
    assert [o.name for o in g.ops] == ["x", "c", "bn", "relu", "mean", "fc"]  # leaf modules named by path
    assert g.op("c").kind == "conv" and g.op("bn").kind == "norm"
    assert g.op("c").fwd_flops == 2 * 3 * 3 * 3 * 8 * 6 * 6 * 2
    assert g.op("c").param_bytes == 4 * (3 * 3 * 3 * 8 + 8)
    assert g.op("bn").param_bytes == 4 * 16  # weight and bias; the running statistics are buffers
    assert set(traced.node_op.values()) == {o.name for o in g.ops}


def test_a_depthwise_convolution_keeps_its_groups_through_fx_and_export():
    """MobileNet's depthwise convolutions: groups recorded on the op (so a channel split is refused), by fx
    from the module and by torch.export from aten.convolution's arguments."""
    from torch import nn

    from placement_core.model.sharding import extent

    class Depthwise(nn.Module):
        def __init__(self):
            super().__init__()
            self.dw = nn.Conv2d(4, 4, 3, padding=1, groups=4)
            self.pw = nn.Conv2d(4, 6, 1)

        def forward(self, x):
            return self.pw(self.dw(x))

    g = import_module(Depthwise(), (2, 4, 8, 8), name="dw")
    assert g.op("dw").groups == 4 and g.op("pw").groups == 1
    assert extent(g.op("dw"), g, "channel")[0] == 0 and extent(g.op("pw"), g, "channel")[0] == 6
    from placement_core.torch.fx_import import conv_groups

    class Node:  # an exported graph's call: aten.convolution(x, w, b, stride, padding, dilation, transposed,
        op, target, kwargs = "call_function", "aten.convolution.default", {}  # output_padding, groups)
        args = ("x", "w", None, [1, 1], [1, 1], [1, 1], False, [0, 0], 4)
    assert conv_groups(Node(), None) == 4
    Node.target, Node.args = "torch.nn.functional.conv2d", ("x", "w", None, 1, 1, 1, 2)
    assert conv_groups(Node(), None) == 2
    Node.target = "aten.conv2d.default"  # (x, w, b, stride, padding, dilation, groups)
    assert conv_groups(Node(), None) == 2
    Node.args, Node.kwargs = ("x", "w"), {"groups": 3}
    assert conv_groups(Node(), None) == 3


def test_untraceable_model_says_why_and_what_to_try():
    with pytest.raises(InputError) as e:
        trace_model(load_model(src("DataBranch")), (2, 4))
    text = str(e.value)
    assert "DataBranch cannot be traced" in text and "torch.fx" in text and "torch.export" in text
    assert "torch.where" in text


@pytest.mark.parametrize("source, message", [
    ("resnet18", "cannot tell where model"),
    ("torchvision:resnet19", "Did you mean resnet18"),
    ("torchvision:resnet18(depth=3)", "unexpected keyword"),
    ("torchvision:resnet18(weights='DEFAULT')", "not downloaded"),
    ("torchvision:resnet18(x=open('f'))", "not a Python literal"),
    ("no/such/file.py:Net", "no such file"),
    (f"{MODELS}:SmalCNN", "Did you mean SmallCNN"),
    (f"{MODELS}:not_a_module", "not a torch.nn.Module"),
    (f"{MODELS}:Broken", "ValueError: no weights for you"),
    (f"{MODELS}:instance(x=1)", "takes no arguments"),
])
def test_bad_sources(source, message):
    with pytest.raises(InputError) as e:
        load_model(source)
    assert message in str(e.value) and str(e.value).startswith("model: ")


def test_sources_with_arguments_and_instances():
    assert parse_source("torchvision:googlenet(aux_logits=False, init_weights=False)").kwargs == {
        "aux_logits": False, "init_weights": False}
    assert load_model(f"{MODELS}:build_small(width=7)")[0].out_features == 7
    assert isinstance(load_model(f"{MODELS}:instance"), torch.nn.Sequential)
    assert parse_input_shape("1,3,32,32") == (1, 3, 32, 32) == parse_input_shape("1x3x32x32")
    with pytest.raises(InputError):
        parse_input_shape("1,three")
    with pytest.raises(InputError, match="on an input of shape"):
        trace_model(load_model(src("SmallCNN")), (2, 3, 10, 10))  # 4*5*5 = 100 features reach Linear(64, 10)


def _same_network(a: Graph, b: Graph, skip=()) -> None:
    assert a.batch_size == b.batch_size and [o.name for o in a.ops] == [o.name for o in b.ops]
    for x, y in zip(a.ops, b.ops):
        assert (x.kind, x.inputs, x.shape, x.module) == (y.kind, y.inputs, y.shape, y.module), x.name
        if x.name in skip:
            continue
        for key in ("fwd_flops", "bwd_flops", "output_bytes", "param_bytes", "mem_bytes"):
            assert getattr(x, key) == pytest.approx(getattr(y, key), rel=1e-12), (x.name, key)
    if not skip:
        assert a.totals() == pytest.approx(b.totals(), rel=1e-12)


@pytest.mark.slow
def test_resnet18_at_32x32_imports_from_a_batch_of_one():
    # layer4 is 1x1 at a 32x32 input: BatchNorm in training mode refuses one value per channel, so the
    # recording pass runs BatchNorm in eval mode (same shapes and FLOPs) and the batch is rescaled.
    model = load_model("torchvision:resnet18")
    g1 = import_module(model, (1, 3, 32, 32), name="resnet18", batch_size=8)
    g8 = import_module(load_model("torchvision:resnet18"), (8, 3, 32, 32), name="resnet18")
    _same_network(g1, g8)
    assert g1.op("layer4.1.bn2").shape == (8, 512, 1, 1)
    # conv + linear MACs per image, by hand: conv1 7x7 3->64 at 16x16; layer1 4 x 3x3 64->64 at 8x8;
    # layers 2-4 each: a strided 3x3 C->2C, three 3x3 2C->2C and a 1x1 C->2C downsample at (8/2^k)^2,
    # which all come to 8,388,608; fc 512->1000. FLOPs = 2 x MACs x batch 8.
    layer = 64 * 128 * 9 * 16 + 3 * 128 * 128 * 9 * 16 + 64 * 128 * 16
    assert layer == 8_388_608 == 128 * 256 * 9 * 4 + 3 * 256 * 256 * 9 * 4 + 128 * 256 * 4
    macs = 3 * 64 * 49 * 16 * 16 + 4 * 64 * 64 * 9 * 8 * 8 + 3 * layer + 512 * 1000
    assert sum(o.fwd_flops for o in g1.ops if o.kind in ("conv", "linear")) == 2 * macs * 8 == 600_375_296
    assert g1.totals()["param_bytes"] == 4 * 11_689_512
    # the trace leaves the model as it was: training mode, running statistics untouched
    assert all(m.training for m in model.modules())
    assert torch.equal(model.bn1.running_mean, torch.zeros(64)) and int(model.bn1.num_batches_tracked) == 0


@pytest.mark.workers
def test_dashboard_importer_traces_one_sample_at_the_users_batch():
    from dashboard.torch_import import import_model
    g = import_model("torchvision:resnet18", "3, 32, 32", 32)
    assert g.batch_size == 32 and g.op("layer4.1.bn2").shape == (32, 512, 1, 1)
    # the hand count of the test above, at batch 32
    assert sum(o.fwd_flops for o in g.ops if o.kind in ("conv", "linear")) == 4 * 600_375_296


@pytest.mark.slow
def test_export_fallback_from_a_batch_of_one():
    # torch.export runs the model in training mode and refuses batch 1 before the 1x1 BatchNorm:
    # the model is exported at batch 2 and the graph rescaled.
    traced = trace_model(load_model(src("PooledShapeBranch")), (1, 3, 8, 8), name="pooled")
    assert traced.method == "export" and traced.batch == 2 and traced.graph.batch_size == 1
    g = import_module(load_model(src("PooledShapeBranch")), (1, 3, 8, 8), name="pooled", batch_size=4)
    g4 = import_module(load_model(src("PooledShapeBranch")), (4, 3, 8, 8), name="pooled")
    assert [o.name for o in g.ops] == ["x", "c", "pool", "bn", "relu", "flatten", "fc"]
    _same_network(g, g4, skip={"bn"})
    assert g.op("c").fwd_flops == 2 * 3 * 3 * 3 * 8 * 6 * 6 * 4 and g.op("bn").shape == (4, 8, 1, 1)
    # the exported BatchNorm also counts num_batches_tracked += 1 (1 FLOP, an 8-byte int64), which a
    # rescaled graph scales with the batch like everything else: 4 FLOPs per element + 1, traced at 2
    assert g4.op("bn").fwd_flops == 4 * 4 * 8 + 1 and g.op("bn").fwd_flops == 2 * (4 * 2 * 8 + 1)
    assert g4.op("bn").output_bytes == 4 * 4 * 8 + 8 and g.op("bn").output_bytes == 2 * (4 * 2 * 8 + 8)
    # a run at batch 4 gets a program exported at batch 4
    assert trace_for_batch(load_model(src("PooledShapeBranch")), (1, 3, 8, 8), 4).batch == 4


# -- coarsening (no torch needed, but cheap) -----------------------------------------------------------

def _chain() -> Graph:
    # x -> a -> b -> c -> d, compute 10, 1, 8, 2 GFLOP; edge bytes x-a 5, a-b 100, b-c 10, c-d 50
    def op(name, inputs, flops, out):
        return Op(name, "conv", tuple(inputs), fwd_flops=flops, bwd_flops=flops, output_bytes=out)
    return Graph("chain", [Op("x", "input", (), output_bytes=5, shape=(1, 3)), op("a", ["x"], 10e9, 100),
                           op("b", ["a"], 1e9, 10), op("c", ["b"], 8e9, 50), op("d", ["c"], 2e9, 4)])


def test_coarsen_merges_cheapest_into_heaviest_neighbour():
    coarse, groups = coarsen(_chain(), 3)
    # b (cheapest) joins a (100 bytes beat 10), then d joins c; the input stays alone
    assert groups == {"x": ["x"], "a+1": ["a", "b"], "c+1": ["c", "d"]}
    assert [o.name for o in coarse.ops] == ["x", "a+1", "c+1"]
    ab, cd = coarse.op("a+1"), coarse.op("c+1")
    assert ab.fwd_flops == 11e9 and cd.fwd_flops == 10e9
    assert ab.output_bytes == 110 and cd.inputs == ("a+1",)
    assert coarse.edge_bytes(1, 2) == 10  # only b's output crosses to the c+d group
    assert coarse.totals()["fwd_flops"] == _chain().totals()["fwd_flops"]


def test_coarsen_keeps_the_graph_acyclic_and_maps_back():
    # diamond: merging s with t directly would need the path through m
    g = Graph("diamond", [Op("x", "input", (), output_bytes=1, shape=(1,)),
                          Op("s", "conv", ("x",), fwd_flops=5e9, output_bytes=10),
                          Op("m", "conv", ("s",), fwd_flops=9e9, output_bytes=10),
                          Op("t", "conv", ("s", "m"), fwd_flops=1e9, output_bytes=1000)])
    coarse, groups = coarsen(g, 2)
    assert len(coarse) == 2 and sorted(m for ms in groups.values() for m in ms) == ["m", "s", "t", "x"]
    assert expand_assignment({"x": "cpu0", [k for k in groups if k != "x"][0]: "cpu1"}, groups) == {
        "x": "cpu0", "s": "cpu1", "m": "cpu1", "t": "cpu1"}
    with pytest.raises(InputError, match="cannot be coarsened below 2"):
        coarsen(g, 1)


def test_coarsened_resnet_and_group_file(tmp_path):
    g = import_module(load_model("torchvision:resnet18"), (2, 3, 32, 32), name="resnet18")
    coarse, groups = coarsen(g, 12)
    assert len(coarse) <= 12
    members = sorted(m for ms in groups.values() for m in ms)
    assert members == sorted(o.name for o in g.ops)
    for key in ("fwd_flops", "bwd_flops", "param_bytes", "activation_bytes"):
        assert coarse.totals()[key] == pytest.approx(g.totals()[key])
    path = tmp_path / "net.json"
    assert groups_path(path) == tmp_path / "net.groups.json"
    write_groups(groups_path(path), coarse.name, groups)
    assert read_groups(groups_path(path)) == groups
    assert contract(g, [[o.name] for o in g.ops]).totals() == g.totals()
