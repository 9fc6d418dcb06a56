"""Pipeline views: even stages, the stage order, the micro-batch sweep against the closed form."""

import numpy as np
import pytest
from helpers import devices, op

from placement_core import load_devices, load_network
from placement_core.analysis.pipeline import even_stages, run_schedule, stages_of, sweep
from placement_core.model.graph import Graph
from test_pipeline_schedules import T_B, T_F, stages


def test_even_stages_split_an_equal_chain_evenly():
    graph = Graph("chain", [op(f"o{i}", [f"o{i - 1}"] if i else [], fwd=1, bwd=1) for i in range(8)])
    pl = even_stages(graph, devices(4), 4)
    assert list(pl) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert [(s.device, s.ops, s.first_op, s.last_op) for s in stages_of(pl, graph, devices(4))] == [
        ("d0", 2, "o0", "o1"), ("d1", 2, "o2", "o3"), ("d2", 2, "o4", "o5"), ("d3", 2, "o6", "o7")]


def test_even_stages_use_gpus_and_stay_contiguous():
    graph, devs = load_network("resnet50"), load_devices("malvik-4gpu")
    pl = even_stages(graph, devs, 4)
    assert set(pl.tolist()) == {1, 2, 3, 4}
    assert (np.diff(pl) >= 0).all()  # contiguous in topological order
    with pytest.raises(Exception, match="cannot make 9 stages"):
        even_stages(graph, devs, 9)


def test_sweep_matches_the_closed_form():
    p = 3
    graph, placement = stages(p, 1)
    rows = sweep(graph, devices(p), placement, micro_batches=[1, 2, 4, 8], comm_efficiency=1.0)
    for r in rows:
        m = r["micro_batches"]
        # times in the network are per batch; a micro-batch takes 1/m of them
        assert r["step_time_s"] == pytest.approx((m + p - 1) * (T_F + T_B) / m)
        assert r["bubble_fraction"] == pytest.approx((p - 1) / (m + p - 1))
    gpipe = {r["micro_batches"]: r["first_stage_peak_bytes"] for r in rows if r["schedule"] == "gpipe"}
    ofob = {r["micro_batches"]: r["first_stage_peak_bytes"] for r in rows if r["schedule"] == "1f1b"}
    # A bytes per micro-batch of the whole batch's A*1: GPipe holds all m, 1F1B min(p, m)
    assert gpipe == pytest.approx({m: 1000.0 for m in (1, 2, 4, 8)})
    assert ofob == pytest.approx({1: 1000.0, 2: 1000.0, 4: 750.0, 8: 375.0})


def test_run_schedule_traces_one_row_per_device():
    graph, placement = stages(2, 4)
    run = run_schedule(graph, devices(2), placement, "1f1b", 4, trace=True, comm_efficiency=1.0)
    assert {e.resource for e in run.evaluation.result.trace if e.kind == "op"} == {"d0", "d1"}
    assert run.stage_devices == [0, 1]


# -- the Pipeline page's helpers ------------------------------------------------------------------------

def test_schedule_blocks_of_the_textbook_gpipe_timeline():
    from placement_core.analysis.pipeline import schedule_blocks
    graph, placement = stages(2, 3)
    run = run_schedule(graph, devices(2), placement, "gpipe", 3, trace=True, comm_efficiency=1.0)
    blocks = schedule_blocks(run.evaluation.result.trace, ["d0", "d1"])
    # t_f = 1, t_b = 2 per micro-batch; the free b ops and free transfers are left out
    assert [(b.row, b.unit, b.phase, b.start, b.end, b.events) for b in blocks] == [
        (0, 0, "fwd", 0, 1, 1), (0, 1, "fwd", 1, 2, 1), (0, 2, "fwd", 2, 3, 1),
        (0, 0, "bwd", 6, 8, 1), (0, 1, "bwd", 8, 10, 1), (0, 2, "bwd", 10, 12, 1),
        (1, 0, "fwd", 1, 2, 1), (1, 1, "fwd", 2, 3, 1), (1, 2, "fwd", 3, 4, 1),
        (1, 0, "bwd", 4, 6, 1), (1, 1, "bwd", 6, 8, 1), (1, 2, "bwd", 8, 10, 1)]


