"""Applying a placement to a real model: same outputs and gradients as the unplaced model; exports."""

import copy
from pathlib import Path

import pytest

from placement_core.base.errors import InputError

torch = pytest.importorskip("torch")

from placement_core.torch.apply import (check_assignment, module_devices, node_devices, place,  # noqa: E402
                                        placement_snippet, torch_placement_dict)
from placement_core.torch.model_import import trace_model  # noqa: E402
from placement_core.torch.sources import load_model  # noqa: E402

MODELS = str(Path(__file__).resolve().parent / "torch_models.py")

# Two names for the one CPU: torch treats them as different devices, so every boundary gets a real
# transfer node in the graph (a no-op copy), which is what a GPU placement gets.
DEVICES = ("cpu", "cpu:0")


def _same_training_step(source, shape, assign):
    torch.manual_seed(0)
    model = load_model(source)
    reference = copy.deepcopy(model)
    traced = trace_model(model, shape)
    assignment = {op.name: assign(i, op) for i, op in enumerate(traced.graph.ops)}
    placed = place(model, assignment, shape, traced=traced)
    x = torch.randn(shape)
    out_ref, out = reference(x), placed(x)
    out_ref.square().mean().backward()
    out.square().mean().backward()
    assert torch.allclose(out, out_ref, atol=1e-6)
    ref_grads = dict(reference.named_parameters())
    for name, p in placed.named_parameters():
        assert torch.allclose(p.grad, ref_grads[name].grad, atol=1e-6), name
    return placed, assignment


@pytest.mark.workers
@pytest.mark.parametrize("source, shape", [("torchvision:resnet18", (2, 3, 32, 32)),
                                           (f"{MODELS}:Branchy", (2, 3, 8, 8)),
                                           (f"{MODELS}:ShapeBranch", (2, 3, 8, 8))])
def test_alternating_placement_reproduces_outputs_and_gradients(source, shape):
    placed, assignment = _same_training_step(source, shape, lambda i, op: DEVICES[i % 2])
    moves = [n for n in placed.graph.nodes if n.op == "call_function" and n.target.__name__ == "_move"]
    assert len(moves) >= len(assignment) - 2  # nearly every edge crosses


def test_transfers_are_inserted_exactly_at_boundaries():
    # x, conv1, relu on cpu; pool, flatten, fc on cpu:0 -> one transfer (relu -> pool) plus the input's entry
    placed, _ = _same_training_step(f"{MODELS}:SmallCNN", (2, 3, 8, 8), lambda i, op: DEVICES[i >= 3])
    moves = [n for n in placed.graph.nodes if n.op == "call_function" and n.target.__name__ == "_move"]
    assert [(m.args[0].name, m.args[1]) for m in moves] == [("x", "cpu"), ("relu", "cpu:0")]
    assert str(placed.fc.weight.device) == "cpu" and placed.placement["fc"] == "cpu:0"


def test_node_devices_follow_ops_and_parameters_their_users():
    traced = trace_model(load_model(f"{MODELS}:Branchy"), (2, 3, 8, 8))
    devs = node_devices(traced.gm, traced.node_op, {op.name: k for k, op in enumerate(traced.graph.ops)})
    for node in traced.gm.graph.nodes:
        if node.name in traced.node_op:
            assert devs[node.name] == traced.graph.index[traced.node_op[node.name]]


def test_errors_name_the_problem():
    traced = trace_model(load_model(f"{MODELS}:SmallCNN"), (2, 3, 8, 8))
    full = {op.name: "cpu" for op in traced.graph.ops}
    with pytest.raises(InputError, match="no device for op"):
        check_assignment(traced.graph, {k: v for k, v in full.items() if k != "fc"})
    with pytest.raises(InputError, match="Did you mean 'conv1'"):
        check_assignment(traced.graph, {**full, "conv2": "cpu"})
    with pytest.raises(InputError, match="not a torch device"):
        place(load_model(f"{MODELS}:SmallCNN"), {**full, "fc": "tpu7"}, (2, 3, 8, 8))
    shared = load_model(f"{MODELS}:Shared")
    traced = trace_model(shared, (2, 4))
    assert [o.name for o in traced.graph.ops] == ["x", "lin", "relu", "lin#2"]
    with pytest.raises(InputError, match="module 'lin' has parameters and is called by two ops"):
        place(shared, {"x": "cpu", "lin": "cpu", "relu": "cpu", "lin#2": "cpu:0"}, (2, 4), traced=traced)


