"""GPipe and 1F1B against their closed forms: p equal stages, free communication and updates, m micro-batches.

Step time (m + p - 1)(t_f + t_b), bubble (p - 1)/(m + p - 1), and peak activations on the first
stage of m micro-batches for GPipe and min(p, m) for 1F1B.
"""

import numpy as np
import pytest
from helpers import devices, kernel_and_reference, op, require_kernel

from placement_core.base.errors import InputError
from placement_core.model.graph import Graph
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
        require_kernel(prob)
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
    from placement_core.formats.network import network_to_dict
    graph, placement = stages(3, 1)
    net = tmp_path / "stages.json"
    net.write_text(json.dumps(network_to_dict(graph)))
    place = tmp_path / "p.json"
    place.write_text(json.dumps({"format": "placement/1", "assignment": {
        o.name: f"d{int(d)}" for o, d in zip(graph.ops, placement)}}))
    devs = tmp_path / "d.json"
    from placement_core.model.devices import devices_to_dict
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
    assert code == 2 and "needs a pipeline schedule (--schedule gpipe, 1f1b, interleaved-1f1b, zb-h1)" in \
        capsys.readouterr().err
    # batches in flight belong to the thesis scheme: a pipelined step refuses them rather than ignoring them
    code = main(["simulate", "--network", str(net), "--devices", str(devs), "--placement", str(place),
                 "--schedule", "gpipe", "--micro-batches", "4", "--in-flight", "3"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: --in-flight: only the thesis scheme has batches in flight")


# -- interleaved 1F1B and ZB-H1 --------------------------------------------------------------------------

def chunked(p: int, V: int, m: int, t_f: float = T_F, t_b: float = T_B, w_share: float | None = None,
            keep_for_w: bool = False):
    """p V chunks placed round-robin (chunk c on device c mod p: Megatron's layout), each taking t_f / V and
    t_b / V of a whole stage's times per micro-batch and keeping A / V bytes per micro-batch for its backward.

    ``w_share``: the weight-gradient share of each chunk's backward (zb-h1's W). ``keep_for_w``: the kept
    activation is the input of the op with the W, so it lives until the W (rather than the B) is done."""
    ops = []
    for c in range(p * V):
        prev = [f"y{c - 1}"] if c else []
        split = {} if w_share is None else {"bwd_flops": 1.0, "bwd_weight_flops": w_share}
        if keep_for_w:
            ops.append(op(f"x{c}", prev, fwd=0.0, bwd=0.0, out=A / V * m))
            ops.append(op(f"y{c}", [f"x{c}"], fwd=t_f / V * m, bwd=t_b / V * m, out=0.0, **split))
        else:
            ops.append(op(f"x{c}", prev, fwd=t_f / V * m, bwd=t_b / V * m, out=A / V * m, **split))
            ops.append(op(f"y{c}", [f"x{c}"], fwd=0.0, bwd=0.0, out=0.0))
    graph = Graph("chunks", ops, batch_size=m)
    return graph, np.repeat(np.arange(p * V, dtype=np.int32) % p, 2)


def run_both(schedule, graph, placement, p, m, V=1):
    """The kernel's result and the reference's (traced) for one schedule."""
    spec = ProblemSpec(schedule=schedule, micro_batches=m, virtual_stages=V, comm_efficiency=1.0)
    return kernel_and_reference(spec.build(graph, devices(p)), placement)


INTERLEAVED = [(2, 2, 2), (2, 4, 2), (3, 3, 2), (3, 6, 3), (4, 4, 2), (4, 8, 2), (4, 8, 4), (2, 6, 3),
               (5, 5, 2), (3, 9, 4), (1, 3, 2), (4, 4, 1)]


@pytest.mark.parametrize("t_f, t_b", [(T_F, T_B), (T_B, T_F)])
@pytest.mark.parametrize("p, m, V", INTERLEAVED)
def test_interleaved_step_is_the_closed_form(p, m, V, t_f, t_b):
    """m (t_f + t_b) + (p - 1)(t_f + t_b) / V: the bubble shrinks V-fold (t_f, t_b: a whole stage's times)."""
    graph, placement = chunked(p, V, m, t_f, t_b)
    for r in run_both("interleaved-1f1b", graph, placement, p, m, V):
        bubble = (p - 1) * (t_f + t_b) / V
        assert r.makespan == pytest.approx(m * (t_f + t_b) + bubble, rel=1e-12)
        assert np.allclose(r.busy, m * (t_f + t_b))
        assert np.allclose(r.makespan - r.busy, bubble)


@pytest.mark.parametrize("p, m, V", [(2, 4, 2), (3, 6, 2), (4, 8, 2), (4, 8, 4), (3, 9, 3)])
def test_interleaved_memory_is_megatrons_warm_up(p, m, V):
    """Device r holds 2 (p - r - 1) + (V - 1) p + 1 chunk activations of A / V (its warm-up plus one)."""
    graph, placement = chunked(p, V, m)
    fast, ref = run_both("interleaved-1f1b", graph, placement, p, m, V)
    for r in range(p):
        held = min(2 * (p - r - 1) + (V - 1) * p + 1, m * V)
        assert fast.peak_memory[r] == pytest.approx(held * A / V)
    assert np.array_equal(fast.peak_memory, ref.peak_memory)


def test_interleaved_runs_megatrons_order():
    """p = 2, V = 2, m = 4: the forward and backward order of Megatron-LM's interleaved schedule."""
    graph, placement = chunked(2, 2, 4)
    _, ref = run_both("interleaved-1f1b", graph, placement, 2, 4, 2)

    def seq(dev):
        return [f"{e.phase[0].upper()}{e.batch}.{int(e.op[1:]) // 2}" for e in ref.trace
                if e.kind == "op" and e.resource == dev and e.op.startswith("x")]
    assert seq("d0") == ["F0.0", "F1.0", "F0.1", "F1.1", "F2.0", "B0.1", "F3.0", "B1.1", "F2.1", "B0.0", "F3.1",
                         "B1.0", "B2.1", "B3.1", "B2.0", "B3.0"]
    assert seq("d1") == ["F0.0", "F1.0", "F0.1", "B0.1", "F1.1", "B1.1", "F2.0", "B0.0", "F3.0", "B1.0", "F2.1",
                         "B2.1", "F3.1", "B3.1", "B2.0", "B3.0"]


ZB = [(2, 2), (2, 4), (3, 3), (3, 6), (4, 4), (4, 8), (5, 10), (6, 6), (4, 12), (1, 3)]


@pytest.mark.parametrize("t_f, t_B, t_W", [(1.0, 1.0, 1.0), (1.0, 1.5, 0.5), (2.0, 1.0, 1.0), (1.0, 2.0, 0.75)])
@pytest.mark.parametrize("p, m", ZB)
def test_zb_h1_step_is_the_closed_form(p, m, t_f, t_B, t_W):
    """m (t_f + t_B + t_W) + (p - 1)(t_f + t_B - t_W): the deferred weight gradients fill the tail bubble
    (Qi et al., 2023; it needs t_W <= t_f and t_W <= t_B)."""
    t_b = t_B + t_W
    graph, placement = chunked(p, 1, m, t_f, t_b, w_share=t_W / t_b)
    for r in run_both("zb-h1", graph, placement, p, m):
        assert r.makespan == pytest.approx(m * (t_f + t_b) + (p - 1) * (t_f + t_B - t_W), rel=1e-12)
        assert np.allclose(r.busy, m * (t_f + t_b))


@pytest.mark.parametrize("p, m", [(2, 4), (3, 6), (4, 8), (4, 4), (3, 2)])
def test_zb_h1_holds_at_most_p_micro_batches_for_their_w(p, m):
    """A W needs its op's input: every stage keeps at most p micro-batches' inputs (as many as 1F1B's first
    stage), and at the moment a B ends, also the input gradient it has just made (A bytes here, until the
    stage's previous op consumes it). 1F1B frees the input at the B, in the same event."""
    graph, placement = chunked(p, 1, m, w_share=0.5, keep_for_w=True)
    fast, ref = run_both("zb-h1", graph, placement, p, m)
    ofob, _ = run_both("1f1b", graph, placement, p, m)
    for s in range(p):
        assert fast.peak_memory[s] == pytest.approx((min(p, m) + 1) * A)
        assert ofob.peak_memory[s] == pytest.approx(min(p - s, m) * A)
    assert np.array_equal(fast.peak_memory, ref.peak_memory)


def test_zb_h1_runs_w_tasks_of_their_own():
    """Every op with a weight-gradient share has a W ("wgrad") per micro-batch after its B; the others none."""
    graph, placement = chunked(2, 1, 3, w_share=0.5)
    _, ref = run_both("zb-h1", graph, placement, 2, 3)
    w = [e for e in ref.trace if e.phase == "wgrad"]
    assert sorted((e.op, e.batch) for e in w) == sorted((f"x{c}", u) for c in range(2) for u in range(3))
    for e in w:
        b = next(x for x in ref.trace if x.op == e.op and x.batch == e.batch and x.phase == "bwd")
        assert e.start >= b.end and e.end - e.start == pytest.approx((b.end - b.start))  # t_W = t_B at 1:1


def test_virtual_stages_cut_a_single_run_into_chunks():
    """A contiguous placement with V = 2: each device's run is cut into two chunks of equal work, which the
    schedule then orders as virtual stages (here: no bubble gain, the chunks of a device are adjacent)."""
    graph, placement = stages(2, 4)
    from placement_core.simulate.pipeline_rules import chunks
    chunk_of, local, chunk_dev, per_device = chunks([0, 0, 0, 0, 1, 1, 1, 1], [1.0, 1.0, 1.0, 1.0, 2, 2, 0, 0],
                                                    2, 2)
    assert chunk_of == [0, 0, 1, 1, 2, 3, 3, 3] and local == [0, 0, 1, 1, 0, 1, 1, 1]
    assert chunk_dev == [0, 0, 1, 1] and per_device == [2, 2]
    fast, ref = run_both("interleaved-1f1b", graph, placement, 2, 4, 2)
    assert fast.makespan == ref.makespan and np.allclose(fast.busy, 4 * (T_F + T_B))


def test_virtual_stages_are_checked():
    graph, _ = stages(2, 4)
    with pytest.raises(InputError, match="belong to interleaved-1f1b"):
        ProblemSpec(schedule="1f1b", micro_batches=4, virtual_stages=2).build(graph, devices(2))
    with pytest.raises(InputError, match="from 1 to 64"):
        ProblemSpec(schedule="interleaved-1f1b", micro_batches=4, virtual_stages=0).build(graph, devices(2))


def test_network_files_carry_the_b_w_split():
    """``bwd_weight_flops`` round-trips; absent, an op with parameters splits 1:1 and one without has no W."""
    from placement_core.formats.network import network_from_dict, network_to_dict
    base = {"format": "placement-network/1", "ops": [
        {"name": "a", "bwd_flops": 300, "bwd_weight_flops": 100, "param_bytes": 8},
        {"name": "b", "inputs": ["a"], "bwd_flops": 300, "param_bytes": 8},
        {"name": "c", "inputs": ["b"], "bwd_flops": 300}]}
    g = network_from_dict(base)
    assert [o.weight_grad_share for o in g.ops] == [pytest.approx(1 / 3), 0.5, 0.0]
    again = network_to_dict(g)
    assert again["ops"][0]["bwd_weight_flops"] == 100 and "bwd_weight_flops" not in again["ops"][1]
    assert g.with_batch_size(2).op("a").bwd_weight_flops == 200
    bad = {**base, "ops": [{"name": "a", "bwd_flops": 1, "bwd_weight_flops": 2}]}
    with pytest.raises(InputError, match=r"ops\[0\].bwd_weight_flops: bwd_weight_flops \(2\) exceeds bwd_flops"):
        network_from_dict(bad, source="n.json")


def test_cli_simulates_the_new_schedules(capsys, tmp_path):
    """simulate --json for interleaved-1f1b (stages:PxV places the chunks) and zb-h1: the closed forms."""
    import json

    from placement_core.cli import main
    from placement_core.model.devices import devices_to_dict
    from placement_core.formats.network import network_to_dict
    p, m, V = 2, 4, 2
    graph, _ = chunked(p, V, m)  # 4 equal chunks: stages:2x2 puts chunks 0, 2 on d0 and 1, 3 on d1
    net, devs = tmp_path / "net.json", tmp_path / "d.json"
    net.write_text(json.dumps(network_to_dict(graph)))
    devs.write_text(json.dumps(devices_to_dict(devices(p, bandwidth=1e18))))  # where the cuts fall costs nothing
    common = ["simulate", "--network", str(net), "--devices", str(devs), "--comm-efficiency", "1", "--json",
              "--micro-batches", str(m)]
    assert main(common + ["--placement", "stages:2x2", "--schedule", "interleaved-1f1b"]) == 0
    r = json.loads(capsys.readouterr().out)
    step = (m + (p - 1) / V) * (T_F + T_B)  # T_F, T_B: a whole stage's times per micro-batch
    assert r["schedule"] == "interleaved-1f1b" and r["makespan_s"] == pytest.approx(step)
    assert r["bubble_fraction"] == pytest.approx((p - 1) / V / (m + (p - 1) / V))
    assert r["devices"]["d0"]["idle_s"] == pytest.approx((p - 1) / V * (T_F + T_B))
    # the same chunks under 1f1b (a device holding two runs): a deeper pipeline, a larger bubble
    assert main(common + ["--placement", "stages:2x2", "--schedule", "1f1b"]) == 0
    assert json.loads(capsys.readouterr().out)["makespan_s"] > step
    # a contiguous split with --virtual-stages: chunks cut from each device's run
    assert main(common + ["--placement", "stages:2", "--schedule", "interleaved-1f1b", "--virtual-stages", "2"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["virtual_stages"] == 2 and r["devices"]["d0"]["busy_s"] == pytest.approx(m * (T_F + T_B))
    assert main(common + ["--placement", "stages:2", "--schedule", "zb-h1"]) == 0
    r = json.loads(capsys.readouterr().out)
    # ops without parameters have no weight gradient: no W to defer, so ZB-H1 runs as 1F1B
    assert r["makespan_s"] == pytest.approx((m + p - 1) * (T_F + T_B))
    for bad, msg in ((["--placement", "stages:2", "--schedule", "1f1b", "--virtual-stages", "2"],
                      "--virtual-stages needs --schedule interleaved-1f1b"),
                     (["--placement", "stages:2y", "--schedule", "1f1b"], "expected stages:P or stages:PxV"),
                     (["--placement", "stages:2x5", "--schedule", "interleaved-1f1b"], "cannot cut 8 ops into 2 × 5")):
        assert main(common + bad) == 2
        assert msg in capsys.readouterr().err


def test_problem_spec_keeps_virtual_stages():
    """The JSON form carries virtual_stages; runs stored before it existed load with 1; bad values are named."""
    spec = ProblemSpec(schedule="interleaved-1f1b", micro_batches=4, virtual_stages=2)
    data = spec.to_dict()
    assert data["virtual_stages"] == 2 and ProblemSpec.from_dict(data).resolved() == spec.resolved()
    old = {k: v for k, v in ProblemSpec(schedule="1f1b", micro_batches=4).to_dict().items() if k != "virtual_stages"}
    assert ProblemSpec.from_dict(old).virtual_stages == 1
    # V means nothing to the other schedules: the same simulation either way
    assert ProblemSpec(schedule="gpipe", virtual_stages=3).resolved() == ProblemSpec(schedule="gpipe").resolved()
    for bad in ("2", 0, True):
        with pytest.raises(InputError, match="virtual_stages must be a positive integer") as e:
            ProblemSpec.from_dict({**data, "virtual_stages": bad}, source="run 7")
        assert e.value.field == "virtual_stages"
    graph, placement = chunked(2, 2, 4)
    built = spec.build(graph, devices(2))
    assert built.spec.virtual_stages == 2 and built.settings.virtual_stages == 2
