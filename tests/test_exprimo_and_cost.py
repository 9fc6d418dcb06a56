"""Exprimo network import and the two cost profiles, against numbers worked out by hand."""

import math

import numpy as np
import pytest

from placement_core.cost.profiles import get_profile
from placement_core.model.devices import Channel, Device, DeviceGraph
from placement_core.base.errors import InputError
from placement_core.formats.exprimo import network_from_exprimo
from placement_core.model.graph import Graph, Op
from placement_core.formats.network import network_from_dict, network_to_dict
from placement_core.model.placement import placement_from_dict, single_device
from placement_core.problem import Problem

# A small network in the thesis' format: NHWC, SAME/VALID padding, -1 channel inference,
# a Block with an endpoint and a nested Block.
NET = {
    "name": "tiny",
    "layers": {
        "data": {"type": "Input", "parents": [], "tensor": [8, 8, 8, 3]},
        "conv1": {"type": "Convolution", "parents": ["data"], "filter": [3, 3, -1, 4], "strides": [1, 1, 1, 1],
                  "padding": "SAME"},
        "pool1": {"type": "Pooling", "parents": ["conv1"], "ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1],
                  "padding": "VALID"},
        "mix": {"type": "Block", "parents": ["pool1"], "endpoint": "cat", "layers": {
            "a": {"type": "Convolution", "parents": [], "filter": [1, 1, 4, 2], "strides": [1, 1, 1, 1],
                  "padding": "SAME"},
            "b": {"type": "Convolution", "parents": [], "filter": [3, 3, -1, 2], "strides": [1, 1, 1, 1],
                  "padding": "SAME"},
            "inner": {"type": "Block", "parents": ["b"], "endpoint": "d", "layers": {
                "d": {"type": "Dropout", "parents": [], "dropout_keep_prob": 0.5}}},
            "cat": {"type": "Concatenate", "parents": ["a", "inner"], "dim": 3},
        }},
        "fc": {"type": "InnerProduct", "parents": ["mix"], "num_outputs": 10},
        "softmax": {"type": "Softmax", "parents": ["fc"], "num_classes": 10},
    },
}


@pytest.fixture
def tiny():
    return network_from_exprimo(NET, source="tiny.json", batch_size=2)


def test_layers_are_flattened_by_path(tiny):
    assert [o.name for o in tiny.ops] == ["data", "conv1", "pool1", "mix/a", "mix/b", "mix/inner/d", "mix/cat",
                                          "fc", "softmax"]
    assert tiny.op("mix/a").inputs == ("pool1",)  # empty parents = the block's parents
    assert tiny.op("mix/inner/d").inputs == ("mix/b",)  # nested block, parent resolved in the outer block
    assert tiny.op("mix/cat").inputs == ("mix/a", "mix/inner/d")  # a block as parent = its endpoint
    assert tiny.op("fc").inputs == ("mix/cat",)


def test_shapes_by_hand(tiny):
    shapes = {o.name: o.shape for o in tiny.ops}
    assert shapes == {
        "data": (2, 8, 8, 3),  # batch 2 replaces the file's 8
        "conv1": (2, 8, 8, 4),  # SAME, stride 1
        "pool1": (2, 4, 4, 4),  # VALID: ceil((8 - 2 + 1) / 2) = 4
        "mix/a": (2, 4, 4, 2), "mix/b": (2, 4, 4, 2), "mix/inner/d": (2, 4, 4, 2),
        "mix/cat": (2, 4, 4, 4),  # 2 + 2 channels
        "fc": (2, 10), "softmax": (2, 10),
    }
    assert tiny.op("conv1").output_bytes == 2 * 8 * 8 * 4 * 4


def test_flops_and_parameters_by_hand(tiny):
    conv1, pool1, a, b, fc = (tiny.op(n) for n in ("conv1", "pool1", "mix/a", "mix/b", "fc"))
    assert conv1.fwd_flops == 2 * 3 * 3 * 3 * 4 * 8 * 8 * 2 == 27648
    assert conv1.bwd_flops == 27648  # first layer: weight gradient only
    assert conv1.param_bytes == (3 * 3 * 3 * 4 + 4) * 4 == 448
    assert pool1.fwd_flops == 2 * 2 * 4 * 4 * 4 * 2 == 512  # kh*kw*C*Hout*Wout*N
    assert b.fwd_flops == 2 * 3 * 3 * 4 * 2 * 4 * 4 * 2 == 4608
    assert b.bwd_flops == 2 * 4608  # input and weight gradients
    assert a.param_bytes == (4 * 2 + 2) * 4
    assert fc.fwd_flops == 2 * 64 * 10 * 2 == 2560  # flattened 4*4*4 inputs
    assert fc.param_bytes == (64 * 10 + 10) * 4 == 2600
    assert conv1.mem_bytes == (2 * 8 * 8 * 3 + 2 * 8 * 8 * 4) * 4 + 448