def test_schedule_blocks_merge_back_to_back_ops_and_keep_gaps():
    from placement_core.analysis.pipeline import schedule_blocks
    from placement_core.simulate.model import TraceEvent
    ev = [TraceEvent("op", "a", 0, "fwd", "d0", 0.0, 1.0), TraceEvent("op", "b", 0, "fwd", "d0", 1.0, 3.0),
          TraceEvent("op", "c", 0, "fwd", "d0", 4.0, 5.0),  # after an idle second: a new block
          TraceEvent("op", "c", 0, "bwd", "d0", 5.0, 6.0), TraceEvent("op", "a", 0, "update", "d0", 6.0, 6.5),
          TraceEvent("op", "b", 1, "update", "d0", 6.5, 7.0),  # updates merge whatever their unit
          TraceEvent("transfer", "a", 0, "fwd", "bus", 1.0, 1.0),  # takes no time: left out
          TraceEvent("op", "z", 0, "fwd", "d9", 0.0, 1.0)]  # not a row asked for
    blocks = schedule_blocks(ev, ["d0", "bus"])
    assert [(b.phase, b.start, b.end, b.events, b.busy) for b in blocks] == [
        ("fwd", 0.0, 3.0, 2, 3.0), ("fwd", 4.0, 5.0, 1, 1.0), ("bwd", 5.0, 6.0, 1, 1.0), ("update", 6.0, 7.0, 2, 1.0)]


def test_ideal_profile_makes_transfers_and_updates_free():
    from placement_core.analysis.pipeline import ideal_profile, textbook_bubble
    p, m = 3, 4
    # stages that send 1 MB on a 1 MB/s link and hold weights: slow, unless ideal
    ops = [op(f"a{s}", [f"a{s - 1}"] if s else [], fwd=T_F, bwd=T_B, out=1e6, params=1e6) for s in range(p)]
    graph = Graph("g", ops, batch_size=8)
    placement = np.arange(p, dtype=np.int32)
    real = run_schedule(graph, devices(p, bandwidth=1e6), placement, "gpipe", m)
    ideal = run_schedule(graph, devices(p, bandwidth=1e6), placement, "gpipe", m, profile=ideal_profile())
    assert real.step_time > (m + p - 1) * (T_F + T_B) / m
    assert ideal.step_time == pytest.approx((m + p - 1) * (T_F + T_B) / m)
    assert ideal.bubble_fraction == pytest.approx(textbook_bubble(p, m)) == pytest.approx(2 / 6)
    assert ideal_profile("exprimo-2020").name == "exprimo-2020 (ideal pipeline)"


def test_micro_batch_checks_contiguity_and_the_best_m():
    from placement_core.analysis.pipeline import best_micro_batches, check_micro_batches, divisors, is_contiguous
    from placement_core.base.errors import InputError
    assert divisors(12) == [1, 2, 3, 4, 6, 12] and divisors(128, 64) == [1, 2, 4, 8, 16, 32, 64]
    assert check_micro_batches(12, 4) == 4
    with pytest.raises(InputError, match=r"5 micro-batches do not split the batch of 12 evenly\. Use a divisor of "
                                         r"the batch size: 1, 2, 3, 4, 6, 12"):
        check_micro_batches(12, 5)
    assert is_contiguous([0, 0, 2, 2, 1]) and not is_contiguous([0, 1, 0]) and is_contiguous([])
    rows = [{"schedule": "gpipe", "micro_batches": 2, "step_time_s": 3.0, "feasible": True},
            {"schedule": "gpipe", "micro_batches": 4, "step_time_s": 2.0, "feasible": False},
            {"schedule": "1f1b", "micro_batches": 4, "step_time_s": 2.5, "feasible": False}]
    best = best_micro_batches(rows)
    assert best["gpipe"]["micro_batches"] == 2 and best["1f1b"] is None
