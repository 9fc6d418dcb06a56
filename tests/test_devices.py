"""Device graphs: the format, validation messages, presets, Exprimo import."""

import sys
from pathlib import Path

import pytest

from placement_core.formats.catalog import builtin_devices, load_devices
from placement_core.model.devices import devices_from_dict, devices_to_dict
from placement_core.base.errors import InputError
from placement_core.formats.exprimo import devices_from_exprimo


def graph(devices=None, channels=None):
    devices = devices if devices is not None else [
        {"name": "cpu0", "kind": "cpu", "peak_flops": 1e12, "memory_bytes": 1e11, "mem_bandwidth": 1e11},
        {"name": "gpu0", "kind": "gpu", "peak_flops": 1e13, "memory_bytes": 1e10, "mem_bandwidth": 9e11},
    ]
    channels = channels if channels is not None else [
        {"name": "pcie", "bandwidth": 16e9, "latency": 1e-5, "routes": [["cpu0", "gpu0"], ["gpu0", "cpu0"]]}]
    return {"format": "placement-devices/1", "name": "g", "devices": devices, "channels": channels}


def test_round_trip_and_routes():
    g = devices_from_dict(graph())
    assert g.route == {(0, 1): 0, (1, 0): 0}
    assert devices_from_dict(devices_to_dict(g)).devices == g.devices
    assert devices_to_dict(devices_from_dict(devices_to_dict(g))) == devices_to_dict(g)


def test_message_overhead_round_trip_and_omitted_when_zero():
    data = graph()
    data["devices"][0]["message_overhead"] = 2.5e-4
    g = devices_from_dict(data)
    assert [d.message_overhead for d in g.devices] == [2.5e-4, 0.0]
    out = devices_to_dict(g)
    assert out["devices"][0]["message_overhead"] == 2.5e-4
    assert "message_overhead" not in out["devices"][1]  # 0, the default: files without the field stay as they are
    assert devices_from_dict(out).devices == g.devices
    assert "message_overhead" not in str(devices_to_dict(devices_from_dict(graph())))
    for preset in builtin_devices():  # the thesis' presets have none
        assert all(d.message_overhead == 0 for d in load_devices(preset).devices), preset


def cpu(name="c", **kw):
    return {"name": name, "kind": "cpu", "peak_flops": 1e12, "memory_bytes": 1e9, "mem_bandwidth": 1e9, **kw}


