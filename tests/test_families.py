"""Graph families (placement_core/families): real computation graphs, deterministic, a fixed split."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from placement_core import InputError, load_devices
from placement_core.cli import main
from placement_core.families import GROUPS, family_graph, family_graphs, split_of
from placement_core.families.cifar10 import cifar10_graph, sample_cell as conv_cell
from placement_core.families.nmt import nmt_graph
from placement_core.families.ptb import ptb_graph
from placement_core.formats.network import network_hash, network_to_dict
from placement_core.problem import ProblemSpec

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("family", ["nmt", "ptb", "cifar10"])
def test_a_family_graph_is_a_pure_function_of_family_seed_and_index(family):
    a, b = family_graph(family, 3, 5), family_graph(family, 3, 5)
    assert network_to_dict(a.graph) == network_to_dict(b.graph) and a.meta == b.meta
    assert network_hash(family_graph(family, 4, 5).graph) != network_hash(a.graph)
    assert network_hash(family_graph(family, 3, 7).graph) != network_hash(a.graph)


def test_the_same_graphs_in_another_process_with_another_hash_seed():
    code = ("from placement_core.families import family_graph\nfrom placement_core.formats.network import network_hash\n"
            "print(' '.join(network_hash(family_graph(f, 0, 1).graph) for f in ('nmt', 'ptb', 'cifar10')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout.split()
    assert out == [network_hash(family_graph(f, 0, 1).graph) for f in ("nmt", "ptb", "cifar10")]


def test_the_split_is_fixed_by_the_index():
    assert [split_of(i) for i in range(5)] == ["train", "test", "train", "test", "train"]
    train = family_graphs("ptb", count=6, seed=0, split="train")
    test = family_graphs("ptb", count=6, seed=0, split="test")
    assert [g.index for g in train] == [0, 2, 4] and [g.index for g in test] == [1, 3, 5]
    # a larger family has the smaller one's graphs, each in the same split
    assert network_hash(family_graphs("ptb", count=8, seed=0, split="test")[1].graph) == network_hash(test[1].graph)


@pytest.mark.parametrize("family", ["nmt", "ptb", "cifar10"])
def test_sizes_like_placetos_and_memory_that_often_overflows_one_gpu(family):
    devices = load_devices("malvik-4gpu")
    graphs = family_graphs(family, count=8, seed=0)
    peaks, batches = [], []
    for fg in graphs:
        assert 100 <= len(fg.graph) <= GROUPS[family]
        p = ProblemSpec().build(fg.graph, devices)
        peaks.append(p.simulate(np.full(len(fg.graph), 1, dtype=np.int32)).result.peak_memory[1])
        batches.append(fg.graph.batch_size)
    assert len(set(batches)) > 1
    assert min(peaks) < 32e9 < max(peaks)  # some fit on one 32 GB GPU, some do not


def test_an_lstm_cell_costs_what_the_formulas_say():
    g = nmt_graph("t", steps=3, batch=8, hidden=16, embed=4, vocab=50)
    cell = g.op("encoder/lstm0/step01")
    # [x; h] (4 + 16) by the four gates (64), for 8 rows; backward twice the forward
    assert cell.fwd_flops == 2 * (4 + 16) * 64 * 8 and cell.bwd_flops == 2 * cell.fwd_flops
    assert cell.param_bytes == 0  # the weights are the layer's shared weights op
    assert g.op("encoder/lstm0/weights").param_bytes == ((4 + 16) * 64 + 64) * 4
    assert set(cell.inputs) == {"encoder/embedding", "encoder/lstm0/step00", "encoder/lstm0/weights"}
    assert cell.input_bytes["encoder/lstm0/step00"] == 8 * 2 * 16 * 4  # (h, c) to the next step
    proj = g.op("decoder/projection/step02")
    assert proj.fwd_flops == 2 * 16 * 50 * 8 and proj.output_bytes == 8 * 50 * 4
    assert len(g) == 7 * 3 + 13  # per step: 2 encoder + 2 decoder cells, attention, projection, loss


def test_a_recurrent_cell_is_unrolled_with_its_sampled_structure():
    cell = [(-1, "tanh"), (0, "relu"), (0, "sigmoid"), (1, "identity")]
    g = ptb_graph("t", steps=2, batch=4, cell=cell, hidden=8, vocab=20)
    # node 3 reads node 1; nodes 2 and 3 are read by nobody, so the output averages them
    assert g.op("cell/step01/node3_identity").inputs[0] == "cell/step01/node1_relu"
    assert set(g.op("cell/step01/output").inputs) == {"cell/step01/node2_sigmoid", "cell/step01/node3_identity"}
    assert "cell/step00/output" in g.op("cell/step01/node0_tanh").inputs  # the previous hidden state
    assert g.op("cell/step00/node1_relu").fwd_flops == 2 * 8 * 16 * 4


def test_a_conv_cell_costs_what_the_formulas_say():
    import random
    arch = [[0, "sep3", 1, "max3"]] + conv_cell(random.Random(1))[1:]
    g = cifar10_graph("t", batch=2, per_stage=1, normal=arch, reduction=arch, channels=4)
    dw = g.op("cell00/node0/a_sep3/dw0")
    # a depthwise 3x3 on 4 channels at 32 x 32: 2·3·3·(4/4)·4·32·32·2, backward twice
    assert dw.fwd_flops == 2 * 3 * 3 * 1 * 4 * 32 * 32 * 2 and dw.bwd_flops == 2 * dw.fwd_flops
    stem = g.op("stem/conv")
    assert stem.bwd_flops == stem.fwd_flops  # the first layer needs no input gradient
    pool = g.op("cell00/node0/b_max3")
    assert pool.fwd_flops == 3 * 3 * 4 * 32 * 32 * 2


def test_bad_family_and_count_are_refused():
    with pytest.raises(InputError, match="unknown graph family"):
        family_graph("mnist", 0, 0)
    with pytest.raises(InputError, match="number of graphs"):
        family_graphs("nmt", count=0)


def test_graphs_generate_writes_loadable_networks(tmp_path, capsys):
    from placement_core import load_network
    assert main(["graphs", "generate", "--family", "cifar10", "--count", "3", "--seed", "2", "--split", "test",
                 "--out", str(tmp_path / "g"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == ["cifar10-s2-001"] and rows[0]["split"] == "test"
    loaded = load_network(rows[0]["file"])
    assert network_hash(loaded) == network_hash(family_graph("cifar10", 2, 1).graph)
    assert main(["graphs", "generate", "--family", "nmt", "--count", "0", "--out", str(tmp_path)]) == 2
    assert "expected an integer from 1" in capsys.readouterr().err
