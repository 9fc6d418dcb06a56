"""What a GPU and a link reach, measured by microbenchmarks: the DGX presets' matmul rates and NCCL bandwidths.

A device's measured matmul rate (``achieved_flops_by_precision``) replaces its peak times the compute
efficiency, and a channel's measured bandwidth (``achieved_bandwidth``) replaces its bandwidth times the
communication efficiency, as measured op times and transfer curves replace the formula; an efficiency set by
hand drops them again. Expected figures come from the sources docs/clusters.md cites: Bekman's MAMF table
(A100 SXM 267.9 TFLOP/s, H100 SXM 792.1 in bf16), NCCL's maintainers (a ring reaches 370 GB/s of NVLink 4's
450) and a four-node all-reduce at 376.7 GB/s bus bandwidth over 400 Gb/s adapters.
"""

from __future__ import annotations

import json

import pytest

from placement_core import InputError, Problem, load_devices
from placement_core.formats.clusters import Cluster
from placement_core.formats.network import network_from_dict
from placement_core.model.devices import devices_from_dict, devices_to_dict
from placement_core.optimize.plan_links import by_hand_efficiency, link_of

NVLINK_SHARE = 370 / 450
IB_SHARE = 376.7 / 400


def _matmul(m, n, k, precision):
    return network_from_dict({"format": "placement-network/1", "name": "mm", "batch_size": m,
                              "precision": precision, "ops": [
        {"name": "x", "kind": "input", "output_bytes": 1, "shape": [m, k]},
        {"name": "fc", "kind": "linear", "inputs": ["x"], "fwd_flops": 2 * m * n * k, "bwd_flops": 4 * m * n * k,
         "output_bytes": 1, "shape": [m, n]}]})


def _gpu(**extra):
    d = {"name": "g", "kind": "gpu", "peak_flops": 10e12, "memory_bytes": 1e12, "mem_bandwidth": 1e15,
         "peak_flops_by_precision": {"bf16": 40e12}, **extra}
    return devices_from_dict({"format": "placement-devices/1", "name": "one", "devices": [d], "channels": []})


def test_a_measured_matmul_rate_replaces_the_peak_times_the_efficiency():
    flops = 2 * 512 * 512 * 1024
    dev = _gpu(achieved_flops_by_precision={"bf16": 30e12})
    assert Problem(_matmul(512, 512, 1024, "bf16"), dev).costs.fwd[1, 0] == pytest.approx(flops / 30e12)
    # the profile's efficiency does not reach a measured rate; fp32 has none and keeps peak x 0.9
    assert Problem(_matmul(512, 512, 1024, "bf16"), dev, comp_efficiency=0.5).costs.fwd[1, 0] \
        == pytest.approx(flops / 30e12)
    assert Problem(_matmul(512, 512, 1024, "fp32"), dev).costs.fwd[1, 0] == pytest.approx(flops / (10e12 * 0.9))
    # dropped, the efficiency applies to the datasheet's peak again (what --comp-efficiency does)
    plain = dev.without_measured_rates(compute=True)
    assert plain.devices[0].achieved == () and dev.without_measured_rates() is dev
    assert Problem(_matmul(512, 512, 1024, "bf16"), plain, comp_efficiency=0.5).costs.fwd[1, 0] \
        == pytest.approx(flops / (40e12 * 0.5))


def test_a_dgx_a100_gemm_in_whole_waves_runs_at_the_mamf_rate():
    # 3,072 x 1,152 is 12 x 9 = 108 tiles of 256 x 128: one whole wave of the A100's 108 SMs, nothing lost
    m, n, k = 3072, 1152, 4096
    d = load_devices("dgx-a100:nodes=1")
    p = Problem(_matmul(m, n, k, "bf16"), d)
    assert p.costs.fwd[1, 0] == pytest.approx(2 * m * n * k / 267.9e12)  # 108.2 µs, not 2mnk/(312e12 x 0.9)
    assert p.costs.fwd[1, 0] == pytest.approx(1.0822e-4, rel=1e-4)


def test_the_dgx_presets_carry_their_sources_figures():
    for spec, half, line, ib in (("dgx-a100:nodes=2", 267.9e12, 300e9, 25e9),
                                 ("dgx-h100:nodes=2", 792.1e12, 450e9, 50e9)):
        d = load_devices(spec)
        gpu = d.devices[0]
        assert dict(gpu.achieved) == {"bf16": half, "fp16": half} and gpu.rate_for("fp32", 0.9) == gpu.peak_flops * 0.9
        nvl, far = d.channels[0], d.channels[1]
        assert (nvl.name, far.name) == ("nvl-n0g0", "ib-n0g0")
        assert nvl.achieved_bandwidth == pytest.approx(line * NVLINK_SHARE) and nvl.bandwidth == line
        assert far.achieved_bandwidth == pytest.approx(ib * IB_SHARE) and far.bandwidth == ib
        assert devices_from_dict(json.loads(json.dumps(devices_to_dict(d)))).channels[1] == far  # round trip
    assert load_devices("dgx-h100:nodes=1").channels[0].achieved_bandwidth == pytest.approx(370e9)


