"""Sharded ops in files: placement/1's split entries, Exprimo's device lists, and what is refused (with the op)."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

from placement_core.formats.catalog import load_devices, load_network
from placement_core.model.devices import Channel, Device, DeviceGraph
from placement_core.base.errors import InputError
from placement_core.model.graph import Graph, Op
from placement_core.model.placement import placement_from_dict, placement_to_dict
from placement_core.problem import ProblemSpec
from placement_core.model.sharding import Split, even_sizes, extent, search_splits

FIX = Path(__file__).parent / "fixtures" / "exprimo"


def net() -> Graph:
    """data -> conv (8 output channels, NCHW) -> relu -> fc (10 features), batch 4."""
    return Graph("tiny", [
        Op("data", "input", output_bytes=4 * 3 * 8 * 8 * 4, shape=(4, 3, 8, 8)),
        Op("conv", "conv", ("data",), fwd_flops=1e6, bwd_flops=2e6, output_bytes=4 * 8 * 8 * 8 * 4, param_bytes=896,
           mem_bytes=1e4, shape=(4, 8, 8, 8)),
        Op("relu", "activation", ("conv",), output_bytes=4 * 8 * 8 * 8 * 4, mem_bytes=2e4, shape=(4, 8, 8, 8)),
        Op("fc", "linear", ("relu",), fwd_flops=4e5, bwd_flops=8e5, output_bytes=160, param_bytes=20520,
           mem_bytes=3e4, shape=(4, 10)),
    ], batch_size=4)


def gpus(n: int = 3) -> DeviceGraph:
    devs = [Device(f"gpu{i}", "gpu", 1e12, 1e9, 1e11) for i in range(n)]
    routes = tuple((a.name, b.name) for a in devs for b in devs if a is not b)
    return DeviceGraph("g", devs, [Channel("link", 1e10, 1e-6, routes)])


def load(assignment: dict, splits=None):
    return placement_from_dict({"format": "placement/1", "assignment": assignment}, net(), gpus(), source="p.json",
                               splits=splits)


def test_extents_and_even_division():
    g = net()
    assert extent(g.op("conv"), g, "channel")[0] == 8  # NCHW: channels second
    assert extent(g.op("fc"), g, "channel")[0] == 10  # linear: the last dimension
    assert extent(g.op("relu"), g, "channel")[0] == 0
    assert extent(g.op("relu"), g, "batch")[0] == 4
    assert even_sizes(64, 3) == (22, 21, 21)  # Exprimo's conv1 example
    assert even_sizes(4096, 2) == (2048, 2048)


def test_split_entries_load_into_the_table_and_round_trip():
    table: list[Split] = []
    a = {"data": "gpu0", "conv": {"devices": ["gpu0", "gpu1"], "split": "channel"},
         "relu": {"devices": ["gpu0", "gpu1", "gpu2"], "split": "batch", "sizes": [2, 1, 1]},
         "fc": {"devices": ["gpu0", "gpu1"], "split": "channel"}}
    genes = load(a, table)
    assert table == [Split("channel", (0, 1)), Split("batch", (0, 1, 2), (2, 1, 1))]
    assert list(genes) == [0, 3, 4, 3]  # 3 devices, then the splits; conv and fc share one split
    back = placement_to_dict(genes, net(), gpus(), table)
    assert back["assignment"] == a
    again: list[Split] = list(table)
    assert list(load(back["assignment"], again)) == list(genes) and again == table


@pytest.mark.parametrize("entry, op, words", [
    ({"devices": ["gpu0", "gpu0"], "split": "batch"}, "relu", "device 'gpu0' is listed twice"),
    ({"devices": ["gpu0", "gpu1"], "split": "channel"}, "relu", "'relu' (activation) cannot be split by channel"),
    ({"devices": ["gpu0", "gpu1"], "split": "batch", "sizes": [3, 2]}, "relu", "add up to 5, but the op has 4 samples"),
    ({"devices": ["gpu0", "gpu1"], "split": "channel", "sizes": [8]}, "conv", "1 sizes for 2 devices"),
    ({"devices": ["gpu0", "gpu1"], "split": "channel", "sizes": [8, 0]}, "conv", "give a shard nothing"),
    ({"devices": ["gpu0"], "split": "batch"}, "relu", "split over 1 device"),
    ({"devices": ["gpu0", "gpu7"], "split": "batch"}, "relu", "unknown device 'gpu7'"),
    ({"devices": ["gpu0", "gpu1"], "split": "rows"}, "relu", "unknown split dimension 'rows'"),
    ({"devices": ["gpu0", "gpu1", "gpu2"], "split": "batch", "sizes": [1, 1, 1], "dim": 0}, "relu", "unknown key 'dim'"),
])
def test_bad_splits_name_the_op_and_what_is_wrong(entry, op, words):
    a = {"data": "gpu0", "conv": "gpu0", "relu": "gpu0", "fc": "gpu0", op: entry}
    with pytest.raises(InputError, match=re.escape(words)) as err:
        load(a, [])
    assert err.value.source == "p.json" and err.value.field.startswith(f"assignment.{op}")
    assert repr(op) in err.value.message or "gpu7" in err.value.message


def test_a_reader_without_a_table_refuses_splits_with_the_op():
    with pytest.raises(InputError, match="'conv' is split over several devices"):
        load({"data": "gpu0", "conv": {"devices": ["gpu0", "gpu1"], "split": "channel"}, "relu": "gpu0", "fc": "gpu0"})


def test_more_shards_than_channels_is_refused():
    g = Graph("t", [Op("x", "input", output_bytes=8, shape=(2, 1)),
                    Op("fc", "linear", ("x",), output_bytes=16, param_bytes=8, shape=(2, 2))], batch_size=2)
    with pytest.raises(InputError, match="'fc' has 2 output channels, fewer than its 3 shards"):
        placement_from_dict({"format": "placement/1", "assignment": {
            "x": "gpu0", "fc": {"devices": ["gpu0", "gpu1", "gpu2"], "split": "channel"}}}, g, gpus(), splits=[])


def test_search_table_windows_of_one_kind():
    d = load_devices("nvlink-8gpu")  # cpu0, gpu0..gpu7
    t = search_splits(d, ["batch"], 8)
    sets = {s.devices for s in t}
    assert len(t) == sum(8 - k + 1 for k in range(2, 9)) == 28
    assert all(0 not in s for s in sets)  # never the CPU with GPUs
    assert (1, 2, 3, 4, 5, 6, 7, 8) in sets and (4, 5) in sets
    assert len(search_splits(d, ["channel", "batch"], 2)) == 14
    with pytest.raises(InputError, match="unknown split dimension 'rows'"):
        search_splits(d, ["rows"], 2)


def test_problem_spec_keeps_its_split_table_in_json():
    spec = ProblemSpec(splits=(Split("batch", (1, 2)), Split("channel", (0, 1), (3, 5))))
    d = spec.to_dict()
    assert d["splits"] == [{"dim": "batch", "devices": [1, 2], "sizes": None},
                           {"dim": "channel", "devices": [0, 1], "sizes": [3, 5]}]
    assert ProblemSpec.from_dict(json.loads(json.dumps(d))) == spec.resolved()
    assert "splits" not in ProblemSpec().to_dict()  # unsharded specs keep their old JSON


# -- Exprimo's device lists ---------------------------------------------------------------------------


def exprimo(name: str, devices: str = "malvik.json"):
    return load_network(str(FIX / name)), load_devices(str(FIX / devices))


def all_on(g, device: int, **lists) -> dict:
    return {op.name: device for op in g.ops} | lists


def test_exprimo_lists_mean_what_exprimo_means():
    g, d = exprimo("alex_v2.json")
    table: list[Split] = []
    genes = placement_from_dict(all_on(g, 1, fc6=[1, 2], conv1=[2, 1], pool5=[2, 1], softmax=[0, 2]), g, d,
                                splits=table)
    assert table == [Split("channel", (2, 1)), Split("channel", (1, 2))]  # convolutions outside a block, file order
    assert genes[g.index["conv1"]] == 3 and genes[g.index["fc6"]] == 4
    assert genes[g.index["pool5"]] == 2 and genes[g.index["softmax"]] == 0  # others: the list's first device
    table = []
    genes = placement_from_dict(all_on(g, 1, fc7=[1, 1]), g, d, splits=table)  # Exprimo accepts repeats
    assert table == [Split("channel", (1, 1))] and genes[g.index["fc7"]] == 3
    with pytest.raises(InputError, match="one-device list"):
        placement_from_dict(all_on(g, 1, fc7=[2]), g, d, splits=[])


def test_exprimo_cannot_split_a_convolution_inside_a_block():
    net = {"layers": {"data": {"type": "Input", "tensor": [1, 8, 8, 3]},
                      "blk": {"type": "Block", "parents": ["data"], "endpoint": "c", "layers": {
                          "c": {"type": "Convolution", "filter": [1, 1, 3, 4], "padding": "SAME"}}},
                      "out": {"type": "Softmax", "parents": ["blk"], "num_classes": 4}}}
    from placement_core.formats.exprimo import network_from_exprimo
    g = network_from_exprimo(net, batch_size=2)
    _, d = exprimo("alex_v2.json")
    with pytest.raises(InputError, match="'blk/c' is a Convolution inside a Block") as err:
        placement_from_dict({"data": 1, "blk/c": [1, 2], "out": 1}, g, d, splits=[], source="a.json")
    assert err.value.field == "blk/c"


def test_exprimo_splits_field_is_refused_with_what_it_means():
    from placement_core.formats.exprimo import network_from_exprimo
    net = json.loads((FIX / "alex_v2.json").read_text())
    net["layers"]["conv1"]["splits"] = 2
    with pytest.raises(InputError, match="floor-divides the layer's output channels"):
        network_from_exprimo(net, source="alex.json")


@pytest.mark.parametrize("name, layer, unsharded_ms, sharded_ms, peaks", [
    ("alex_v2.json", "fc6", 43.407, 38.278, (513_932_960, 56_762_368)),
    ("resnet50.json", "res3a_branch1", 203.405, 418.868, (8_607_993_248, 499_516_416)),
])
@pytest.mark.parametrize("devices", ["malvik.json", "malvik-4gpu.json"])
def test_exprimo_worked_numbers(name, layer, unsharded_ms, sharded_ms, peaks, devices):
    """docs/sharding.md: Exprimo's own outputs on its own sharded assignment files."""
    g, d = exprimo(name, devices)
    table: list[Split] = []
    genes = placement_from_dict(all_on(g, 1, **{layer: [1, 2]}), g, d, splits=table)
    problem = ProblemSpec(profile="exprimo-2020", splits=tuple(table)).build(g, d)
    assert round(problem.evaluate(np.ones(len(g), dtype=np.int32)) * 1e3, 3) == unsharded_ms
    ev = problem.simulate(genes)
    assert round(ev.result.makespan * 1e3, 3) == sharded_ms
    assert [int(round(b)) for b in ev.result.peak_memory[1:3]] == list(peaks)
    assert ev.result.transfers == 4  # input to the other shard, its slice back; the gradients likewise