@pytest.mark.parametrize("data, field, text", [
    (graph(channels=[]), "channels", "no route for cpu0 -> gpu0, gpu0 -> cpu0"),
    (graph(channels=[{"name": "p", "bandwidth": 1, "routes": [["cpu0", "gpu0"]]}]), "channels",
     "no route for gpu0 -> cpu0"),
    (graph(channels=[{"name": "p", "bandwidth": 0, "routes": []}]), "channels[0].bandwidth", "must be positive"),
    (graph(channels=[{"name": "p", "bandwidth": -5, "routes": []}]), "channels[0].bandwidth", "must be positive"),
    (graph(devices=[cpu(peak_flops=0)], channels=[]), "devices[0].peak_flops", "must be positive"),
    (graph(devices=[cpu(memory_bytes=0)], channels=[]), "devices[0].memory_bytes", "must be positive"),
    (graph(devices=[cpu(mem_bandwidth=-1)], channels=[]), "devices[0].mem_bandwidth", "must be positive"),
    (graph(devices=[cpu("x"), cpu("x")], channels=[]), "devices[1].name", "duplicate device name 'x'"),
    (graph(devices=[cpu(kind="tpu")], channels=[]), "devices[0].kind", "'cpu' or 'gpu'"),
    (graph(devices=[], channels=[]), "devices", "no devices"),
    (graph(channels=[{"name": "p", "bandwidth": 1, "routes": [["cpu0", "gpu9"]]}]), "channels[0].routes[0]",
     "'gpu9', which is not in this graph"),
    (graph(channels=[{"name": "p", "bandwidth": 1, "routes": [["cpu0", "gpu0"], ["gpu0", "cpu0"]]},
                     {"name": "q", "bandwidth": 1, "routes": [["cpu0", "gpu0"]]}]),
     "channels[1].routes[0]", "on two channels"),
    (graph(channels=[{"name": "p", "bandwidth": 1, "routes": ["cpu0"]}]), "channels[0].routes[0]",
     "[SRC, DST]"),
    (graph(channels=[{"name": "p", "bandwidth": 1, "routes": [], "bw": 3}]), "channels[0]", "unknown field 'bw'"),
    (graph(channels=[{"name": "cpu0", "bandwidth": 1, "routes": [["cpu0", "gpu0"], ["gpu0", "cpu0"]]}]),
     "channels[0].name", "also a device name"),
    (graph(devices=[cpu(message_overhead=-1e-6)], channels=[]), "devices[0].message_overhead",
     "must not be negative"),
    (graph(devices=[cpu(message_overhead=float("nan"))], channels=[]), "devices[0].message_overhead",
     "expected a finite number"),
    (graph(devices=[cpu(message_overhead="10us")], channels=[]), "devices[0].message_overhead",
     "expected a number"),
    (graph(devices=[cpu(message_overhead=1e6)], channels=[]), "devices[0].message_overhead", "implausibly large"),
])
def test_validation_errors(data, field, text):
    with pytest.raises(InputError) as e:
        devices_from_dict(data, source="d.json")
    assert e.value.field == field, str(e.value)
    assert text in str(e.value)
    assert str(e.value).startswith("d.json: ")


def test_presets():
    assert set(builtin_devices()) >= {"malvik", "luke01", "malvik-4gpu", "malvik-4gpu-limited-alexnet",
                                       "malvik-4gpu-limited-resnet50", "malvik-4gpu-limited-inception",
                                       "nvlink-8gpu"}
    malvik = load_devices("malvik")
    assert malvik.names == ["cpu0", "gpu0", "gpu1"]
    gpu = malvik.devices[1]
    assert (gpu.peak_flops, gpu.memory_bytes, gpu.mem_bandwidth) == (14000e9, 32e9, 900e9)  # V100, Table 4.1
    assert malvik.devices[0].peak_flops == 1800e9
    # each GPU on its own PCIe3 x16 (128 Gbit/s); CPU->GPU and GPU->GPU share the sender's link
    assert [c.bandwidth for c in malvik.channels] == [16e9, 16e9]
    assert malvik.channel_for(0, 1).name == malvik.channel_for(1, 2).name == "pcie0"
    assert malvik.channel_for(2, 1).name == "pcie1"
    assert load_devices("luke01").devices[1].peak_flops == 9300e9  # P100, Table 4.2
    assert [d.memory_bytes for d in load_devices("malvik-4gpu-limited-alexnet").devices[1:]] == [200e6] * 4
    assert [d.memory_bytes for d in load_devices("malvik-4gpu-limited-resnet50").devices[1:]] == [2.5e9] * 4
    assert [d.memory_bytes for d in load_devices("malvik-4gpu-limited-inception").devices[1:]] == [2.5e9] * 4
    nv = load_devices("nvlink-8gpu")
    assert sum(d.kind == "gpu" for d in nv.devices) == 8
    assert len(nv.route) == 9 * 8


# an Exprimo device file in miniature (a Xeon and two V100s on two PCIe channels), shared with the long fuzz
# campaign, which mutates it
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from fuzz_campaign import EXPRIMO_DEVICES as EXPRIMO  # noqa: E402


