"""Devices page (AppTest): presets, table edits with validation, uploads, topology, download."""

import json

import pytest
from helpers import calibrated_devices_doc
from apptest_util import assert_clean, figures, goto, sidebar_text, start, text

from placement_core import load_devices
from placement_core.model.devices import devices_to_dict


def devices_page():
    at = start()
    goto(at, "devices")
    assert_clean(at)
    return at


@pytest.mark.slow
def test_default_devices_in_tables_and_pictures():
    at = devices_page()
    dev, chan, shared = at.data_editor
    assert dev.value["name"].tolist() == ["cpu0", "gpu0", "gpu1", "gpu2", "gpu3"]
    assert shared.value.empty  # the preset shares nothing
    assert dev.value["memory GB"].tolist() == [755, 32, 32, 32, 32]
    assert chan.value["bandwidth GB/s"].tolist() == [16] * 4
    assert not figures(at) and at.get("iframe")  # the explorable graph by default (tests/test_app_nodelink.py)
    at.segmented_control(key="dev_view").set_value("charts").run()
    links, routes = figures(at)
    assert routes["layout"]["xaxis"]["title"]["text"] == "to device"
    assert routes["data"][0]["text"][2][0] == "pcie1"  # row gpu1, column cpu0: gpu1 -> cpu0 is on pcie1
    assert routes["data"][0]["text"][0][0] == ""  # no route from a device to itself
    assert [t["text"] for t in links["data"] if t.get("mode") == "markers+text"][0] == [
        "cpu0", "gpu0", "gpu1", "gpu2", "gpu3"]
    assert at.get("download_button")[0].proto.label == "Download as JSON"
    assert "malvik-4gpu" in sidebar_text(at)


@pytest.mark.slow
def test_editing_a_channel_to_zero_bandwidth_shows_a_validation_message_and_keeps_the_devices():
    at = devices_page()
    key = at.data_editor[1].key
    at.session_state[key] = {"edited_rows": {1: {"bandwidth GB/s": 0}}, "added_rows": [], "deleted_rows": []}
    at.run()
    assert not at.exception
    [err] = at.error
    assert "Channels table, row 2 (pcie1): column 'bandwidth GB/s': must be greater than zero" in err.value
    assert "last valid device graph is still in use" in err.value
    assert at.session_state["devices"].channels[1].bandwidth == 16e9


@pytest.mark.slow
def test_a_valid_edit_applies_at_once():
    at = devices_page()
    key = at.data_editor[0].key
    at.session_state[key] = {"edited_rows": {1: {"memory GB": 8}}, "added_rows": [], "deleted_rows": []}
    at.run()
    assert_clean(at)
    assert "Changes applied" in text(at)
    assert at.session_state["devices"].devices[1].memory_bytes == 8e9
    assert "malvik-4gpu (edited)" in sidebar_text(at)


@pytest.mark.slow
def test_choosing_a_preset_refreshes_the_tables():
    at = devices_page()
    at.selectbox(key="dev_preset").set_value("malvik").run()
    assert_clean(at)
    assert at.data_editor[0].value["name"].tolist() == ["cpu0", "gpu0", "gpu1"]
    assert devices_to_dict(at.session_state["devices"]) == devices_to_dict(load_devices("malvik"))


def test_a_bad_device_file_shows_an_error_and_keeps_the_devices():
    at = devices_page()
    bad = {"format": "placement-devices/1", "name": "x", "devices": [
        {"name": "g", "kind": "tpu", "peak_flops": 1, "memory_bytes": 1, "mem_bandwidth": 1}]}
    at.file_uploader(key="dev_upload").upload("x.json", json.dumps(bad).encode(), "application/json").run()
    assert not at.exception
    [err] = at.error
    # the message is escaped for markdown (a file's strings cannot inject markup): compare it unescaped
    assert "x.json: devices[0].kind: kind must be 'cpu' or 'gpu'" in err.value.replace("\\", "")
    assert at.session_state["devices"].name == "malvik-4gpu"


def test_an_exprimo_device_file_loads():
    at = devices_page()
    exprimo = {"comm_channels": [{"type": "pcie3", "bandwidth": 128}],
               "devices": [{"model": "cpu", "clock": 2000, "peak_gflops": 800, "memory": 100, "mem_bandwidth": 60,
                            "type": "cpu", "neighbours": [{"comm_channel": 0, "device": 1}]},
                           {"model": "gpu", "clock": 1300, "peak_gflops": 9000, "memory": 16, "mem_bandwidth": 700,
                            "type": "gpu", "neighbours": [{"comm_channel": 0, "device": 0}]}]}
    at.file_uploader(key="dev_upload").upload("exprimo.json", json.dumps(exprimo).encode(), "application/json").run()
    assert_clean(at)
    assert at.data_editor[0].value["name"].tolist() == ["cpu0", "gpu0"]
    assert at.session_state["devices"].names == ["cpu0", "gpu0"]


