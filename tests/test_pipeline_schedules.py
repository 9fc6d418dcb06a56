"""GPipe and 1F1B against their closed forms: p equal stages, free communication and updates, m micro-batches.

Step time (m + p - 1)(t_f + t_b), bubble (p - 1)/(m + p - 1), and peak activations on the first
stage of m micro-batches for GPipe and min(p, m) for 1F1B.
"""

import numpy as np
import pytest
from helpers import devices, op

from placement_core.errors import InputError
from placement_core.graph import Graph
from placement_core.problem import ProblemSpec
from placement_core.simulate.schedules import micro_batch_graph, schedule_settings

T_F, T_B = 1.0, 2.0
A = 1000.0  # bytes of the activation each stage keeps for its backward, per micro-batch


BATCH = 24


def stages(p: int, m: int = 1, batch: int = BATCH):
    """Stage s = a_s (the work, keeps an activation of A bytes per micro-batch) -> b_s (free, sends nothing).

    Times and sizes are given for the whole batch and scale down to t_f, t_b and A per micro-batch."""
    ops = []
    for s in range(p):
        ops.append(op(f"a{s}", [f"b{s - 1}"] if s else [], fwd=T_F * m, bwd=T_B * m, out=A * m))
        ops.append(op(f"b{s}", [f"a{s}"], fwd=0.0, bwd=0.0, out=0.0))
    graph = Graph("stages", ops, batch_size=batch)
    placement = np.repeat(np.arange(p, dtype=np.int32), 2)
    return graph, placement


def simulate(schedule, p, m, trace=False):
    graph, placement = stages(p, m)
    prob = ProblemSpec(schedule=schedule, micro_batches=m, comm_efficiency=1.0).build(graph, devices(p))
    return prob, prob.simulate(placement, trace=trace).result


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p, m", [(1, 1), (2, 1), (2, 3), (3, 4), (4, 4), (4, 6), (3, 12), (5, 2)])
def test_step_time_and_bubble_match_the_closed_form(schedule, p, m):
    _, r = simulate(schedule, p, m)
    assert r.makespan == pytest.approx((m + p - 1) * (T_F + T_B))
    assert r.batch_time == r.makespan  # one batch of m micro-batches
    assert np.allclose(r.busy, m * (T_F + T_B))
    assert np.allclose(r.idle_fraction(), (p - 1) / (m + p - 1))


@pytest.mark.parametrize("p, m", [(2, 3), (3, 4), (4, 4), (4, 8), (3, 2)])
def test_first_stage_activation_memory(p, m):
    _, gpipe = simulate("gpipe", p, m)
    _, ofob = simulate("1f1b", p, m)
    per_micro_batch = A
    assert gpipe.peak_memory[0] == pytest.approx(m * per_micro_batch)
    assert ofob.peak_memory[0] == pytest.approx(min(p, m) * per_micro_batch)
    # and stage s of 1F1B holds p - s
    for s in range(p):
        assert ofob.peak_memory[s] == pytest.approx(min(p - s, m) * per_micro_batch)


def order(result, device):
    return [f"{e.phase[0].upper()}{e.batch}" for e in result.trace
            if e.kind == "op" and e.resource == device and e.op.startswith("a")]


def test_textbook_timelines():
    _, r = simulate("1f1b", 2, 3, trace=True)
    assert order(r, "d0") == ["F0", "F1", "B0", "F2", "B1", "B2"]
    assert order(r, "d1") == ["F0", "B0", "F1", "B1", "F2", "B2"]
    _, r = simulate("gpipe", 2, 3, trace=True)
    assert order(r, "d0") == ["F0", "F1", "F2", "B0", "B1", "B2"]
    assert order(r, "d1") == ["F0", "F1", "F2", "B0", "B1", "B2"]


def test_kernel_and_reference_agree_on_schedules():
    for schedule in ("gpipe", "1f1b"):
        prob, fast = simulate(schedule, 4, 6)
        graph, placement = stages(4, 6)
        ref = prob.simulate(placement, trace=True).result
        assert fast.makespan == ref.makespan and np.array_equal(fast.peak_memory, ref.peak_memory)


def test_weights_update_once_per_batch():
    graph = Graph("g", [op("a", fwd=1, bwd=1, params=1e9), op("b", ["a"], fwd=1, bwd=1)], batch_size=4)
    prob = ProblemSpec(schedule="gpipe", micro_batches=4, comm_efficiency=1.0).build(graph, devices(2))
    r = prob.simulate(np.array([0, 1], dtype=np.int32), trace=True).result
    updates = [e for e in r.trace if e.phase == "update"]
    assert len(updates) == 1 and updates[0].end == r.makespan


def test_micro_batches_must_divide_the_batch():
    graph, _ = stages(2, 1, batch=10)
    with pytest.raises(InputError, match="does not split into 3 equal micro-batches"):
        micro_batch_graph(graph, 3)
    with pytest.raises(InputError, match="simulate one batch"):
        schedule_settings("gpipe", 4, micro_batches=2, batches=3)
    with pytest.raises(InputError, match="unknown schedule"):
        schedule_settings("zero-bubble", 4, micro_batches=2)
    with pytest.raises(InputError, match="micro-batches need"):
        schedule_settings("thesis", 4, micro_batches=2)


def test_cli_reports_bubble_and_idle_time(capsys, tmp_path):
    import json

    from placement_core.cli import main
    from placement_core.netformat import network_to_dict
    graph, placement = stages(3, 1)
    net = tmp_path / "stages.json"
    net.write_text(json.dumps(network_to_dict(graph)))
    place = tmp_path / "p.json"
    place.write_text(json.dumps({"format": "placement/1", "assignment": {
        o.name: f"d{int(d)}" for o, d in zip(graph.ops, placement)}}))
    devs = tmp_path / "d.json"
    from placement_core.devices import devices_to_dict
    devs.write_text(json.dumps(devices_to_dict(devices(3))))
    for schedule, m in (("gpipe", 4), ("1f1b", 6)):
        code = main(["simulate", "--network", str(net), "--devices", str(devs), "--placement", str(place),
                     "--schedule", schedule, "--micro-batches", str(m), "--comm-efficiency", "1", "--json"])
        r = json.loads(capsys.readouterr().out)
        assert code == 0 and r["schedule"] == schedule and r["micro_batches"] == m
        assert (r["batch_size"], r["micro_batch_size"]) == (graph.batch_size, graph.batch_size // m)
        # the stage times here are for the whole batch, so a micro-batch takes 1/m of them
        assert r["makespan_s"] == pytest.approx((m + 2) * (T_F + T_B) / m)
        assert r["bubble_fraction"] == pytest.approx(2 / (m + 2))
        assert r["devices"]["d0"]["idle_s"] == pytest.approx(2 * (T_F + T_B) / m)
    code = main(["simulate", "--network", str(net), "--devices", str(devs), "--placement", str(place),
                 "--micro-batches", "4"])
    assert code == 2 and "needs --schedule gpipe or 1f1b" in capsys.readouterr().err
    # batches in flight belong to the thesis scheme: a pipelined step refuses them rather than ignoring them
    code = main(["simulate", "--network", str(net), "--devices", str(devs), "--placement", str(place),
                 "--schedule", "gpipe", "--micro-batches", "4", "--in-flight", "3"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: --in-flight: only the thesis scheme has batches in flight")
