"""A channel's measured transfer curve (size-dependent link model, thesis E1), worked out by hand.

The curve [[64, 0.25], [1024, 0.5], [4096, 2.0]] (bytes, seconds): flat at 0.25 s up to 64 B, linear
between points, and beyond 4096 B the last segment's slope (1.5 s per 3072 B). Every figure is a binary
fraction, so the simulators' sums are exact. Every case runs on the compiled kernel and on the Python
reference (``trace=True``).
"""

import json

import numpy as np
import pytest
from helpers import devices, kernel_and_reference, op, problem, require_kernel

from placement_core.analysis.device_tables import devices_from_tables, devices_to_tables, parse_curve
from placement_core.analysis.sensitivity import what_if
from placement_core.cost.profiles import get_profile
from placement_core.model.devices import (Channel, Device, DeviceGraph, curve_time, devices_from_dict, devices_hash, devices_to_dict)
from placement_core.base.errors import InputError
from placement_core.model.graph import Graph, Op
from placement_core.optimize.fixed_candidates import Links
from placement_core.problem import Problem, ProblemSpec
from placement_core.simulate import SimSettings

FORWARD = SimSettings(forward_only=True)

CURVE = ((64.0, 0.25), (1024.0, 0.5), (4096.0, 2.0))
# message size -> seconds, by hand
BY_HAND = {16: 0.25,  # below the first point: flat (latency dominates)
           64: 0.25,  # on a point
           544: 0.375,  # half way from 64 to 1024: 0.25 + 0.5 * 0.25
           1024: 0.5,
           2560: 1.25,  # half way from 1024 to 4096: 0.5 + 0.5 * 1.5
           4096: 2.0,
           7168: 3.5}  # 3072 B beyond the last point: + 1.5 s, the last segment's slope


def with_curve(devs: DeviceGraph, curve=CURVE) -> DeviceGraph:
    return DeviceGraph(devs.name, list(devs.devices),
                       [Channel(c.name, c.bandwidth, c.latency, c.routes, transfer_curve=curve) for c in devs.channels])


@pytest.mark.parametrize("nbytes,seconds", sorted(BY_HAND.items()))
def test_a_message_of_each_size_takes_the_curves_time(nbytes, seconds):
    # a (1 s) on d0 sends its output to b (1 s) on d1: forward only, so the step is 1 + transfer + 1.
    # The channel's latency and bandwidth (0.125 s, 100 B/s) would give another time: the curve replaces them.
    ops = [op("a", out=nbytes), op("b", ["a"])]
    p = problem(ops, with_curve(devices(2, latency=0.125)), forward_only=True)
    assert curve_time(CURVE, nbytes) == seconds
    fast, ref = kernel_and_reference(p, [0, 1])
    (x,) = [e for e in ref.trace if e.kind == "transfer"]
    assert (x.start, x.end, x.bytes) == (1.0, 1.0 + seconds, nbytes)
    assert fast.makespan == ref.makespan == 2.0 + seconds
    assert fast.channel_busy[0] == ref.channel_busy[0] == seconds


def test_training_step_pays_the_curve_both_ways():
    # a (fwd 1, bwd 2) on d0, b (fwd 1, bwd 2) on d1; 544 B forward (0.375 s) and the same gradient back:
    # a fwd [0, 1] · transfer [1, 1.375] · b fwd [1.375, 2.375] · b bwd [2.375, 4.375] · transfer [4.375, 4.75]
    # · a bwd [4.75, 6.75]
    p = problem([op("a", out=544), op("b", ["a"])], with_curve(devices(2)))
    fast, ref = kernel_and_reference(p, [0, 1])
    assert fast.makespan == ref.makespan == 6.75
    assert fast.channel_busy[0] == 0.75


def test_no_efficiency_scales_a_measured_curve_but_the_senders_minimum_still_applies():
    ops = [op("a", out=16), op("b", ["a"])]
    g = Graph("g", ops)
    for eff in (0.25, 1.0):
        p = Problem(g, with_curve(devices(2, bandwidth=100.0)), comm_efficiency=eff, settings=FORWARD)
        assert p.simulate([0, 1]).result.makespan == 2.25
    # exprimo-2020: every transfer lasts at least a clock cycle of the sender (0.5 Hz: 2 s, above 0.25 s)
    slow = [Device(f"d{i}", "cpu", 1e9, 1e12, 1e9, clock_hz=0.5) for i in range(2)]
    devs = with_curve(DeviceGraph("slow", slow, [Channel("bus", 100.0, 0.0, (("d0", "d1"), ("d1", "d0")))]))
    p = Problem(g, devs, profile="exprimo-2020", settings=FORWARD)
    res = p.simulate([0, 1], trace=True).result
    (x,) = [e for e in res.trace if e.kind == "transfer"]
    assert x.end - x.start == 2.0
    assert p.simulate([0, 1]).result.makespan == res.makespan