@pytest.mark.slow
def test_missing_values_are_empty_cells_in_numeric_columns():
    """nvlink-8gpu gives no clock: the column stays numeric and empty cells show as empty, not "None"."""
    from apptest_util import goto, start
    at = goto(start(), "devices")
    at.selectbox(key="dev_preset").set_value("nvlink-8gpu").run()
    editors = at.dataframe
    assert len(editors) >= 2
    for e in editors[:2]:
        assert e.proto.placeholder == ""
    devices = editors[0].value
    assert str(devices["clock MHz"].dtype) == "float64" and devices["clock MHz"].isna().all()
    assert str(devices["µs per message"].dtype) == "float64"


@pytest.mark.slow
def test_a_measured_transfer_curve_is_shown_kept_through_navigation_and_editable():
    at = devices_page()
    curve = [[4, 4e-05], [1000000, 0.0011], [268435456, 0.29]]
    doc = {"format": "placement-devices/1", "name": "local-e1", "devices": [
        {"name": n, "kind": "cpu", "peak_flops": 5e10, "memory_bytes": 8e9, "mem_bandwidth": 1.8e10} for n in
        ("cpu0", "cpu1")], "channels": [{"name": "cpu0-cpu1", "bandwidth": 3.5e9, "latency": 2.3e-4,
                                         "routes": [["cpu0", "cpu1"], ["cpu1", "cpu0"]], "transfer_curve": curve}]}
    at.file_uploader(key="dev_upload").upload("e1.json", json.dumps(doc).encode(), "application/json").run()
    assert_clean(at)
    assert at.data_editor[1].value["transfer curve"].tolist() == ["4: 4e-05, 1000000: 0.0011, 268435456: 0.29"]
    assert [list(p) for p in at.session_state["devices"].channels[0].transfer_curve] == curve
    # to another page and back: the curve is still the device graph's, and nothing was marked edited
    goto(at, "network")
    goto(at, "devices")
    assert_clean(at)
    assert [list(p) for p in at.session_state["devices"].channels[0].transfer_curve] == curve
    assert "(edited)" not in sidebar_text(at)
    # an edit of the curve applies; a point without its time is named
    key = at.data_editor[1].key
    at.session_state[key] = {"edited_rows": {0: {"transfer curve": "4: 5e-05, 1000000: 0.002"}}, "added_rows": [],
                             "deleted_rows": []}
    at.run()
    assert_clean(at)
    assert at.session_state["devices"].channels[0].transfer_curve == ((4.0, 5e-05), (1e6, 0.002))
    at.session_state[key] = {"edited_rows": {0: {"transfer curve": "4: 5e-05, 1000000"}}, "added_rows": [],
                             "deleted_rows": []}
    at.run()
    [err] = at.error
    assert "Channels table, row 1 (cpu0-cpu1): column 'transfer curve': cannot read the point '1000000'" in \
        err.value.replace("\\", "")
    assert at.session_state["devices"].channels[0].transfer_curve == ((4.0, 5e-05), (1e6, 0.002))


@pytest.mark.slow
def test_the_new_devices_suggested_name_follows_the_devices_until_the_user_types_one():
    """malvik-4gpu has gpu0..gpu3: the next is gpu4; after switching to malvik (gpu0, gpu1) gpu2. A name the user
    typed stays through a switch. (It used to stay gpu5, the device count of the first graph, everywhere.)"""
    at = start()
    goto(at, "devices")
    assert at.text_input(key="dev_add_name").value == "gpu4"
    at.selectbox(key="dev_preset").set_value("malvik").run()
    assert at.text_input(key="dev_add_name").value == "gpu2" and not at.exception
    [add] = [b for b in at.button if b.label == "Add the device"]
    add.click().run()  # the suggestion taken: gpu2 is added, and the next one offered
    assert at.session_state["devices"].names[-1] == "gpu2" and at.text_input(key="dev_add_name").value == "gpu3"
    at.text_input(key="dev_add_name").set_value("tpu0")
    [add] = [b for b in at.button if b.label == "Add the device"]
    add.click().run()
    assert "tpu0" in at.session_state["devices"].names
    at.selectbox(key="dev_preset").set_value("nvlink-8gpu").run()
    assert at.text_input(key="dev_add_name").value == "tpu0"
    assert_clean(at)