def test_a_folded_plans_links_match_the_device_graphs():
    c, d = Cluster("dgx-a100", 2), load_devices("dgx-a100:nodes=2")
    for a, b in ((0, 5), (0, 9), (12, 3)):
        assert link_of(c, a, b, 0.25) == pytest.approx(link_of(d, a, b, 0.25))
    assert link_of(c, 0, 5, 0.25) == pytest.approx((5e-6, 1 / (300e9 * NVLINK_SHARE)))
    assert link_of(c, 0, 9, 0.25) == pytest.approx((5e-6, 1 / (25e9 * IB_SHARE)))
    # --comm-efficiency 0.5: the datasheet's rates at that share, on both
    c2, d2 = by_hand_efficiency(c, 0.5), by_hand_efficiency(d, 0.5)
    assert by_hand_efficiency(c, None) is c and not c2.measured
    for a, b, line in ((0, 5, 300e9), (0, 9, 25e9)):
        assert link_of(c2, a, b, 0.5) == pytest.approx((5e-6, 1 / (line * 0.5)))
        assert link_of(d2, a, b, 0.5) == pytest.approx((5e-6, 1 / (line * 0.5)))
    assert c2.graph([0, 9]).channels[0].achieved_bandwidth == 0.0


def test_the_cli_applies_a_hand_set_efficiency_to_measured_links(tmp_path, capsys):
    from placement_core.cli import main

    net = {"format": "placement-network/1", "name": "two", "batch_size": 1, "ops": [
        {"name": "a", "kind": "other", "output_bytes": 1e9},
        {"name": "b", "kind": "other", "inputs": ["a"], "output_bytes": 4}]}
    (tmp_path / "two.json").write_text(json.dumps(net))
    (tmp_path / "p.json").write_text(json.dumps({"a": 0, "b": 8}))
    base = ["simulate", "--network", str(tmp_path / "two.json"), "--devices", "dgx-a100:nodes=2",
            "--placement", str(tmp_path / "p.json"), "--json"]
    assert main(base) == 0
    measured = json.loads(capsys.readouterr().out)["makespan_s"]
    assert main(base + ["--comm-efficiency", "0.25"]) == 0
    by_hand = json.loads(capsys.readouterr().out)["makespan_s"]
    assert measured == pytest.approx(2 * (5e-6 + 1e9 / (25e9 * IB_SHARE)))  # 85.0 ms
    assert by_hand == pytest.approx(2 * (5e-6 + 1e9 / (25e9 * 0.25)))  # 320 ms


@pytest.mark.parametrize("where, field, value, words", [
    ("device", "achieved_flops_by_precision", {"int4": 1e15}, "unknown precision"),
    ("device", "achieved_flops_by_precision", {"bf16": -1}, "positive"),
    ("channel", "achieved_bandwidth", -5.0, "positive"),
    ("channel", "achieved_bandwidth", "fast", "expected a number"),
    ("channel", "achieved_bandwidth", True, "expected a number")])
def test_bad_measured_rates_are_named(where, field, value, words):
    dev = [{"name": n, "kind": "gpu", "peak_flops": 1e12, "memory_bytes": 1e9, "mem_bandwidth": 1e11}
           for n in ("a", "b")]
    ch = {"name": "l", "bandwidth": 1e9, "latency": 0, "routes": [["a", "b"], ["b", "a"]]}
    (dev[0] if where == "device" else ch)[field] = value
    with pytest.raises(InputError, match=words) as err:
        devices_from_dict({"format": "placement-devices/1", "name": "x", "devices": dev, "channels": [ch]})
    assert field in err.value.field


def test_a_file_without_measured_rates_reads_and_writes_back_unchanged():
    raw = {"format": "placement-devices/1", "name": "x", "devices": [
        {"name": n, "kind": "gpu", "peak_flops": 1e12, "memory_bytes": 1e9, "mem_bandwidth": 1e11, "model": ""}
        for n in ("a", "b")], "channels": [{"name": "l", "bandwidth": 1e9, "latency": 0.0,
                                            "routes": [["a", "b"], ["b", "a"]], "achieved_bandwidth": 0}]}
    out = devices_to_dict(devices_from_dict(raw))
    assert "achieved_bandwidth" not in out["channels"][0] and "achieved_flops_by_precision" not in out["devices"][0]