def test_exprimo_device_import():
    g = devices_from_exprimo(EXPRIMO, source="malvik.json")
    assert g.names == ["cpu0", "gpu0", "gpu1"]
    assert g.name == "malvik"
    cpu, gpu = g.devices[0], g.devices[1]
    assert (cpu.peak_flops, cpu.memory_bytes, cpu.mem_bandwidth, cpu.clock_hz) == (1800e9, 395e9, 76.8e9, 2000e6)
    assert gpu.model == "V100" and gpu.kind == "gpu"
    assert [c.bandwidth for c in g.channels] == [16e9, 8e9]  # Gbit/s -> bytes/s
    assert [c.latency for c in g.channels] == [0.0, 0.0]
    # neighbour (c, j) of device i is the route i -> j on channel c
    assert g.route == {(0, 1): 0, (0, 2): 1, (1, 0): 0, (1, 2): 0, (2, 0): 1, (2, 1): 1}


def test_exprimo_device_errors():
    bad = {**EXPRIMO, "devices": [dict(EXPRIMO["devices"][0], neighbours=[{"comm_channel": 5, "device": 1}])]}
    with pytest.raises(InputError, match="comm_channel 5 is not a channel index"):
        devices_from_exprimo(bad)
    lonely = {**EXPRIMO, "devices": [dict(d, neighbours=[]) for d in EXPRIMO["devices"]]}
    with pytest.raises(InputError, match="no route for cpu0 -> gpu0"):
        devices_from_exprimo(lonely)


def test_message_overhead_is_checked_when_built_in_python():
    from placement_core.model.devices import Device, DeviceGraph
    for bad, text in ((-1e-3, "must not be negative"), (float("nan"), "expected a finite number")):
        with pytest.raises(InputError) as e:
            DeviceGraph("g", [Device("c", "cpu", 1.0, 1.0, 1.0, message_overhead=bad)], [])
        assert e.value.field == "devices[0].message_overhead" and text in str(e.value)


def test_add_device_connects_it_to_every_device_over_one_channel():
    import pytest as _pytest

    from placement_core import InputError, load_devices
    from placement_core.analysis.device_tables import add_device

    base = load_devices("malvik")  # cpu0, gpu0, gpu1; pcie0 and pcie1
    row = {"name": "gpu2", "kind": "gpu", "model": "V100", "peak TFLOP/s": 14, "memory GB": 32,
           "memory bandwidth GB/s": 900}
    grown = add_device(base, row, channel="pcie1")
    assert grown.names == ["cpu0", "gpu0", "gpu1", "gpu2"]
    assert grown.devices[3].peak_flops == 14e12 and grown.devices[3].memory_bytes == 32e9
    new_routes = {(a, b) for a, b in grown.channels[1].routes} - {(a, b) for a, b in base.channels[1].routes}
    assert new_routes == {("gpu2", "cpu0"), ("gpu2", "gpu0"), ("gpu2", "gpu1"),
                          ("cpu0", "gpu2"), ("gpu0", "gpu2"), ("gpu1", "gpu2")}
    assert grown.channels[0].routes == base.channels[0].routes
    # a new channel of its own: 2 x 3 routes on it, the old channels untouched
    own = add_device(base, row, new_channel={"name": "nvlink", "bandwidth GB/s": 50, "latency µs": 2})
    assert [c.name for c in own.channels] == ["pcie0", "pcie1", "nvlink"]
    assert len(own.channels[2].routes) == 6 and own.channels[2].bandwidth == 50e9 and own.channels[2].latency == 2e-6
    for bad, kw, field in [({**row, "name": "gpu0"}, {"channel": "pcie1"}, "name"),
                           ({**row, "name": " "}, {"channel": "pcie1"}, "name"),
                           (row, {"channel": "nvlink"}, "channel"),
                           (row, {}, "channel"),
                           (row, {"new_channel": {"name": "pcie0", "bandwidth GB/s": 1}}, "channel name"),
                           ({**row, "memory GB": 0}, {"channel": "pcie1"}, None)]:
        with _pytest.raises(InputError) as e:
            add_device(base, bad, **kw)
        if field:
            assert e.value.field == field