def test_exprimo_terms_by_hand(tiny):
    conv1 = tiny.op("conv1").exprimo
    # padded input (SAME, 3x3: one pixel each side), filter (no bias), output; 4 bytes each
    assert conv1["fwd"] == (27648.0, [2 * 10 * 10 * 3 * 4, 3 * 3 * 3 * 4 * 4, 2 * 8 * 8 * 4 * 4])
    assert conv1["bwd"] == (0.0, [])  # parent is the input layer "data"
    b = tiny.op("mix/b").exprimo
    # input gradient: stride-1 conv of the output gradient (2 ch) with a 3x3x2x4 filter, padding 1
    assert b["bwd"] == (2 * 3 * 3 * 2 * 4 * 4 * 4 * 2, [2 * 6 * 6 * 2 * 4, 3 * 3 * 2 * 4 * 4, 2 * 4 * 4 * 4 * 4])
    fc = tiny.op("fc").exprimo
    assert fc["fwd"] == (2 * 2 * 64 * 10, [2 * 64 * 4, 64 * 10 * 4, 2 * 10 * 4])
    assert fc["bwd"] == (2 * 2 * 10 * 64, [2 * 10 * 4, 64 * 10 * 4, 2 * 64 * 4])
    assert tiny.op("pool1").exprimo["fwd"] == (2 * 2 * 2 * 4 * 4 * 4 * 2, [2 * 8 * 8 * 4 * 4, 2 * 4 * 4 * 4 * 4])
    assert tiny.op("mix/cat").exprimo == {"fwd": (0.0, []), "bwd": (0.0, [])}


def test_strided_convolution_backward_counts_the_stride_holes():
    net = {"layers": {"data": {"type": "Input", "parents": [], "tensor": [1, 4, 4, 1]},
                      "pre": {"type": "Dropout", "parents": ["data"], "dropout_keep_prob": 1.0},
                      "conv": {"type": "Convolution", "parents": ["pre"], "filter": [2, 2, 1, 1],
                               "strides": [1, 2, 2, 1], "padding": "VALID"}}}
    g = network_from_exprimo(net, batch_size=1)
    assert g.op("conv").shape == (1, 2, 2, 1)
    flops, mem = g.op("conv").exprimo["bwd"]
    # output gradient expanded to 3x3 (5 of 9 pixels are holes), padded by 1, conv with the 2x2 filter:
    # 2*2*2*1*4*4*1*1 = 128, plus 2 * 9 * (1 - 5/9) = 8 for moving the non-hole inputs
    assert flops == pytest.approx(136)
    assert mem == [5 * 5 * 4, 2 * 2 * 4, 4 * 4 * 4]


@pytest.mark.parametrize("mutate, text", [
    (lambda n: n["layers"]["conv1"].update(type="Conv3D"), "unknown layer type 'Conv3D'"),
    (lambda n: n["layers"]["conv1"].update(parents=["nothing"]), "names parent 'nothing'"),
    (lambda n: n["layers"]["conv1"].update(filter=[3, 3, 5, 4]), "expects 5 input channels"),
    (lambda n: n["layers"]["conv1"].update(padding="FULL"), "padding must be SAME, VALID"),
    (lambda n: n["layers"]["conv1"].update(splits=2), "floor-divides the layer's output channels"),
    (lambda n: n["layers"]["data"].update(parents=["softmax"]), "cycle"),
    (lambda n: n["layers"]["mix"].update(endpoint="zzz"), "endpoint 'zzz'"),
    (lambda n: n["layers"]["pool1"].update(ksize=[1, 20, 20, 1]), "output would be empty"),
    (lambda n: n["layers"]["fc"].update(num_outputs=0), "num_outputs must be a positive integer"),
])
def test_exprimo_network_errors(mutate, text):
    import copy
    net = copy.deepcopy(NET)
    mutate(net)
    with pytest.raises(InputError, match=text):
        network_from_exprimo(net, source="bad.json")


def test_exprimo_placement_files_load(tiny):
    devs = three_devices()
    pl = placement_from_dict({o.name: 1 for o in tiny.ops} | {"data": 0}, tiny, devs)
    assert list(pl) == [0] + [1] * 8
    with pytest.raises(InputError, match="device index 7"):
        placement_from_dict({o.name: 7 for o in tiny.ops}, tiny, devs)
    with pytest.raises(InputError, match="no device for op"):
        placement_from_dict({"data": 0}, tiny, devs)


def three_devices(clock=1e6):
    devs = [Device("cpu0", "cpu", 1e9, 1e12, 1e9, clock_hz=clock),
            Device("gpu0", "gpu", 2e9, 1e12, 2e9, clock_hz=clock),
            Device("gpu1", "gpu", 2e9, 1e12, 2e9, clock_hz=clock)]
    pairs = tuple((a.name, b.name) for a in devs for b in devs if a.name != b.name)
    return DeviceGraph("three", devs, [Channel("bus", 16e9, 0.0, pairs)])


