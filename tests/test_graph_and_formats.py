"""Computation graph: topological order, validation messages, the placement-network/1 format."""

import json

import pytest

from placement_core.base.errors import InputError
from placement_core.model.graph import Graph, Op
from placement_core.formats.network import network_from_dict, network_to_dict


def net(ops, **extra):
    return {"format": "placement-network/1", "name": "t", "batch_size": 4, "ops": ops, **extra}


def test_topological_order_is_deterministic_and_keeps_file_order_on_ties():
    ops = [Op("c", inputs=("a", "b")), Op("b"), Op("a"), Op("d", inputs=("b",))]
    g = Graph("t", ops)
    assert [o.name for o in g.ops] == ["b", "a", "c", "d"]
    assert Graph("t", ops).ops == g.ops
    assert g.parents[g.index["c"]] == (g.index["a"], g.index["b"])
    assert g.sources == [0, 1] and g.sinks == [2, 3]


def test_cycle_is_reported_with_its_ops():
    ops = [Op("a", inputs=("c",)), Op("b", inputs=("a",)), Op("c", inputs=("b",)), Op("d", inputs=("a",))]
    with pytest.raises(InputError) as e:
        Graph("t", ops, source="net.json")
    msg = str(e.value)
    assert msg.startswith("net.json: ops: the network has a cycle: ")
    cycle = msg.split("cycle: ")[1].split(".")[0]
    names = cycle.split(" -> ")
    assert names[0] == names[-1] and sorted(names[:-1]) == ["a", "b", "c"]
    # consecutive names are edges in data-flow direction
    inputs = {o.name: o.inputs for o in ops}
    assert all(names[i] in inputs[names[i + 1]] for i in range(len(names) - 1))


@pytest.mark.parametrize("ops, field, text", [
    ([], "ops", "no ops"),
    ([{"name": "a"}, {"name": "a"}], "ops[1].name", "duplicate op name 'a'"),
    ([{"name": "a", "inputs": ["nope"]}], "ops[0].inputs[0]", "'nope', which is not an op"),
    ([{"name": "a", "inputs": ["a"]}], "ops[0].inputs[0]", "itself"),
    ([{"name": "a", "fwd_flops": -1}], "ops[0].fwd_flops", "must not be negative"),
    ([{"name": "a", "output_bytes": "12"}], "ops[0].output_bytes", "expected a number, got the string '12'"),
    ([{"name": "a", "param_bytes": True}], "ops[0].param_bytes", "expected a number, got a boolean"),
    ([{"name": "a", "mem_bytes": 1e30}], "ops[0].mem_bytes", "implausibly large"),
    ([{"name": ""}], "ops[0].name", "non-empty name"),
    ([{"name": "a", "fwd_flop": 3}], "ops[0]", "unknown field 'fwd_flop'. Did you mean 'fwd_flops'?"),
    ([{"name": "a", "shape": [1, -2]}], "ops[0].shape", "shape must be"),
    ([{"name": "a", "times": {"gpu": {"forward": 1}}}], "ops[0].times.gpu", "unknown phase"),
    (["a"], "ops[0]", "expected an op"),
])
def test_validation_errors_name_the_field(ops, field, text):
    with pytest.raises(InputError) as e:
        network_from_dict(net(ops), source="f.json")
    assert e.value.source == "f.json"
    assert e.value.field == field
    assert text in str(e.value)


def test_wrong_format_and_batch_size():
    with pytest.raises(InputError, match="unknown format"):
        network_from_dict({"format": "v0", "ops": []})
    with pytest.raises(InputError, match="batch_size must be an integer from 1 to 2147483647, got 0"):
        network_from_dict(net([{"name": "a"}], batch_size=0))
    with pytest.raises(InputError, match=r"batch_size must be an integer from 1 to .*, got 1000000000000000000000"):
        network_from_dict(net([{"name": "a"}], batch_size=10**400))
    with pytest.raises(InputError, match=r"ops\[0\]\.shape: shape must be a list of integers from 0 to 1099511627776"):
        network_from_dict(net([{"name": "a", "shape": [4, 2**41]}]))


def test_a_number_too_long_to_read_is_named():
    from placement_core.base.jsonio import parse_json
    with pytest.raises(InputError, match="f.json: holds a number too long to read"):
        parse_json('{"batch_size": ' + "9" * 5000 + "}", "f.json")


def test_round_trip_keeps_everything():
    data = net([
        {"name": "x", "kind": "input", "output_bytes": 400, "shape": [4, 100]},
        {"name": "split", "kind": "other", "inputs": ["x"], "fwd_flops": 10, "bwd_flops": 20, "output_bytes": 400,
         "shape": [4, 100]},
        {"name": "y", "kind": "linear", "inputs": [{"op": "split", "bytes": 160}, "x"], "fwd_flops": 1.5e9,
         "bwd_flops": 3e9, "output_bytes": 40, "param_bytes": 4040, "mem_bytes": 4480, "shape": [4, 10],
         "times": {"gpu0": {"fwd": 0.001, "bwd": 0.002}, "cpu": {"fwd": 0.01}}, "module": "head.fc"},
    ])
    g = network_from_dict(data)
    assert g.edge_bytes(g.index["split"], g.index["y"]) == 160
    assert g.edge_bytes(g.index["x"], g.index["y"]) == 400
    out = network_to_dict(g)
    assert json.loads(json.dumps(out)) == out
    g2 = network_from_dict(out)
    assert g2.ops == g.ops
    assert network_to_dict(g2) == out


def test_batch_size_scales_activations_not_parameters():
    g = network_from_dict(net([
        {"name": "x", "kind": "input", "output_bytes": 400, "shape": [4, 100]},
        {"name": "y", "kind": "linear", "inputs": ["x"], "fwd_flops": 8000, "bwd_flops": 16000,
         "output_bytes": 40, "param_bytes": 4040, "mem_bytes": 400 + 40 + 4040, "shape": [4, 10]},
    ]))
    g8 = g.with_batch_size(8)
    y = g8.op("y")
    assert g8.batch_size == 8
    assert (y.fwd_flops, y.bwd_flops, y.output_bytes, y.param_bytes) == (16000, 32000, 80, 4040)
    assert y.mem_bytes == 2 * (400 + 40) + 4040
    assert y.shape == (8, 10)
    with pytest.raises(InputError, match="positive integer"):
        g.with_batch_size(0)


def test_the_cycle_named_is_the_one_behind_the_stuck_ops():
    """``d`` hangs below the cycle a -> b -> c -> a without being on it: the message names the cycle only,
    in data-flow order from the op listed first."""
    from placement_core.model.graph import topological_order
    ops = [Op("x"), Op("d", inputs=("c",)), Op("a", inputs=("x", "c")), Op("b", inputs=("a",)), Op("c", inputs=("b",))]
    with pytest.raises(InputError, match=r"has a cycle: a -> b -> c -> a\."):
        topological_order(ops)