def test_channels_without_a_curve_keep_the_formula_beside_one_with_a_curve():
    # two channels: d0 -> d1 on "fast" (a curve), d1 -> d0 on "plain" (latency 0.125 + bytes / 100 B/s)
    devs = [Device(f"d{i}", "cpu", 1e9, 1e12, 1e9) for i in range(2)]
    chans = [Channel("fast", 100.0, 0.0, (("d0", "d1"),), transfer_curve=CURVE),
             Channel("plain", 100.0, 0.125, (("d1", "d0"),))]
    p = problem([op("a", out=1024), op("b", ["a"])], DeviceGraph("two", devs, chans))
    ref = p.simulate([0, 1], trace=True).result
    spans = {e.resource: e.end - e.start for e in ref.trace if e.kind == "transfer"}
    assert spans == {"fast": 0.5, "plain": 0.125 + 1024 / 100}
    assert p.simulate([0, 1]).result.makespan == ref.makespan


# -- without a curve nothing changes -------------------------------------------------------------------

def synthetic(seed: int):
    """A random 60-op network and a 4-device graph (three channels), built only from the public types."""
    rng = np.random.default_rng(seed)
    ops = []
    for i in range(60):
        parents = sorted(set(rng.integers(0, i, size=min(i, int(rng.integers(1, 4)))).tolist())) if i else []
        ops.append(Op(f"op{i}", kind="input" if not parents else "other", inputs=tuple(f"op{p}" for p in parents),
                      output_bytes=float(rng.integers(1, 10**8)), param_bytes=float(rng.choice([0, 4e6])),
                      fwd_flops=float(rng.integers(1, 10**11)), bwd_flops=float(rng.integers(1, 2 * 10**11)),
                      mem_bytes=float(rng.integers(0, 10**9))))
    devs = [Device(f"d{j}", "gpu" if j else "cpu", 1e13 if j else 1e12, 2e9 if j else 1e11, 9e11 if j else 5e10,
                   clock_hz=1.5e9, message_overhead=2e-5 if j == 3 else 0.0) for j in range(4)]
    pairs = [(a.name, b.name) for a in devs for b in devs if a.name != b.name]
    chans = [Channel(f"ch{c}", 16e9 * (c + 1), 1e-5 * c, tuple(p for k, p in enumerate(pairs) if k % 3 == c))
             for c in range(3)]
    return Graph("synthetic", ops, batch_size=32), DeviceGraph("synthetic", devs, chans)


# Makespans (float.hex) of three random placements per recipe, computed by the simulator before transfer
# curves existed (commit 7abab89): with no curve, both simulators must still give these bits.
GOLDEN = {
    "1f1b": ["0x1.cd81957547644p+0", "0x1.4f02323ee1e6dp+1", "0x1.77ef26d06dd31p+1"],
    "batches": ["0x1.63ce819f8f61ap+2", "0x1.f98f6955d9cd5p+2", "0x1.167d7437287f8p+3"],
    "default": ["0x1.eca0cf2ede16ap+0", "0x1.588f9b625d267p+1", "0x1.7ee5ebc2acd43p+1"],
    "exprimo-2020": ["0x1.f34cea4433e7ap+0", "0x1.5dc96b21975dep+1", "0x1.88590271a100fp+1"],
}
RECIPES = {"default": ProblemSpec(), "exprimo-2020": ProblemSpec(profile="exprimo-2020"),
           "batches": ProblemSpec(batches=3, in_flight=2), "1f1b": ProblemSpec(schedule="1f1b", micro_batches=4)}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_without_a_curve_results_are_bit_identical_to_before(recipe):
    graph, devs = synthetic(21)
    p = RECIPES[recipe].build(graph, devs)
    assert p.compiled.curve_ptr is None
    require_kernel(p)  # the golden values are the kernel's; the reference must give them too
    xs = np.random.default_rng(7).integers(0, 4, (3, len(graph))).astype(np.int32)
    got = [p.simulate(x).result.makespan for x in xs]
    assert [m.hex() for m in got] == GOLDEN[recipe]
    assert [p.simulate(x, trace=True).result.makespan for x in xs] == got


# -- the file format ------------------------------------------------------------------------------------

