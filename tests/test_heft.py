"""HEFT: the paper's worked example, training-step plans checked against the simulator, variants."""

import numpy as np
import pytest
from helpers import devices, op, problem

from placement_core import load_devices, load_network
from placement_core.model.devices import Channel, Device, DeviceGraph
from placement_core.model.graph import Graph, Op
from placement_core.optimize import ALGORITHMS, run
from placement_core.optimize.fixed_candidates import Links
from placement_core.optimize.heft import Timeline, heft_schedule
from placement_core.problem import Problem
from placement_core.simulate import SimSettings

# Topcuoglu, Hariri & Wu (IEEE TPDS 2002), Fig. 2: computation cost of n1..n10 on P1, P2, P3 ...
W = [[14, 16, 9], [13, 19, 18], [11, 13, 19], [13, 8, 17], [12, 13, 10],
     [13, 16, 9], [7, 15, 11], [5, 11, 14], [18, 12, 20], [21, 7, 16]]
# ... and the communication cost on each edge (paid only across processors).
EDGES = {(1, 2): 18, (1, 3): 12, (1, 4): 9, (1, 5): 11, (1, 6): 14, (2, 8): 19, (2, 9): 16, (3, 7): 23,
         (4, 8): 27, (4, 9): 23, (5, 9): 13, (6, 8): 15, (7, 10): 17, (8, 10): 11, (9, 10): 13}


def paper_problem() -> Problem:
    """The example as a forward-only network: measured times per device, bytes = cost at 1 B/s."""
    ops = []
    for i in range(1, 11):
        inputs = {f"n{p}": float(b) for (p, c), b in EDGES.items() if c == i}
        ops.append(Op(f"n{i}", inputs=tuple(inputs), input_bytes=inputs,
                      times={f"p{k + 1}": {"fwd": float(W[i - 1][k])} for k in range(3)}))
    procs = [Device(f"p{k}", "cpu", 1e9, 1e12, 1e9) for k in (1, 2, 3)]
    chans = [Channel(f"{a.name}-{b.name}", 1.0, 0.0, ((a.name, b.name),)) for a in procs for b in procs if a != b]
    return Problem(Graph("heft-paper", ops), DeviceGraph("p1-p3", procs, chans),
                   settings=SimSettings(forward_only=True), comm_efficiency=1.0)


def assert_plan_consistent(p: Problem, plan) -> None:
    """No two tasks overlap on a device; each starts after its inputs finished and arrived."""
    links, tasks = Links(p), plan.tasks
    assert (plan.device >= 0).all() and (plan.end >= plan.start).all()
    assert (plan.device[: p.n_ops] == plan.placement).all()
    assert (plan.device == plan.placement[tasks.op]).all()  # backward and update stay with the op
    for dev in range(p.n_devices):
        on = np.where(plan.device == dev)[0]
        spans = sorted(zip(plan.start[on], plan.end[on]))
        for (_, e1), (s2, _) in zip(spans, spans[1:]):
            assert s2 >= e1 - 1e-12
    for t, preds in enumerate(tasks.preds):
        for q, nbytes in preds:
            comm = 0.0 if nbytes is None else links.time(int(plan.device[q]), int(plan.device[t]), nbytes)
            assert plan.start[t] >= plan.end[q] + comm - 1e-12
    assert plan.makespan == pytest.approx(plan.end.max())
    rows = plan.entries(p)
    assert len(rows) == len(tasks)
    assert [r["start"] for r in rows] == sorted(r["start"] for r in rows)


def test_paper_example_ranks_schedule_and_makespan_80():
    p = paper_problem()
    plan = heft_schedule(p)
    paper_ranks = [108.0, 77.0, 80.0, 80.0, 69.0, 63.3, 42.7, 35.7, 44.3, 14.7]
    assert plan.op_ranks == pytest.approx(paper_ranks, abs=0.05)
    assert plan.op_ranks[9] == pytest.approx(44 / 3)  # exit task: mean of 21, 7, 16
    assert plan.makespan == 80
    # The paper's Fig. 4(a): task -> (processor, start, finish).
    expected = {"n1": ("p3", 0, 9), "n3": ("p3", 9, 28), "n4": ("p2", 18, 26), "n2": ("p1", 27, 40),
                "n5": ("p3", 28, 38), "n6": ("p2", 26, 42), "n9": ("p2", 56, 68), "n7": ("p3", 38, 49),
                "n8": ("p1", 57, 62), "n10": ("p2", 73, 80)}
    got = {r["op"]: (r["device"], r["start"], r["end"]) for r in plan.entries(p)}
    assert got == expected
    assert {r["phase"] for r in plan.entries(p)} == {"fwd"}  # forward only: textbook HEFT
    assert_plan_consistent(p, plan)


