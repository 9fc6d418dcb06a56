"""The objective's three memory-penalty modes (docs/design.md §3, problem.py), on a network worked out by hand."""

import numpy as np
import pytest
from helpers import examples, op
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement_core.model.devices import Channel, Device, DeviceGraph
from placement_core.base.errors import InputError
from placement_core.model.graph import Graph, Op
from placement_core.problem import Problem

MB = 1e6


def two_devices(mem0: float, mem1: float) -> DeviceGraph:
    devs = [Device("d0", "cpu", 1e9, mem0, 1e9), Device("d1", "cpu", 1e9, mem1, 1e9)]
    return DeviceGraph("two", devs, [Channel("bus", 1e8, 0.0, (("d0", "d1"), ("d1", "d0")))])


def chain(penalty: str, mem0: float = 700 * MB, mem1: float = 300 * MB) -> Problem:
    # a (300 MB of weights) -> b (100 MB of weights) -> c; fwd 1 s, bwd 2 s; outputs 200, 100, 50 MB.
    # Default profile: weights and their gradients resident (2 copies); update = 3 * params / 1 GB/s,
    # i.e. 0.9 s for a and 0.3 s for b. The bus moves 100 MB/s.
    ops = [op("a", out=200 * MB, params=300 * MB), op("b", ["a"], out=100 * MB, params=100 * MB),
           op("c", ["b"], out=50 * MB)]
    return Problem(Graph("chain", ops), two_devices(mem0, mem1), penalty=penalty, comm_efficiency=1.0,
                   comp_efficiency=1.0)


# Everything on d0: a, b, c forward [0, 3], c bwd [3, 5], b bwd [5, 7], a bwd [7, 9], b's update
# [9, 9.3], a's update [9.3, 10.2]. Memory on d0: 800 MB of weights; + a's output (200) at 1, + b's
# output (100) at 2 = 1100 MB, held until b's backward (c's output is never stored: no consumer);
# c's backward turns b's output into the same 100 MB of gradient. Peak 1100 MB, 400 MB over 700 MB.
SINGLE = ([0, 0, 0], 10.2, [1100 * MB, 0.0])
# a on d0, b and c on d1: a [0, 1]; a's output to d1 [1, 3]; b [3, 4]; c [4, 5]; c bwd [5, 7];
# b bwd [7, 9]; b's update on d1 [9, 9.3]; a's gradient (200 MB) to d0 [9, 11]; a bwd [11, 13];
# a's update [13, 13.9].
# d0: 600 MB of weights + a's output (200) from 1 until sent at 3, + the gradient from 11 to 13: 800 MB.
# d1: 200 MB of weights + the received copy of a (200) from 3 + b's output (100) from 4 = 500 MB,
# held until c's backward at 7 (which swaps b's output for its gradient). Overflows: 100 and 200 MB.
SPLIT = ([0, 1, 1], 13.9, [800 * MB, 500 * MB])


@pytest.mark.parametrize("case", [SINGLE, SPLIT], ids=["single", "split"])
def test_hand_worked_time_and_peak_memory(case):
    placement, t, peak = case
    ev = chain("thesis").simulate(placement)
    assert ev.result.batch_time == pytest.approx(t)
    assert ev.result.peak_memory == pytest.approx(peak)
    assert ev.overflow == pytest.approx(np.maximum(np.array(peak) - [700 * MB, 300 * MB], 0))
    assert not ev.feasible


@pytest.mark.parametrize("penalty, single, split", [
    # thesis §3.2.2: + 1 ms per MB of overflow, summed over devices: 400 MB; 100 + 200 MB.
    ("thesis", 10.2 + 0.4, 13.9 + 0.3),
    # Placeto: r + 2 s per GB of overflow (the largest one): 0.4 GB; max(0.1, 0.2) GB.
    ("placeto", 10.2 + 2 * 0.4, 13.9 + 2 * 0.2),
    # infeasible: 1e6 s ahead of any fitting placement, then time plus overflow in GB (1 s per GB).
    ("infeasible", 1e6 + 10.2 + 0.4, 1e6 + 13.9 + 0.3),
])
def test_penalty_modes(penalty, single, split):
    p = chain(penalty)
    assert p.evaluate(SINGLE[0]) == pytest.approx(single, rel=1e-12)
    assert p.evaluate(SPLIT[0]) == pytest.approx(split, rel=1e-12)
    assert p.simulate(SPLIT[0]).objective == pytest.approx(split, rel=1e-12)
    assert p.evaluate_many(np.array([SINGLE[0], SPLIT[0]])) == pytest.approx([single, split], rel=1e-12)


@pytest.mark.parametrize("penalty", ["thesis", "placeto", "infeasible"])
def test_no_penalty_when_everything_fits(penalty):
    p = chain(penalty, mem0=1100 * MB, mem1=500 * MB)  # exactly the peaks: fits
    assert p.evaluate(SINGLE[0]) == pytest.approx(10.2, rel=1e-12)
    assert p.evaluate(SPLIT[0]) == pytest.approx(13.9, rel=1e-12)
    assert p.simulate(SPLIT[0]).feasible


def test_unknown_penalty_is_an_input_error():
    with pytest.raises(InputError, match="unknown memory penalty"):
        chain("quadratic")


@st.composite
def instances(draw):
    n = draw(st.integers(1, 5))
    nd = draw(st.integers(1, 3))
    ops = []
    for i in range(n):
        parents = draw(st.lists(st.integers(0, i - 1), max_size=2, unique=True)) if i else []
        ops.append(Op(name=f"op{i}", inputs=tuple(f"op{q}" for q in parents),
                      output_bytes=draw(st.integers(0, 1000)), param_bytes=draw(st.sampled_from([0, 200, 700])),
                      times={f"dev{j}": {"fwd": draw(st.floats(0.0, 5.0)), "bwd": draw(st.floats(0.0, 5.0))}
                             for j in range(nd)}))
    devs = [Device(f"dev{j}", "cpu", 1e9, draw(st.sampled_from([300.0, 1000.0, 2000.0, 5000.0])), 1e9)
            for j in range(nd)]
    pairs = tuple((f"dev{a}", f"dev{b}") for a in range(nd) for b in range(nd) if a != b)
    chans = [Channel("bus", draw(st.floats(10.0, 1000.0)), 0.0, pairs)] if pairs else []
    return Graph("random", ops), DeviceGraph("random", devs, chans)


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(instances())
def test_infeasible_mode_puts_every_fitting_placement_first(inst):
    graph, devs = inst
    p = Problem(graph, devs, penalty="infeasible")
    n, nd = len(graph), len(devs)
    allp = np.array(np.meshgrid(*[np.arange(nd)] * n, indexing="ij")).reshape(n, -1).T.astype(np.int32)
    fits, overflows = [], []
    for x in allp:
        ev = p.simulate(x)
        # Feasibility from the simulated peaks against the capacities, independently of the objective.
        fit = bool((ev.result.peak_memory <= [d.memory_bytes for d in devs.devices]).all())
        (fits if fit else overflows).append(ev.objective)
        if fit:
            assert ev.objective == ev.result.batch_time
        else:
            assert ev.objective > ev.result.batch_time
    if fits and overflows:
        assert max(fits) < min(overflows)