@pytest.mark.slow
def test_a_calibrated_graph_keeps_its_collectives_and_shared_cores_through_an_edit():
    """Editing one memory size of a calibrated graph used to rebuild it from the two tables and drop its
    measured all-reduce and shared cores; they stay, are shown, and the shared resource is editable."""
    at = devices_page()
    doc = calibrated_devices_doc()
    at.file_uploader(key="dev_upload").upload("local.json", json.dumps(doc).encode(), "application/json").run()
    assert_clean(at)
    dev, _, shared = at.data_editor
    assert shared.value.to_dict("records") == [{"name": "cpu-cores", "devices": "cpu0, cpu1", "capacity": 2.0,
                                                 "demands": "", "collective demand": 0.92}]
    collectives = next(d.value for d in at.dataframe if "alone ms" in d.value.columns)
    assert collectives["op"].tolist() == ["allreduce"] and collectives["alone ms"].tolist() == [32.5]
    at.session_state[dev.key] = {"edited_rows": {1: {"memory GB": 4}}, "added_rows": [], "deleted_rows": []}
    at.run()
    assert_clean(at)
    g = at.session_state["devices"]
    assert g.devices[1].memory_bytes == 4e9
    assert len(g.collectives) == 1 and g.collectives[0].busy_seconds == (0.004, 0.0678)
    assert g.shared[0].collective_demand == 0.92 and g.shared[0].capacity == 2.0
    # the shared resource's own cells apply, and a bad one is named by row and column
    key = at.data_editor[2].key
    at.session_state[key] = {"edited_rows": {0: {"collective demand": 0.5}}, "added_rows": [], "deleted_rows": []}
    at.run()
    assert_clean(at)
    assert at.session_state["devices"].shared[0].collective_demand == 0.5
    at.session_state[key] = {"edited_rows": {0: {"capacity": 0}}, "added_rows": [], "deleted_rows": []}
    at.run()
    [err] = at.error
    assert "Shared resources table, row 1" in err.value and "capacity" in err.value
    assert at.session_state["devices"].shared[0].capacity == 2.0


def test_a_dgx_graph_keeps_its_tensor_core_rates_and_measured_links_through_an_edit():
    """The tables had no column for a GPU's bf16 peak, its SMs, its measured matmul rate or a link's measured
    bandwidth: editing one memory size of a DGX graph dropped them (every bf16 op 16x slower, every link at 25 %).
    They are columns now, kept through an edit and editable."""
    at = devices_page()
    doc = devices_to_dict(load_devices("dgx-a100:nodes=1"))
    at.file_uploader(key="dev_upload").upload("dgx.json", json.dumps(doc).encode(), "application/json").run()
    assert_clean(at)
    dev, chan = at.data_editor[0], at.data_editor[1]
    row = dev.value.iloc[0]
    assert (row["SMs"], row["bf16 peak TFLOP/s"], row["bf16 measured TFLOP/s"]) == (108, 312, 267.9)
    assert chan.value.iloc[0]["measured GB/s"] == pytest.approx(300 * 370 / 450)
    at.session_state[dev.key] = {"edited_rows": {1: {"memory GB": 40}}, "added_rows": [], "deleted_rows": []}
    at.run()
    assert_clean(at)
    g, original = at.session_state["devices"], load_devices("dgx-a100:nodes=1")
    assert g.devices[1].memory_bytes == 40e9
    assert g.devices[0] == original.devices[0] and g.devices[1].achieved == (("bf16", 267.9e12), ("fp16", 267.9e12))
    assert g.devices[1].peak_for("bf16") == 312e12 and g.devices[1].sms == 108
    assert [c.achieved_bandwidth for c in g.channels] == pytest.approx([300e9 * 370 / 450] * 8)
    # a measured bandwidth emptied: that link falls back to its bandwidth times the efficiency
    at.session_state[at.data_editor[1].key] = {"edited_rows": {0: {"measured GB/s": None}}, "added_rows": [],
                                               "deleted_rows": []}
    at.run()
    assert_clean(at)
    assert at.session_state["devices"].channels[0].achieved_bandwidth == 0.0
    assert at.session_state["devices"].channels[1].achieved_bandwidth == pytest.approx(300e9 * 370 / 450)
