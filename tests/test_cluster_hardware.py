"""Issue 28 (2, first part): per-precision peaks, tiles and waves of a GEMM, two-level DGX clusters.

Every expected number is worked by hand from the datasheet figures in placement_core/formats/clusters.py
and the tile/wave counting of NVIDIA's Matrix Multiplication Background guide (placement_core/cost/gemm.py).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from placement_core import InputError, Problem, load_devices, load_network
from placement_core.cost.gemm import efficiency, gemm_dims, time_factors
from placement_core.formats.network import network_from_dict, network_to_dict
from placement_core.model.devices import devices_from_dict, devices_to_dict


def test_tiles_and_waves_by_hand():
    # 512×512 on 108 SMs: 64 tiles of 64×64 fill one wave of 108 (any larger tile fills less of it)
    assert efficiency(1, 512, 512, 108) == pytest.approx(64 / 108)
    # 257×64: five 64×64 tiles, one wave: 257·64 useful of 108·64·64 computed
    assert efficiency(1, 257, 64, 108) == pytest.approx(257 * 64 / (108 * 64 * 64))
    # 4096×4096: 4,096 tiles of 64×64 take 38 waves (4,104 slots)
    assert efficiency(1, 4096, 4096, 108) == pytest.approx(4096 / 4104)
    # a batch of 27 small matmuls, 128×128 each: 27·4 tiles of 64×64 = 108, exactly one wave
    assert efficiency(27, 128, 128, 108) == 1.0


def _linear_net(m, n, k, precision="fp32"):
    return network_from_dict({"format": "placement-network/1", "name": "mm", "batch_size": m,
                              "precision": precision, "ops": [
        {"name": "x", "kind": "input", "output_bytes": 1, "shape": [m, k]},
        {"name": "fc", "kind": "linear", "inputs": ["x"], "fwd_flops": 2 * m * n * k, "bwd_flops": 4 * m * n * k,
         "output_bytes": 1, "shape": [m, n]}]})


def _gpu(sms=0, peaks=None):
    d = {"name": "g", "kind": "gpu", "peak_flops": 10e12, "memory_bytes": 1e12, "mem_bandwidth": 1e15}
    if sms:
        d["sms"] = sms
    if peaks:
        d["peak_flops_by_precision"] = peaks
    return devices_from_dict({"format": "placement-devices/1", "name": "one", "devices": [d], "channels": []})


def test_a_linear_layers_forward_and_backward_pay_for_their_tiles():
    g = _linear_net(512, 512, 1024)
    assert gemm_dims(g.op("fc")) == (1, 512, 512, 1024, True)
    fwd, bwd = time_factors(g, _gpu(sms=108))
    # forward: 512×512 output (64/108 useful); input gradient 512×1024 (128 tiles of 64×64: two waves of 108,
    # 128/216 useful); weight gradient 1024×512 (the same)
    assert fwd[1, 0] == pytest.approx(108 / 64)
    assert bwd[1, 0] == pytest.approx(0.5 * 216 / 128 + 0.5 * 216 / 128)
    p = Problem(g, _gpu(sms=108))
    flops = 2 * 512 * 512 * 1024
    assert p.costs.fwd[1, 0] == pytest.approx(flops / (10e12 * 0.9) * 108 / 64)  # the memory term is far below
    assert p.costs.bwd[1, 0] == pytest.approx(2 * flops / (10e12 * 0.9) * 216 / 128)


def test_without_sms_or_peaks_nothing_changes():
    g = load_network("resnet50")
    assert time_factors(g, load_devices("malvik")) is None
    plain = Problem(_linear_net(512, 512, 1024), _gpu())
    assert plain.costs.fwd[1, 0] == 2 * 512 * 512 * 1024 / (10e12 * 0.9)


def test_the_networks_precision_picks_the_devices_peak():
    dev = _gpu(peaks={"bf16": 40e12})
    fp32, bf16 = _linear_net(512, 512, 1024), _linear_net(512, 512, 1024, "bf16")
    assert Problem(fp32, dev).costs.fwd[1, 0] == pytest.approx(2 * 512 * 512 * 1024 / (10e12 * 0.9))
    assert Problem(bf16, dev).costs.fwd[1, 0] == pytest.approx(2 * 512 * 512 * 1024 / (40e12 * 0.9))
    assert dev.devices[0].peak_for("fp16") == 10e12  # a precision it does not list: its peak_flops


def test_with_precision_scales_every_byte_and_keeps_the_flops():
    g = load_network("resnet50", batch_size=8)
    h = g.with_precision("bf16")
    assert h.precision == "bf16" and h.with_precision("bf16") is h
    for a, b in zip(g.ops, h.ops):
        assert (b.output_bytes, b.param_bytes, b.mem_bytes) == (a.output_bytes / 2, a.param_bytes / 2, a.mem_bytes / 2)
        assert b.fwd_flops == a.fwd_flops
    assert network_from_dict(json.loads(json.dumps(network_to_dict(h)))).precision == "bf16"
    assert "precision" not in network_to_dict(g)  # fp32 files read and write back unchanged
    assert h.with_batch_size(16).precision == "bf16"
    with pytest.raises(InputError, match="precision must be one of"):
        g.with_precision("int8")


def test_a_dgx_a100_pair_of_nodes():
    d = load_devices("dgx-a100:nodes=2")
    assert len(d) == 16 and len(d.channels) == 32
    gpu = d.devices[0]
    assert (gpu.peak_flops, gpu.peak_for("bf16"), gpu.sms, gpu.memory_bytes, gpu.mem_bandwidth) == (
        19.5e12, 312e12, 108, 80e9, 2039e9)
    n = d.names
    assert d.channel_for(n.index("n0g0"), n.index("n0g5")).name == "nvl-n0g0"
    assert d.channel_for(n.index("n0g0"), n.index("n1g5")).name == "ib-n0g0"
    assert d.channel_for(n.index("n1g2"), n.index("n0g0")).name == "ib-n1g2"
    assert devices_from_dict(json.loads(json.dumps(devices_to_dict(d)))).devices[0] == gpu  # round trip
    h = load_devices("dgx-h100:nodes=1")
    assert len(h) == 8 and len(h.channels) == 8 and h.devices[0].peak_for("bf16") == 989.4e12


def test_a_transfer_crosses_the_node_boundary_on_infiniband():
    """A 1 GB tensor forward and its gradient back: two transfers of 5 µs + 1 GB / the bandwidth reached."""
    net = network_from_dict({"format": "placement-network/1", "name": "two", "batch_size": 1, "ops": [
        {"name": "a", "kind": "other", "output_bytes": 1e9},
        {"name": "b", "kind": "other", "inputs": ["a"], "output_bytes": 4}]})
    d = load_devices("dgx-a100:nodes=2")
    p = Problem(net, d)
    n = d.names
    same = p.simulate(np.array([n.index("n0g0"), n.index("n0g1")], dtype=np.int32)).result.makespan
    other = p.simulate(np.array([n.index("n0g0"), n.index("n1g0")], dtype=np.int32)).result.makespan
    # at what NCCL reaches: NVLink 370/450 of 600 GB/s both ways, HDR InfiniBand (200 Gb/s) 376.7/400
    assert same == pytest.approx(2 * (5e-6 + 1e9 / (300e9 * 370 / 450)))
    assert other == pytest.approx(2 * (5e-6 + 1e9 / (25e9 * 376.7 / 400)))
    # a communication efficiency set by hand applies to the datasheet's rates instead (--comm-efficiency)
    by_hand = Problem(net, d.without_measured_rates(links=True), comm_efficiency=0.25)
    assert by_hand.simulate(np.array([n.index("n0g0"), n.index("n0g1")], dtype=np.int32)).result.makespan \
        == pytest.approx(2 * (5e-6 + 1e9 / (300e9 * 0.25)))
    assert by_hand.simulate(np.array([n.index("n0g0"), n.index("n1g0")], dtype=np.int32)).result.makespan \
        == pytest.approx(2 * (5e-6 + 1e9 / (25e9 * 0.25)))


@pytest.mark.parametrize("spec, words", [("dgx-a100:nodes=0", "outside 1..32"), ("dgx-a100:nodes=x", "whole number"),
                                         ("dgx-h100:gpus=8", "how many nodes"), ("dgx-a100:nodes=33", "outside")])
def test_a_bad_cluster_spec_is_named(spec, words):
    with pytest.raises(InputError, match=words):
        load_devices(spec)


@pytest.mark.parametrize("field, value, words", [("sms", -1, "sms must be"), ("sms", 1.5, "sms must be"),
                                                 ("peak_flops_by_precision", {"int4": 1e15}, "unknown precision"),
                                                 ("peak_flops_by_precision", {"bf16": -1}, "bf16")])
def test_bad_device_fields_are_named(field, value, words):
    d = {"name": "g", "kind": "gpu", "peak_flops": 1e12, "memory_bytes": 1e9, "mem_bandwidth": 1e11, field: value}
    with pytest.raises(InputError, match=words) as err:
        devices_from_dict({"format": "placement-devices/1", "name": "x", "devices": [d], "channels": []})
    assert field in err.value.field


def test_the_cli_trains_in_bf16_on_a_dgx(capsys):
    from placement_core.cli import main
    args = ["simulate", "--network", "resnet50", "--devices", "dgx-a100:nodes=1", "--placement", "single:n0g0",
            "--json"]
    assert main(args) == 0
    fp32 = json.loads(capsys.readouterr().out)
    assert main(args + ["--precision", "bf16"]) == 0
    bf16 = json.loads(capsys.readouterr().out)
    assert (fp32["precision"], bf16["precision"]) == ("fp32", "bf16")
    assert bf16["makespan_s"] < fp32["makespan_s"] / 2  # 16x the peak; memory-bound ops only twice as fast