def test_exprimo_2020_op_time_by_hand(tiny):
    arrays = get_profile("exprimo-2020").arrays(tiny, three_devices())
    cycle = 1e-6
    terms = [27648 / 1e9 / 0.9, 2400 / 2**30 / 0.9, 432 / 2**30 / 0.9, 2048 / 2**30 / 0.9]
    # every non-zero term lasts at least one clock cycle (432 B takes 0.45 us < 1 us)
    assert arrays.fwd[1, 0] == pytest.approx(sum(max(t, cycle) for t in terms))
    assert arrays.bwd[1, 0] == 0.0
    assert arrays.fwd[0, 0] == 0.0  # Input costs nothing
    assert (arrays.update == 0).all()
    # transfer: bytes / (2^30 * Gbit/s / 8) / 0.25, Gbit/s = 128 for 16e9 bytes/s
    assert 1 / arrays.ch_inv_rate[0] == pytest.approx(2**30 * 128 / 8 * 0.25)
    assert list(arrays.min_transfer) == [cycle] * 3


def test_exprimo_2020_single_device_invariants(tiny):
    """docs/design.md §4-5: on one device the makespan is the sum of all forward and backward op times, and the
    peak is every weight plus every forward output except the sink's."""
    devs = three_devices()
    p = Problem(tiny, devs, profile="exprimo-2020")
    weights = 448 + 40 + 296 + 2600
    outputs = 4 * (2 * 8 * 8 * 3 + 2 * 8 * 8 * 4 + 2 * 4 * 4 * 4 + 3 * 2 * 4 * 4 * 2 + 2 * 4 * 4 * 4 + 2 * 10)
    for d in range(3):
        r = p.simulate(single_device(tiny, devs, d)).result
        assert r.makespan == pytest.approx(p.costs.fwd[:, d].sum() + p.costs.bwd[:, d].sum(), rel=1e-12)
        assert r.peak_memory[d] == weights + outputs == 8840


def test_roofline_profile_by_hand():
    g = Graph("g", [Op("x", kind="input", output_bytes=1000),
                    Op("conv", kind="conv", inputs=("x",), fwd_flops=9e9, bwd_flops=18e9, mem_bytes=3e9,
                       param_bytes=1e6, output_bytes=1000),
                    Op("relu", kind="activation", inputs=("conv",), fwd_flops=1e6, bwd_flops=1e6, mem_bytes=2e9,
                       output_bytes=1000)])
    devs = three_devices()
    a = get_profile("default").arrays(g, devs)
    # cpu0: 1 GFLOPS * 0.9, 1 GB/s memory
    assert a.fwd[1, 0] == pytest.approx(max(9e9 / 0.9e9, 3e9 / 1e9))  # compute-bound: 10 s
    assert a.bwd[1, 0] == pytest.approx(max(18e9 / 0.9e9, 6e9 / 1e9))
    assert a.fwd[2, 0] == pytest.approx(2.0)  # memory-bound: 2e9 B / 1e9 B/s
    assert a.bwd[2, 1] == pytest.approx(2 * 2e9 / 2e9)  # twice the traffic
    assert a.update[1, 1] == pytest.approx(3 * 1e6 / 2e9)  # read weight, read gradient, write weight
    assert a.update[2, 1] == 0
    assert a.ch_latency[0] == 0 and 1 / a.ch_inv_rate[0] == pytest.approx(16e9 * 0.25)
    b = get_profile("default", comp_efficiency=0.5, comm_efficiency=1.0).arrays(g, devs)
    assert b.fwd[1, 0] == pytest.approx(18.0)
    assert 1 / b.ch_inv_rate[0] == pytest.approx(16e9)


def test_measured_times_override_the_formula():
    g = Graph("g", [Op("a", kind="conv", fwd_flops=1e12, times={"gpu": {"fwd": 0.5}, "gpu1": {"bwd": 0.25}})])
    devs = three_devices()
    a = get_profile("default").arrays(g, devs)
    assert a.fwd[0, 0] == pytest.approx(1e12 / 0.9e9)  # cpu: formula
    assert list(a.fwd[0, 1:]) == [0.5, 0.5]  # by kind
    assert a.bwd[0, 2] == 0.25 and a.bwd[0, 1] == 0.0  # by name, only where given
    table = {"a": {"gpu0": {"fwd": 0.125}}}
    b = get_profile("default", timings=table).arrays(g, devs)
    assert b.fwd[0, 1] == 0.125 and b.fwd[0, 2] == 0.5  # a calibration table beats the file's times
    ex = get_profile("exprimo-2020").arrays(g, devs)
    assert ex.fwd[0, 1] == 0.5


def test_profile_errors():
    with pytest.raises(InputError, match="unknown cost profile"):
        get_profile("paleo")
    with pytest.raises(InputError, match=r"must be in \(0, 1\]"):
        get_profile("default", comm_efficiency=1.5)


def test_exprimo_terms_survive_export(tiny):
    again = network_from_dict(network_to_dict(tiny))
    assert again.ops == tiny.ops
    p1 = Problem(tiny, three_devices(), profile="exprimo-2020")
    p2 = Problem(again, three_devices(), profile="exprimo-2020")
    assert np.array_equal(p1.costs.fwd, p2.costs.fwd) and np.array_equal(p1.costs.bwd, p2.costs.bwd)
    assert math.isclose(p1.evaluate([1] * 9), p2.evaluate([1] * 9))