@pytest.mark.parametrize("network, assignment, sharded_ms, split", [
    ("alex_v2.json", "alex_v2_sharded.json", 38.278, "fc6"),
    ("resnet50.json", "resnet50_sharded.json", 418.868, "res3a_branch1"),
])
def test_exprimo_sharded_assignment_files_simulate_from_the_command_line(network, assignment, sharded_ms, split,
                                                                        capsys):
    """Exprimo's own assignment files, unchanged (alex_v2_sharded.json also carries 215 ResNet keys, which
    Exprimo ignores): placement simulate loads them, splits the listed layer by channel and gets Exprimo's makespan."""
    from placement_core.cli import main
    code = main(["simulate", "--network", str(FIX / network), "--devices", str(FIX / "malvik.json"),
                 "--profile", "exprimo-2020", "--placement", str(FIX / assignment), "--json"])
    assert code == 0
    data = json.loads(capsys.readouterr().out)
    assert round(data["makespan_s"] * 1e3, 3) == sharded_ms
    assert data["split_ops"] == {split: {"devices": ["gpu0", "gpu1"], "split": "channel"}}
    assert data["transfers"] == 4


def test_a_grouped_convolution_splits_by_batch_only_and_its_groups_survive_a_file(tmp_path):
    """A depthwise convolution's output channels each read one input channel: a channel split would split
    its input too, which the runner cannot do (E5 on MobileNetV2 drew such splits; the runner refused)."""
    from dataclasses import replace

    from placement_core.formats.network import network_from_dict, network_to_dict
    g = net()
    dw = Graph("tiny", [replace(o, groups=8) if o.name == "conv" else o for o in g.ops], batch_size=4)
    size, why = extent(dw.op("conv"), dw, "channel")
    assert size == 0 and "grouped convolution (8 groups)" in why
    assert extent(dw.op("conv"), dw, "batch")[0] == 4
    with pytest.raises(InputError, match="grouped convolution") as e:
        placement_from_dict({"format": "placement/1", "assignment": {
            "data": "gpu0", "conv": {"devices": ["gpu0", "gpu1"], "split": "channel"}, "relu": "gpu0", "fc": "gpu0"}},
            dw, gpus(), source="p.json", splits=[])
    assert "conv" in str(e.value)
    doc = network_to_dict(dw)
    assert [o.get("groups") for o in doc["ops"]] == [None, 8, None, None]  # written only where it is not 1
    assert network_from_dict(doc).op("conv").groups == 8 and network_from_dict(network_to_dict(g)).op("conv").groups == 1
    doc["ops"][1]["groups"] = 0
    with pytest.raises(InputError, match="groups must be a positive integer"):
        network_from_dict(doc, source="net.json")
