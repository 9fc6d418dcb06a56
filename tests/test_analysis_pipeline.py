"""Pipeline views: even stages, the stage order, the micro-batch sweep against the closed form."""

import numpy as np
import pytest
from helpers import devices, op

from placement_core import load_devices, load_network
from placement_core.analysis.pipeline import even_stages, run_schedule, stages_of, sweep
from placement_core.graph import Graph
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
