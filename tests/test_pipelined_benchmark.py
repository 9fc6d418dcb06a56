"""Real pipelined runs (torch.distributed.pipelining on gloo CPU ranks): the stages a placement makes, the checks
before any worker starts, and one run of each schedule through the CLI, stored like any benchmark."""

import json

import numpy as np
import pytest

from placement_core.base.errors import InputError
from placement_core.analysis.pipeline_stages import pipeline_plan

torch = pytest.importorskip("torch")

from placement_core.torch.devspec import nominal_device_graph, parse_devices  # noqa: E402
from placement_core.torch.model_import import trace_model  # noqa: E402
from placement_core.torch.sources import load_model  # noqa: E402

GPT = "placement:gpt2(layers=2, d_model=32, heads=2, vocab=64, seq=16)"
SHAPE = (4, 16)


@pytest.fixture(scope="module")
def traced():
    return trace_model(load_model(GPT), SHAPE)


def assignment_of(traced, spec, n=2):
    from placement_core.analysis.pipeline import placement_option
    dg = nominal_device_graph(parse_devices(f"cpu:{n}"))
    placement = placement_option(spec, traced.graph, dg)
    return {op.name: dg.names[int(i)] for op, i in zip(traced.graph.ops, placement)}


@pytest.mark.parametrize("spec, schedule", [("stages:3", "gpipe"), ("stages:2x2", "interleaved-1f1b")])
def test_stages_compute_the_model_and_its_gradients(traced, spec, schedule):
    """The stages chained (each stage's outputs are the next one's inputs) give the model's output, and the
    same gradients of every weight (the tied embedding's included)."""
    from placement_core.torch.stage_split import plan_stages
    n = 3 if spec == "stages:3" else 2
    plan = pipeline_plan(traced.graph, assignment_of(traced, spec, n), schedule, 2, 4, [f"cpu{i}" for i in range(n)])
    stages = plan_stages(traced, plan, (2, 16))
    assert len(stages) == len(plan.chunks) == (3 if n == 3 else 4)
    model = load_model(GPT)
    x = torch.randint(64, (2, 16))
    want = model(x)
    want.sum().backward()
    values = (x,)
    for stage in stages:
        values = stage(*values)
        values = values if isinstance(values, tuple) else (values,)
    assert len(values) == 1 and torch.allclose(values[0], want, atol=1e-5)
    gm = traced.gm
    gm.zero_grad()
    values[0].sum().backward()
    for (name, p), (_, q) in zip(model.named_parameters(), gm.named_parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-5), name


def test_plans_are_checked_before_any_worker_starts(traced):
    devs = ["cpu0", "cpu1"]
    contiguous, chunked = assignment_of(traced, "stages:2"), assignment_of(traced, "stages:2x2")
    plan = pipeline_plan(traced.graph, chunked, "interleaved-1f1b", 4, 4, devs)
    assert (plan.stages, plan.virtual_stages, plan.order) == (2, 2, ("cpu0", "cpu1"))
    assert [d for d, _ in plan.chunks] == ["cpu0", "cpu1", "cpu0", "cpu1"]
    assert plan.chunks[0][1][0] == "idx"  # the network's input goes with the first stage
    for a, schedule, m, message in (
            (chunked, "1f1b", 4, "needs each device's ops in one run"),
            (contiguous, "interleaved-1f1b", 4, "needs V ≥ 2 chunks per device"),
            (contiguous, "gpipe", 3, "3 micro-batches do not split the batch of 4"),
            ({k: "cpu0" for k in contiguous}, "gpipe", 2, "leaves cpu1 without a stage"),
            (contiguous, "zero-bubble", 2, "unknown pipeline schedule")):
        with pytest.raises(InputError, match=message):
            pipeline_plan(traced.graph, a, schedule, m, 4, devs)


def test_measured_bubble_from_busy_time():
    """Per step the mean over the ranks of their waiting share; the median over the steps."""
    from placement_core.torch.benchmark import BenchmarkResult
    from placement_core.torch.pipeline_bench import measured_bubble
    r = BenchmarkResult("ok", "ranks", [], steps_s=[1.0, 2.0, 4.0], busy_s={"a": [0.5, 1.0, 1.0], "b": [1.0, 1.0, 3.0]})
    out = measured_bubble(r)
    assert out["bubble_fraction"] == pytest.approx(np.median([0.25, 0.5, 0.5]))
    assert out["idle_s"] == {"a": pytest.approx(1.0), "b": pytest.approx(1.0)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each schedule once through the CLI on two CPU ranks (stored in a fresh run store)."""
    from placement_core.cli import main
    home = tmp_path_factory.mktemp("home")
    out = {}
    for schedule, placement in (("gpipe", "stages:2"), ("1f1b", "stages:2"), ("interleaved-1f1b", "stages:2x2"),
                                ("zb-h1", "stages:2")):
        code = main(["benchmark", "--model", GPT, "--input-shape", "4,16", "--devices", "cpu:2", "--placement",
                     placement, "--schedule", schedule, "--micro-batches", "4", "--steps", "2", "--warmup", "1",
                     "--home", str(home), "--json"])
        out[schedule] = code
    return home, out


@pytest.mark.workers
def test_every_schedule_runs_for_real_and_is_stored(runs, capsys):
    from placement_core.store import RunStore
    home, codes = runs
    assert codes == {"gpipe": 0, "1f1b": 0, "interleaved-1f1b": 0, "zb-h1": 0}
    with RunStore(home=str(home)) as store:
        rows = store.benchmarks()
    assert len(rows) == 4
    seen = {}
    for row in rows:
        result = row["result"]
        pipe = result["pipeline"]
        seen[pipe["schedule"]] = result
        assert result["status"] == "ok" and len(result["steps_s"]) == 2
        assert row["label"] == f"{'stages:2x2' if pipe['virtual_stages'] == 2 else 'stages:2'} {pipe['schedule']} m=4"
        assert set(result["busy_s"]) == {"cpu0", "cpu1"}
        for d in ("cpu0", "cpu1"):  # busy inside the stages' work, idle the rest of the step
            for busy, step in zip(result["busy_s"][d], result["steps_s"]):
                assert 0 < busy <= step
        assert 0 <= pipe["bubble_fraction"] < 1
    assert seen["interleaved-1f1b"]["pipeline"]["virtual_stages"] == 2
    assert seen["zb-h1"]["pipeline"]["torch_schedule"] == "ScheduleInterleavedZeroBubble"
    # the same weights and data: every schedule computes the same loss (the mean over the micro-batches)
    losses = [r["losses"][0] for r in seen.values()]
    assert max(losses) - min(losses) < 1e-4


def test_cli_refuses_what_a_pipeline_cannot_run(capsys):
    from placement_core.cli import main
    base = ["benchmark", "--model", GPT, "--input-shape", "4,16", "--devices", "cpu:2", "--no-store"]
    for extra, message in ((["--placement", "stages:2", "--micro-batches", "2"], "--micro-batches goes with --schedule"),
                           (["--placement", "stages:2x2", "--schedule", "1f1b"], "needs each device's ops in one run"),
                           (["--placement", "stages:2", "--schedule", "gpipe", "--runner", "inprocess"],
                            "a pipelined run is one rank per device")):
        assert main(base + extra) == 2
        assert message in capsys.readouterr().err
