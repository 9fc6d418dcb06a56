"""HEFT's indexed timelines: exactly the former quadratic plans, in near-linear time, with progress."""

import sys
import time

import numpy as np
import pytest
from heft_reference import earliest_slot, reference_schedule
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement_core import Problem, load_devices
from placement_core.model.devices import Channel, Device, DeviceGraph
from placement_core.model.graph import Graph, Op
from placement_core.optimize import heft as heft_module
from placement_core.optimize import run
from placement_core.optimize.base import Progress
from placement_core.optimize.heft import Timeline, heft_schedule
from placement_core.simulate import SimSettings
from helpers import examples

TIMES = st.sampled_from([0.0, 0.0, 0.25, 0.5, 1.0, 1.0, 2.0, 3.5, 7.0])  # zeros and repeats: ties and empty tasks


@st.composite
def problems(draw):
    """Random DAGs (skips, fan-in, fan-out) with per-device times, weights (update tasks) and links."""
    d = draw(st.integers(1, 4))
    names = [f"d{k}" for k in range(d)]
    n = draw(st.integers(1, 40))
    ops = []
    for i in range(n):
        parents = sorted(draw(st.sets(st.integers(0, i - 1), max_size=3))) if i else []
        times = {dev: {"fwd": draw(TIMES), "bwd": draw(TIMES)} for dev in names}
        ops.append(Op(f"o{i}", inputs=tuple(f"o{p}" for p in parents), times=times,
                      output_bytes=draw(st.sampled_from([0.0, 10.0, 100.0, 250.0])),
                      param_bytes=draw(st.sampled_from([0.0, 0.0, 4e8]))))
    devs = [Device(name, "cpu", 1e9, 1e12, 1e9) for name in names]
    shared = draw(st.booleans())
    pairs = [(a, b) for a in names for b in names if a != b]
    chans = ([Channel("bus", 100.0, draw(st.sampled_from([0.0, 0.5])), tuple(pairs))] if shared and pairs else
             [Channel(f"{a}-{b}", draw(st.sampled_from([50.0, 100.0, 400.0])), 0.0, ((a, b),)) for a, b in pairs])
    settings_ = SimSettings(forward_only=draw(st.booleans()))
    return Problem(Graph("g", ops), DeviceGraph("t", devs, chans), settings=settings_, comm_efficiency=1.0,
                   comp_efficiency=1.0)


@pytest.mark.parametrize("block", [2, 64])  # 2: every plan spans many blocks, so block skipping is exercised
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(p=problems(), comm=st.booleans(), memory=st.booleans())
def test_plans_equal_the_former_implementation(monkeypatch, block, p, comm, memory):
    monkeypatch.setattr(Timeline, "BLOCK", block)
    plan = heft_schedule(p, comm=comm, memory=memory)
    placement, device, start, end = reference_schedule(p, comm=comm, memory=memory)
    assert np.array_equal(plan.placement, placement)
    assert np.array_equal(plan.device, device)
    assert np.array_equal(plan.start, start)  # bit for bit, not approximately
    assert np.array_equal(plan.end, end)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.0, 10.0]), st.sampled_from([0.0, 0.5, 1.0, 4.0])),
                max_size=60))
def test_timeline_answers_like_a_walk_over_the_busy_list(queries):
    """Each (ready, length) query is answered and then booked, on a timeline split into 2-interval blocks."""
    timeline, busy = Timeline(), []
    timeline.BLOCK = 2
    for ready, length in queries:
        s, block, at = timeline.earliest(ready, length)
        assert s == earliest_slot(busy, ready, length)
        timeline.insert(block, at, s, s + length)
        busy = sorted(busy + [(s, s + length)])
        assert timeline.intervals() == busy


def test_timeline_skips_blocks_without_a_gap_long_enough():
    """Busy [0, 1), [2, 3), ... [198, 199): gaps of 1; a task of 1.5 goes after the last one, of 1 into the first gap."""
    timeline = Timeline()
    timeline.BLOCK = 4
    for k in range(100):
        timeline.insert(*timeline.earliest(2.0 * k, 1.0)[1:], 2.0 * k, 2.0 * k + 1)
    assert len(timeline.starts) > 10
    assert timeline.earliest(0.0, 1.5)[0] == 199.0
    assert timeline.earliest(0.0, 1.0)[0] == 1.0
    assert timeline.earliest(150.5, 1.0)[0] == 151.0
    assert timeline.earliest(500.0, 3.0)[0] == 500.0


def deep_network(n: int) -> Graph:
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent / "benchmarks"))
    from heft import deep_network as make
    return make(n)


@pytest.mark.slow
def test_ten_thousand_ops_plan_in_seconds():
    """The former walk took 38.8 s for 10,000 ops (25,000 tasks), 0.7 s of CPU now; the bound leaves room for load."""
    problem = Problem(deep_network(10000), load_devices("malvik-4gpu"))
    cpu = time.process_time()
    plan = heft_schedule(problem)
    assert time.process_time() - cpu < 8.0
    assert len(plan.tasks) == 25000 and (plan.placement >= 0).all()


def test_long_planning_reports_progress_through_the_run_callback(monkeypatch):
    """250 ops without weights: 500 tasks (forward + backward), a report every 100 planned and at the end."""
    monkeypatch.setattr(heft_module, "PROGRESS_EVERY", 100)
    ops = [Op(f"o{i}", inputs=(f"o{i - 1}",) if i else (), times={"cpu": {"fwd": 1.0, "bwd": 2.0}})
           for i in range(250)]
    devs = DeviceGraph("t", [Device("d0", "cpu", 1e9, 1e12, 1e9)], [])
    seen: list[Progress] = []
    result = run(Problem(Graph("g", ops), devs), "heft", evaluations=1, progress=seen.append)
    planning = [p.snapshot for p in seen if p.snapshot and p.snapshot.get("stage") == "planning"]
    assert [s["planned_tasks"] for s in planning] == [0, 100, 200, 300, 400, 500]
    assert {s["tasks"] for s in planning} == {500}
    assert result.extras["planned_makespan_s"] == 750.0  # one device: 250 * (1 + 2)


def test_cli_progress_bar_shows_planning(capsys):
    from placement_core.cli.optimize_cmds import ProgressBar

    ProgressBar(enabled=True)(Progress("heft", 0, 1, float("inf"), float("inf"), 2.0,
                                       {"stage": "planning", "planned_tasks": 24000, "tasks": 125037}))
    assert capsys.readouterr().err == "\rheft: planning 24,000/125,037 tasks "
