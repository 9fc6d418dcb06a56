"""docs/formats.md says what the loaders accept: its examples load, with the numbers it states."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from placement_core import InputError
from placement_core.formats.catalog import devices_from_data, network_from_data
from placement_core.model.placement import placement_from_dict

DOC = Path(__file__).resolve().parent.parent / "docs" / "formats.md"


@pytest.fixture(scope="module")
def examples():
    """The doc's JSON blocks in order: network, devices, placement, Exprimo network, devices, placement
    (the sharded placement example comes last here, whatever its place in the doc)."""
    blocks = re.findall(r"^```json\n(.*?)^```", DOC.read_text(encoding="utf-8"), re.S | re.M)
    assert len(blocks) == 7
    found = [json.loads(b) for b in blocks]
    return found[:3] + found[4:] + [found[3]]


def test_our_network_example(examples):
    g = network_from_data(examples[0], source="net.json")
    assert (g.name, g.batch_size, [o.name for o in g.ops]) == ("tiny", 32, ["data", "conv1", "fc"])
    conv, fc = g.op("conv1"), g.op("fc")
    assert conv.fwd_flops == 2 * 3 * 3 * 3 * 16 * 32 * 32 * 32  # kh·kw·c_in·c_out·H·W·N multiply-adds
    assert conv.param_bytes == (3 * 3 * 3 * 16 + 16) * 4 and conv.output_bytes == 32 * 16 * 32 * 32 * 4
    assert conv.mem_bytes == 32 * 3 * 32 * 32 * 4 + conv.output_bytes + conv.param_bytes
    assert fc.fwd_flops == 2 * 16384 * 10 * 32 and fc.input_bytes == {"conv1": 2097152}
    assert fc.times == {"gpu": {"fwd": 0.00012, "bwd": 0.00025}, "gpu1": {"fwd": 0.0001}}
    # --batch-size: FLOPs and activations grow with the batch, parameters do not
    g64 = network_from_data(examples[0], batch_size=64)
    assert g64.op("conv1").fwd_flops == 2 * conv.fwd_flops and g64.op("conv1").param_bytes == conv.param_bytes
    assert g64.op("conv1").mem_bytes == 2 * (conv.mem_bytes - conv.param_bytes) + conv.param_bytes


def test_the_error_messages_the_doc_quotes(examples):
    bad = json.loads(json.dumps(examples[0]))
    bad["ops"][2]["fwd_flops"] = -1
    with pytest.raises(InputError) as e:
        network_from_data(bad, source="net.json")
    assert e.value.message == "net.json: ops[2].fwd_flops: must not be negative, got -1. Give a value of zero or more"
    typo = json.loads(json.dumps(examples[0]))
    typo["ops"][1]["fwd_flop"] = typo["ops"][1].pop("fwd_flops")
    with pytest.raises(InputError, match="unknown field 'fwd_flop'. Did you mean 'fwd_flops'"):
        network_from_data(typo, source="net.json")
    devices = json.loads(json.dumps(examples[1]))
    devices["channels"][0]["routes"].pop()
    with pytest.raises(InputError, match="no route for gpu0 -> cpu0"):
        devices_from_data(devices)


def test_our_devices_and_placement_examples(examples):
    d = devices_from_data(examples[1])
    assert (d.name, d.names) == ("workstation", ["cpu0", "gpu0"])
    assert d.devices[1].memory_bytes == 16e9 and d.devices[1].message_overhead == 5e-6
    assert d.channel_for(0, 1).name == d.channel_for(1, 0).name == "pcie0"
    assert d.channels[0].bandwidth == 16e9 and d.channels[0].latency == 1e-5
    g = network_from_data(examples[0])
    assert placement_from_dict(examples[2], g, d).tolist() == [0, 1, 1]


def test_the_exprimo_examples(examples):
    g = network_from_data(examples[3])
    assert g.batch_size == 128  # Exprimo's simulator's batch, not the file's 1
    assert [o.name for o in g.ops] == ["data", "conv1", "pool1", "mixed/a", "mixed/b", "mixed/concat", "fc", "prob"]
    shapes = {o.name: o.shape for o in g.ops}
    assert shapes["conv1"] == (128, 32, 32, 16) and shapes["pool1"] == (128, 16, 16, 16)
    assert shapes["mixed/a"] == shapes["mixed/b"] == (128, 16, 16, 8) and shapes["mixed/concat"] == (128, 16, 16, 16)
    assert g.op("mixed/a").inputs == ("pool1",)  # no parents inside a block: the block's parents
    assert g.op("fc").inputs == ("mixed/concat",)  # the block stands for its endpoint
    assert shapes["fc"] == shapes["prob"] == (128, 10) and g.op("fc").param_bytes == (16 * 16 * 16 * 10 + 10) * 4
    d = devices_from_data(examples[4], source="thesis-devices.json")
    assert (d.name, d.names, [c.name for c in d.channels]) == ("thesis-devices", ["cpu0", "gpu0"], ["pcie-0"])
    assert d.channels[0].bandwidth == 128e9 / 8 == 16e9 and d.channels[0].latency == 0
    gpu = d.devices[1]
    assert (gpu.peak_flops, gpu.memory_bytes, gpu.mem_bandwidth, gpu.clock_hz) == (15700e9, 16e9, 900e9, 1530e6)
    ignored = []
    p = placement_from_dict(examples[5], g, d, ignored=ignored)
    assert ignored == ["mixed"]
    assert np.array_equal(p, [0, 1, 1, 1, 1, 1, 1, 1])


def test_the_sharded_placement_example(examples):
    from placement_core.model.sharding import Split
    d = devices_from_data(examples[1])
    g = network_from_data(examples[0])
    table = []
    assert placement_from_dict(examples[6], g, d, splits=table).tolist() == [0, 2, 3]
    assert table == [Split("channel", (0, 1), (4, 12)), Split("batch", (0, 1))]
    bad = json.loads(json.dumps(examples[6]))
    bad["assignment"]["fc"]["sizes"] = [3, 2]
    with pytest.raises(InputError, match=re.escape("assignment.fc.sizes: op 'fc': sizes [3, 2] add up to 5, but the op "
                                                   "has 32 samples in its batch")):
        placement_from_dict(bad, g, d, splits=[])