def test_paper_example_through_the_driver():
    p = paper_problem()
    result = run(p, "heft", evaluations=50, seed=0)
    assert result.evaluations == 1  # one deterministic candidate
    assert result.extras["planned_makespan_s"] == 80
    assert len(result.extras["plan"]) == 10
    # n1, n3, n5, n7 on p3; n4, n6, n9, n10 on p2; n2, n8 on p1
    assert result.best_placement.tolist() == [2, 0, 2, 1, 2, 1, 2, 0, 1, 1]
    # The simulator runs the same placement with FIFO queues and one message per destination:
    # its verdict is its own (96 here), never better than the plan's 80 for this placement.
    assert result.best_objective == pytest.approx(p.evaluate(result.best_placement))
    assert result.best_objective >= 80


def test_insertion_uses_an_idle_gap():
    assert Timeline().earliest(3.5, 1.0)[0] == 3.5
    busy = Timeline()
    for s, e in [(5.0, 9.0), (0.0, 2.0)]:
        busy.insert(*busy.earliest(s, e - s)[1:], s, e)
    assert busy.intervals() == [(0.0, 2.0), (5.0, 9.0)]
    assert busy.earliest(1.0, 3.0)[0] == 2.0  # fits in [2, 5]
    assert busy.earliest(1.0, 4.0)[0] == 9.0  # does not: after the last task
    assert busy.earliest(6.0, 1.0)[0] == 9.0
    assert busy.earliest(0.0, 0.0)[0] == 0.0  # a zero-cost task needs no gap
    assert busy.earliest(0.5, 0.0)[0] == 2.0


def test_training_step_plan_matches_the_simulator_on_two_branches():
    # s -> {x, y} -> j; x and y are heavy (fwd 10, bwd 20); a tensor or gradient crosses in 0.25 s.
    ops = [op("s", out=1), op("x", ["s"], fwd=10, bwd=20, out=1), op("y", ["s"], fwd=10, bwd=20, out=1),
           op("j", ["x", "y"], out=1)]
    p = problem(ops, devices(2, bandwidth=4.0, shared=False))
    plan = heft_schedule(p)
    assert plan.placement.tolist() == [0, 0, 1, 1]  # the branches run in parallel
    rows = {(r["op"], r["phase"]): (r["device"], r["start"], r["end"]) for r in plan.entries(p)}
    assert rows[("y", "fwd")] == ("d1", 1.25, 11.25)
    assert rows[("j", "fwd")] == ("d1", 11.25, 12.25)
    assert rows[("x", "bwd")] == ("d0", 14.5, 34.5)  # after j's gradient crossed in [14.25, 14.5]
    assert rows[("s", "bwd")] == ("d0", 34.5, 36.5)
    assert plan.makespan == 36.5
    assert p.evaluate(plan.placement) == 36.5  # the simulator agrees with the plan here
    assert_plan_consistent(p, plan)


def test_training_chain_stays_on_one_device_when_transfers_are_slow():
    p = problem([op("a"), op("b", ["a"]), op("c", ["b"])], devices(2, bandwidth=1.0))  # 100 s per transfer
    plan = heft_schedule(p)
    assert plan.placement.tolist() == [0, 0, 0]
    assert plan.makespan == 9 == p.evaluate(plan.placement)  # 3 x fwd 1 + 3 x bwd 2
    assert [(r["op"], r["phase"]) for r in plan.entries(p)] == [
        ("a", "fwd"), ("b", "fwd"), ("c", "fwd"), ("c", "bwd"), ("b", "bwd"), ("a", "bwd")]


