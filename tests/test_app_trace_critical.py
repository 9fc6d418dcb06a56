"""Trace page, critical path (AppTest): a table in time order and a connected line across the rows."""

import pytest
from apptest_util import assert_clean, figures, frame, goto, start

from placement_core import Problem, load_devices, load_network
from placement_core.model.placement import single_device


def test_the_critical_path_of_a_single_device_step_is_the_whole_step():
    at = start()
    goto(at, "trace")
    at.toggle(key="trace_critical").set_value(True).run()
    assert_clean(at)
    problem = Problem(load_network("resnet50"), load_devices("malvik-4gpu"))
    result = problem.simulate(single_device(problem.graph, problem.devices, "gpu0"), trace=True).result
    table = frame(at, "event")
    # one device, nothing in parallel: the path runs back to back from 0 to the makespan (zero-length events
    # that end where the next starts may or may not be on it)
    assert len(result.trace) - 3 <= len(table) <= len(result.trace)
    assert table["duration (ms)"].sum() == pytest.approx(result.makespan * 1e3, rel=1e-9)
    assert table["share of the makespan (%)"].sum() == pytest.approx(100.0, rel=1e-9)
    assert list(table["start (ms)"]) == sorted(table["start (ms)"])
    assert set(table["device or channel"]) == {"gpu0"}
    gantt = next(f for f in figures(at) if f["layout"]["xaxis"]["title"]["text"] == "time (ms)"
                 and "Memory" not in str(f["layout"].get("title", "")))
    [line] = [t for t in gantt["data"] if t.get("mode") == "lines" and t.get("name") == "critical path"]
    assert len(line["x"]) == 2 * len(table)