def test_exports_json_and_a_snippet_that_runs():
    source = f"{MODELS}:Nested"
    traced = trace_model(load_model(source), (2, 6))
    names = [o.name for o in traced.graph.ops]
    assert names == ["x", "features.0", "features.1", "features.2", "head"]
    assignment = dict(zip(names, ["cpu", "cpu:0", "cpu:0", "cpu:0", "cpu"]))
    data = torch_placement_dict(traced.graph, assignment, source=source, input_shape=(2, 6))
    assert data["format"] == "placement-torch/1" and data["ops"] == assignment
    assert data["modules"] == {"features": "cpu:0", "head": "cpu"}  # the parent says it for its children
    assert module_devices(traced.graph, {**assignment, "features.2": "cpu"}) == {
        "features.0": "cpu:0", "features.1": "cpu:0", "features.2": "cpu", "head": "cpu"}
    code = placement_snippet(traced.graph, assignment, source=source, input_shape=(2, 6))
    scope: dict = {}
    exec(compile(code, "snippet.py", "exec"), scope)
    # the module map, plus the input op, which belongs to no module
    assert scope["MODULES"] == {"features": "cpu:0", "head": "cpu"} and scope["OPS"] == {"x": "cpu"}
    model = scope["model"]
    assert model.placement == assignment
    x = torch.randn(2, 6)
    torch.manual_seed(0)
    assert torch.allclose(model(x), model(x))
    text = placement_snippet(traced.graph, assignment, source="torchvision:resnet18", input_shape=(2, 6))
    assert "torchvision.models.get_model('resnet18', weights=None)" in text


@pytest.mark.workers
def test_resnet18_snippet_lists_modules_and_reproduces_the_placement():
    """A split inside layer3.0 (before its conv2): whole modules where they can be, ops where a module is split."""
    shape = (2, 3, 32, 32)
    graph = trace_model(load_model("torchvision:resnet18"), shape).graph
    names = [o.name for o in graph.ops]
    cut = names.index("layer3.0.conv2")
    assignment = {name: DEVICES[i >= cut] for i, name in enumerate(names)}
    code = placement_snippet(graph, assignment, source="torchvision:resnet18", input_shape=shape)
    scope: dict = {}
    torch.manual_seed(0)
    exec(compile(code, "snippet.py", "exec"), scope)
    cpu, other = DEVICES
    assert scope["MODULES"] == {
        "conv1": cpu, "bn1": cpu, "relu": cpu, "maxpool": cpu, "layer1": cpu, "layer2": cpu,
        "layer3.0.conv1": cpu, "layer3.0.bn1": cpu,
        "layer3.0.conv2": other, "layer3.0.bn2": other, "layer3.0.downsample": other, "layer3.1": other,
        "layer4": other, "avgpool": other, "fc": other}
    # layer3.0's ReLU is called on both sides of the cut; its residual add and the root's input and flatten
    # belong to no module on one device
    assert scope["OPS"] == {"x": cpu, "layer3.0.relu": cpu, "add_4": other, "layer3.0.relu#2": other,
                            "flatten": other}
    assert len(code.splitlines()) < 40 < len(graph)  # it listed all 70 ops before
    model = scope["model"]
    assert model.placement == assignment  # exactly, op by op
    # transfers: the input to its device, then layer2's output (to the downsample) and layer3.0.relu's
    # (to conv2) across the cut
    moves = [n for n in model.graph.nodes if n.op == "call_function" and n.target.__name__ == "_move"]
    assert [m.args[1] for m in moves] == [cpu, other, other]
    torch.manual_seed(0)
    reference = load_model("torchvision:resnet18")  # the snippet's model: same seed, same weights
    x = torch.randn(shape)
    assert torch.allclose(model(x), reference(x), atol=1e-5)


def test_place_with_a_module_map():
    source = f"{MODELS}:Nested"
    traced = trace_model(load_model(source), (2, 6))
    placed = place(load_model(source), {"x": "cpu", "features.2": "cpu"}, (2, 6),
                   modules={"features": "cpu:0", "head": "cpu:0"})
    # an op entry overrides its module's
    assert placed.placement == {"x": "cpu", "features.0": "cpu:0", "features.1": "cpu:0", "features.2": "cpu",
                                "head": "cpu:0"}
    with pytest.raises(InputError, match="module 'feature' holds no op.*Did you mean 'features'"):
        place(load_model(source), {"x": "cpu"}, (2, 6), modules={"feature": "cpu", "head": "cpu"})
    with pytest.raises(InputError, match="no device for op"):
        place(load_model(source), {}, (2, 6), modules={"features": "cpu"}, traced=traced)