def fork_problem() -> Problem:
    # a -> {b, c} -> d, 1 s each, forward only; a tensor takes 10 s to cross.
    ops = [op("a", out=10), op("b", ["a"], out=10), op("c", ["a"], out=10), op("d", ["b", "c"], out=10)]
    return problem(ops, devices(2, bandwidth=1.0, shared=False), forward_only=True)


def test_nocomm_spreads_the_fork_and_loses_under_the_simulator():
    p = fork_problem()
    with_comm = run(p, "heft", evaluations=5)
    without = run(p, "heft-nocomm", evaluations=5)
    assert with_comm.best_placement.tolist() == [0, 0, 0, 0]
    assert with_comm.extras["planned_makespan_s"] == 4 and with_comm.best_objective == 4
    # Ignoring the 10 s transfers, c goes beside b: planned 3 s, simulated 1 + 10 + 1 + 10 + 1 = 23 s.
    assert without.best_placement.tolist() == [0, 0, 1, 0]
    assert without.extras["planned_makespan_s"] == 3
    assert without.best_objective == 23


def memory_problem() -> Problem:
    """Chain a -> b -> c, 100 B of weights each (200 B with gradients), 10 B activations.

    d0 is 3x faster but holds 450 B, so it fits two of the ops, not three.
    """
    times = {"d0": {"fwd": 1.0, "bwd": 2.0, "update": 0.0}, "d1": {"fwd": 3.0, "bwd": 6.0, "update": 0.0}}
    ops = [Op(n, inputs=tuple(i), output_bytes=10.0, param_bytes=100.0, times=times)
           for n, i in (("a", ()), ("b", ("a",)), ("c", ("b",)))]
    devs = [Device("d0", "cpu", 1e9, 450.0, 1e9), Device("d1", "cpu", 1e9, 1e12, 1e9)]
    chans = [Channel("bus", 100.0, 0.0, (("d0", "d1"), ("d1", "d0")))]
    return Problem(Graph("g", ops), DeviceGraph("two", devs, chans), comm_efficiency=1.0)


def test_memory_aware_variant_skips_the_device_that_would_overflow():
    p = memory_problem()
    plain = run(p, "heft", evaluations=5)
    aware = run(p, "heft-memory", evaluations=5)
    assert plain.best_placement.tolist() == [0, 0, 0]
    assert not plain.best.feasible  # 600 B of weights on a 450 B device
    assert aware.best_placement.tolist() == [0, 0, 1]
    assert aware.best.feasible
    assert aware.best.result.peak_memory[0] <= 450


def test_memory_aware_variant_takes_the_least_overflowing_device_when_none_fits():
    p = memory_problem()
    tiny = p.devices.with_memory({"d0": 150.0, "d1": 100.0})  # nothing fits anywhere
    p = Problem(p.graph, tiny, comm_efficiency=1.0)
    plan = heft_schedule(p, memory=True)
    assert plan.placement.tolist() == [0, 1, 0]  # a overflows d0 less; then b d1 (empty); c back on d0


def test_resnet50_training_plan_is_consistent_and_matches_the_simulator_on_one_gpu():
    p = Problem(load_network("resnet50"), load_devices("malvik-4gpu"))
    plan = heft_schedule(p)
    assert_plan_consistent(p, plan)
    phases = {r["phase"] for r in plan.entries(p)}
    assert phases == {"fwd", "bwd", "update"}
    if len(set(plan.placement.tolist())) == 1:  # a one-device plan is exactly what the simulator does
        assert plan.makespan == pytest.approx(p.evaluate(plan.placement), rel=1e-9)
    assert plan.makespan <= p.evaluate(np.full(p.n_ops, 1, dtype=np.int32)) * (1 + 1e-9)


def test_variants_are_registered_and_deterministic():
    for name in ("heft", "heft-nocomm", "heft-memory"):
        assert ALGORITHMS[name].deterministic
    p = fork_problem()
    a = run(p, "heft", evaluations=5, seed=0, initial=np.ones((1, 4), dtype=np.int32))
    b = run(p, "heft", evaluations=5, seed=7)
    assert a.best_placement.tolist() == b.best_placement.tolist()  # seed and initial do not matter
    assert a.extras["plan"] == b.extras["plan"]
