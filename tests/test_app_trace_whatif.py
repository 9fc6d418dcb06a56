"""Trace page, What if tab (AppTest): multipliers give the makespans worked out from the problem itself."""

from apptest_util import assert_clean, figures, goto, metrics, start

from placement_core import Problem, load_devices, load_network
from placement_core.analysis import fmt_seconds
from placement_core.model.placement import single_device


def test_a_device_twice_as_fast_halves_a_single_device_step():
    at = start()
    goto(at, "trace")
    assert_clean(at)
    problem = Problem(load_network("resnet50"), load_devices("malvik-4gpu"))
    makespan = problem.simulate(single_device(problem.graph, problem.devices, "gpu0")).result.makespan
    shown = metrics(at)
    assert shown["Makespan now"] == fmt_seconds(makespan)
    assert shown["Makespan under the what-if"] == fmt_seconds(makespan)
    # all on gpu0: no tensor crosses a link, so no link saves anything, and gpu0 twice as fast halves the step
    [sens] = [f for f in figures(at) if "twice as wide" in str(f["layout"].get("title", ""))]
    assert all(y == 0 for y in sens["data"][0]["y"])
    names = problem.devices.names
    at.number_input(key=f"trace_speed_{names.index('gpu0')}").set_value(2.0).run()
    assert_clean(at)
    assert metrics(at)["Makespan under the what-if"] == fmt_seconds(makespan / 2)
    # the multiplier survives leaving the page and coming back
    goto(at, "network")
    goto(at, "trace")
    assert at.number_input(key=f"trace_speed_{names.index('gpu0')}").value == 2.0
    assert metrics(at)["Makespan under the what-if"] == fmt_seconds(makespan / 2)