def doc(curve) -> dict:
    return {"format": "placement-devices/1", "name": "c",
            "devices": [{"name": "a", "kind": "cpu", "peak_flops": 1e9, "memory_bytes": 1e9, "mem_bandwidth": 1e9},
                        {"name": "b", "kind": "cpu", "peak_flops": 1e9, "memory_bytes": 1e9, "mem_bandwidth": 1e9}],
            "channels": [{"name": "link", "bandwidth": 1e9, "routes": [["a", "b"], ["b", "a"]],
                          "transfer_curve": curve}]}


def test_a_curve_reads_and_writes_back_and_a_graph_without_one_is_unchanged():
    g = devices_from_dict(doc([[4, 3e-5], [1e6, 2.5e-4], [1e8, 0.02]]))
    assert g.channels[0].transfer_curve == ((4.0, 3e-5), (1e6, 2.5e-4), (1e8, 0.02))
    assert devices_from_dict(json.loads(json.dumps(devices_to_dict(g)))).channels == g.channels
    plain = doc([])
    del plain["channels"][0]["transfer_curve"]
    h = devices_from_dict(plain)
    assert "transfer_curve" not in devices_to_dict(h)["channels"][0]
    assert devices_hash(h) == devices_hash(devices_from_dict(doc([])))
    assert devices_hash(h) != devices_hash(g)


@pytest.mark.parametrize("curve,field,words", [
    ([[4, 1e-5]], "channels[0].transfer_curve", "2 to 64 points"),
    ([[4, 1e-5], [4, 2e-5]], "channels[0].transfer_curve[1][0]", "sizes must increase"),
    ([[4, 2e-5], [100, 1e-5]], "channels[0].transfer_curve[1][1]", "less than the smaller"),
    ([[4, 1e-5], [100, 2e-5], [1000, 2e-5]], "channels[0].transfer_curve[2][1]", "same time"),
    ([[4, 1e-5], [100]], "channels[0].transfer_curve[1]", "[BYTES, SECONDS]"),
    ([[4, 1e-5], [-1, 2e-5]], "channels[0].transfer_curve[1][0]", "negative"),
    # a denormal step would make the slope beyond it 1e-3 s / 5e-324 B = inf (found by the property tests)
    ([[0, 0.0], [5e-324, 1e-3]], "channels[0].transfer_curve[1][0]", "less than a byte above"),
    ([[4, 1e-5], [100, "fast"]], "channels[0].transfer_curve[1][1]", "expected a number"),
    ("fast", "channels[0].transfer_curve", "a JSON list"),
    ([[4, 1e-5], [100, 5000]], "channels[0].transfer_curve[1][1]", "implausibly large"),
])
def test_a_bad_curve_is_refused_with_the_point_named(curve, field, words):
    with pytest.raises(InputError) as e:
        devices_from_dict(doc(curve), source="links.json")
    assert e.value.field == field and e.value.source == "links.json"
    assert words in e.value.message


def test_the_devices_page_tables_keep_a_curve_exactly():
    g = devices_from_dict(doc([[4, 3.0000000000000004e-05], [1e6, 2.5e-4], [1e8, 0.02]]))
    rows = devices_to_tables(g)
    assert rows[1][0]["transfer curve"] == "4: 3.0000000000000004e-05, 1000000: 0.00025, 100000000: 0.02"
    back = devices_from_tables(g.name, *rows)
    assert devices_to_dict(back) == devices_to_dict(g)
    assert parse_curve("") == [] and parse_curve("1e3: 2e-5; 1e6: 1e-3") == [[1000.0, 2e-5], [1e6, 1e-3]]
    rows[1][0]["transfer curve"] = "4: 1e-5, 1000"
    with pytest.raises(InputError) as e:
        devices_from_tables(g.name, *rows)
    assert "Channels table, row 1 (link)" in e.value.message and "1000" in e.value.message


# -- what uses transfer times besides the simulators ------------------------------------------------------

def test_a_wider_link_what_if_shrinks_the_time_above_the_curves_first_point():
    # twice the bandwidth: 0.25 + (1.25 - 0.25) / 2 = 0.75 s for 2560 B instead of 1.25 s
    p = problem([op("a", out=2560), op("b", ["a"])], with_curve(devices(2)), forward_only=True)
    r = what_if(p, [0, 1], bandwidth={"bus": 2.0})
    assert (r["makespan_s"], r["what_if_makespan_s"]) == (3.25, 2.75)


def test_list_schedulers_time_transfers_by_the_curve():
    p = problem([op("a", out=2560), op("b", ["a"])], with_curve(devices(3)))
    links = Links(p)
    assert links.time(0, 1, 2560) == 1.25 and links.time(1, 1, 2560) == 0.0
    assert links.mean_time(544) == 0.375  # every pair shares the bus
    costs = get_profile().arrays(p.graph, p.devices)
    assert costs.transfer_time(0, 7168, 0) == 3.5
