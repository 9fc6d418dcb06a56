"""Issue 28 (4, first part): what training keeps per parameter (SGD, Adam in fp32 and mixed precision) and
ZeRO's partitioning over a data-parallel group, in the simulated memory and the weight update."""

from __future__ import annotations

import json

import pytest

from placement_core import InputError
from placement_core.problem import ProblemSpec
from placement_core.cost.training_state import resident_copies, update_copies
from placement_core.model.devices import Channel, Device, DeviceGraph
from placement_core.model.graph import Graph, Op
from placement_core.model.sharding import Split


@pytest.mark.parametrize("optimizer, precision, zero, group, copies", [
    ("sgd", "fp32", 0, 1, 2.0),  # weights and gradients: the thesis' model
    ("adam", "fp32", 0, 1, 4.0),  # + two fp32 moments: 16 bytes a parameter
    ("adam", "bf16", 0, 1, 8.0),  # 2 + 2 + 12 bytes (ZeRO's K = 12) over 2-byte weights
    ("adam", "bf16", 1, 4, 1 + 1 + 6 / 4),  # ZeRO-1: the optimizer state partitioned
    ("adam", "bf16", 2, 4, 1 + 1 / 4 + 6 / 4),  # ZeRO-2: the gradients too
    ("sgd", "bf16", 2, 4, 1 + 1 / 4),
])
def test_resident_bytes_per_byte_of_weights(optimizer, precision, zero, group, copies):
    assert resident_copies(optimizer, precision, zero, group) == pytest.approx(copies)


def test_zeros_published_example():
    """ZeRO (SC'20), Fig. 1: a 7.5 B-parameter model with mixed-precision Adam over 64 replicas holds 120 GB
    per GPU as a baseline, 31.4 GB with the optimizer state partitioned and 16.6 GB with the gradients too."""
    weights = 7.5e9 * 2  # bf16
    assert weights * resident_copies("adam", "bf16") == pytest.approx(120e9)
    assert weights * resident_copies("adam", "bf16", 1, 64) == pytest.approx(31.4e9, abs=0.05e9)  # 31.41
    assert weights * resident_copies("adam", "bf16", 2, 64) == pytest.approx(16.6e9, abs=0.05e9)  # 16.64


def test_bytes_the_update_moves():
    assert update_copies("sgd", "fp32") == 3.0  # read weights and gradients, write weights
    assert update_copies("adam", "fp32") == 7.0  # read w, g, m, v; write w, m, v: 28 bytes / 4
    assert update_copies("adam", "bf16") == 14.0  # read g (2) + 12; write 12 + w (2): 28 bytes / 2
    assert update_copies("adam", "bf16", 1, 4) == 3.5


def _one(precision="bf16"):
    return Graph("one", [Op("x", "input", output_bytes=8.0, shape=(8, 1)),
                         Op("fc", "linear", inputs=("x",), output_bytes=8.0, param_bytes=1e9, shape=(8, 1))], 8,
                 precision=precision)


DEVS = DeviceGraph("four", [Device(f"gpu{j}", "gpu", 1e12, 1e12, 1e11) for j in range(4)],
                   [Channel("switch", 1e11, 0.0, tuple((f"gpu{a}", f"gpu{b}") for a in range(4) for b in range(4)
                                                       if a != b))])


def _peak(graph, **spec):
    p = ProblemSpec(**spec).build(graph, DEVS)
    return p, p.simulate([0, 0]).result


def test_adam_holds_six_more_bytes_per_weight_byte_and_moves_more():
    _, sgd = _peak(_one())
    p, adam = _peak(_one(), optimizer="adam")
    assert adam.peak_memory[0] - sgd.peak_memory[0] == pytest.approx(6e9)
    assert p.costs.update[1, 0] == pytest.approx(14.0 * 1e9 / 1e11)


def test_zero_partitions_a_data_parallel_replicas_state():
    """fc split by batch over the four GPUs: each replica keeps its weights, a quarter of the gradients
    (stage 2) and a quarter of the optimizer state, and updates a quarter."""
    dp = Split("batch", (0, 1, 2, 3))
    statics = {}
    for zero in (0, 1, 2):
        p = ProblemSpec(optimizer="adam", zero=zero, splits=(dp,)).build(_one(), DEVS)
        statics[zero] = p.shards.static.tolist()[-4:]  # fc's four shards (the input op's come first)
        if zero:
            assert p.shards.upd.tolist()[-4:] == pytest.approx([14.0 * 1e9 / 1e11 / 4] * 4)
    assert statics[0] == pytest.approx([8e9] * 4)
    assert statics[1] == pytest.approx([(2 + 6 / 4) * 1e9] * 4)
    assert statics[2] == pytest.approx([(1 + 1 / 4 + 6 / 4) * 1e9] * 4)


def test_the_spec_keeps_its_json_unless_told():
    assert "optimizer" not in ProblemSpec().to_dict()
    d = ProblemSpec(optimizer="adam", zero=1).to_dict()
    assert (d["optimizer"], d["zero"]) == ("adam", 1)
    back = ProblemSpec.from_dict(json.loads(json.dumps(d)))
    assert (back.optimizer, back.zero) == ("adam", 1)
    p = back.build(_one(), DEVS)
    assert ProblemSpec.of(p).optimizer == "adam" and p.profile.zero == 1


@pytest.mark.parametrize("spec, words", [(dict(optimizer="lion"), "unknown optimizer"),
                                         (dict(zero=3), "stage 3"), (dict(zero=5), "0, 1 or 2"),
                                         (dict(optimizer="adam", profile="exprimo-2020"), "thesis' training state")])
def test_what_is_not_modelled_is_refused(spec, words):
    with pytest.raises(InputError, match=words):
        ProblemSpec(**spec).build(_one(), DEVS)


def test_the_cli_takes_the_optimizer(capsys):
    from placement_core.cli import main
    args = ["simulate", "--network", "gpt:layers=2,hidden=256,heads=4,seq=128,vocab=1000",
            "--devices", "dgx-a100:nodes=1", "--placement", "single:n0g0", "--json"]
    assert main(args) == 0
    sgd = json.loads(capsys.readouterr().out)
    assert main(args + ["--optimizer", "adam"]) == 0
    adam = json.loads(capsys.readouterr().out)
    params = 2 * (12 * 256 * 256 + 13 * 256) + 1000 * 256 + 128 * 256 + 2 * 256 + 1000 * 256  # the tied copy too
    extra = adam["devices"]["n0g0"]["peak_memory_bytes"] - sgd["devices"]["n0g0"]["peak_memory_bytes"]
    assert extra == pytest.approx(6 * 2 * params)  # 12 more bytes a bf16 parameter


def test_a_what_if_keeps_the_optimizer_and_zero_stage():
    """A what-if at multipliers of one is the same problem: ZeRO-1's quarter of Adam's state per replica, not
    SGD's whole weights and gradients (the scaled costs once fell back to SGD without ZeRO)."""
    from placement_core.analysis.sensitivity import what_if_problem

    p = ProblemSpec(optimizer="adam", zero=1, splits=(Split("batch", (0, 1, 2, 3)),)).build(_one(), DEVS)
    same = what_if_problem(p)
    assert same.shards.static.tolist()[-4:] == pytest.approx([(2 + 6 / 4) * 1e9] * 4)
    assert same.shards.upd.tolist()[-4:] == pytest.approx([14.0 * 1e9 / 1e11 / 4] * 4)
