"""A calibrated device graph edited in the Devices page's tables keeps its measured collectives and shared
resources (placement_core/analysis/sharing_tables.py); the shared resources' own table; errors name the cell."""

import pytest

from placement_core.analysis.device_tables import add_device, devices_from_tables, devices_to_tables
from placement_core.analysis.sharing_tables import carry_sharing, collective_rows, shared_to_rows
from placement_core.base.errors import InputError
from placement_core.model.devices import Channel, Collective, Device, DeviceGraph, SharedResource

CURVE = Collective(("cpu0", "cpu1"), "allreduce", (4096.0, 33554432.0), (0.0037, 0.0325), (0.004, 0.0678))
CORES = SharedResource("cpu-cores", ("cpu0", "cpu1"), 2.0, collective_demand=0.92)


def calibrated() -> DeviceGraph:
    devs = [Device(f"cpu{i}", "cpu", 1e11, 8e9, 2e10) for i in range(2)]
    return DeviceGraph("local", devs, [Channel("cpu0-cpu1", 2e9, 4e-4, (("cpu0", "cpu1"), ("cpu1", "cpu0")))],
                       collectives=[CURVE], shared=[CORES])


def test_editing_a_cell_keeps_the_calibrations_collectives_and_shared_cores():
    old = calibrated()
    dev_rows, chan_rows = devices_to_tables(old)
    dev_rows[1]["memory GB"] = 4.0
    rebuilt = devices_from_tables("local", dev_rows, chan_rows)
    assert rebuilt.collectives == () and rebuilt.shared == ()  # the tables alone drop them
    kept, notes = carry_sharing(old, rebuilt)
    assert kept.collectives == (CURVE,) and kept.shared == (CORES,) and notes == []
    assert kept.devices[1].memory_bytes == 4e9


def test_a_renamed_device_drops_what_it_was_part_of_and_says_so():
    old = calibrated()
    dev_rows, chan_rows = devices_to_tables(old)
    dev_rows[1]["name"] = "cpu9"
    chan_rows[0]["routes"] = "cpu0→cpu9, cpu9→cpu0"
    kept, notes = carry_sharing(old, devices_from_tables("local", dev_rows, chan_rows))
    assert kept.collectives == () and kept.shared == ()
    assert notes == ["the measured allreduce over cpu0, cpu1 was dropped: cpu1 is no longer a device",
                     "the shared resource 'cpu-cores' was dropped: cpu1 is no longer a device"]


def test_the_shared_resources_table_round_trips_and_edits():
    old = calibrated()
    rows = shared_to_rows(old)
    assert rows == [{"name": "cpu-cores", "devices": "cpu0, cpu1", "capacity": 2.0, "demands": "",
                     "collective demand": 0.92}]
    rows[0].update({"capacity": 1.5, "demands": "1, 0.5", "collective demand": None})
    rows.append({c: None for c in rows[0]})  # the empty row a table editor adds
    kept, _ = carry_sharing(old, old, rows)
    assert kept.shared == (SharedResource("cpu-cores", ("cpu0", "cpu1"), 1.5, (1.0, 0.5), 0.0),)
    assert kept.collectives == (CURVE,)
    assert carry_sharing(old, old, [])[0].shared == ()  # every row deleted: nothing shared


@pytest.mark.parametrize("edit, row, column, words", [
    (lambda r: r[0].update(capacity=0.0), 1, "capacity", "positive"),
    (lambda r: r[0].update(devices="cpu0, cpu7"), 1, "devices", "unknown device"),
    (lambda r: r[0].update({"collective demand": -1.0}), 1, "collective demand", "negative"),
    (lambda r: r.insert(0, {"name": None, "devices": None, "capacity": None, "demands": None,
                            "collective demand": None}) or r[1].update(demands="1"), 2, "demands", "1 entries"),
])
def test_a_bad_cell_names_the_row_and_column(edit, row, column, words):
    rows = shared_to_rows(calibrated())
    edit(rows)
    with pytest.raises(InputError) as err:
        carry_sharing(calibrated(), calibrated(), rows)
    assert err.value.source == f"Shared resources table, row {row}"
    assert err.value.field == f"column '{column}'" and words in err.value.problem


def test_adding_a_device_keeps_the_sharing_and_the_collectives_table_reads_by_hand():
    grown = add_device(calibrated(), {"name": "gpu0", "kind": "gpu", "peak TFLOP/s": 15.7, "memory GB": 16.0,
                                      "memory bandwidth GB/s": 900.0}, channel="cpu0-cpu1")
    assert grown.names == ["cpu0", "cpu1", "gpu0"] and grown.collectives == (CURVE,) and grown.shared == (CORES,)
    (row,) = collective_rows(grown)
    assert row["op"] == "allreduce" and row["devices"] == "cpu0, cpu1" and row["sizes"] == 2
    assert row["largest MB"] == pytest.approx(33.554432) and row["alone ms"] == pytest.approx(32.5)
    assert row["while computing ms"] == pytest.approx(67.8)
