"""Benchmarking for real: two gloo ranks, the in-process runner, and the failures they report."""

import time
from pathlib import Path

import pytest

from placement_core.base.errors import InputError

torch = pytest.importorskip("torch")

from placement_core.torch.benchmark import BenchmarkSettings, benchmark  # noqa: E402
from placement_core.torch.devspec import parse_devices  # noqa: E402
from placement_core.torch.model_import import trace_model  # noqa: E402
from placement_core.torch.sources import load_model  # noqa: E402

MODELS = str(Path(__file__).resolve().parent / "torch_models.py")
BRANCHY = f"{MODELS}:Branchy"
SHAPE = (2, 3, 8, 8)
BATCH = 4
FAST = BenchmarkSettings(steps=3, warmup=1, timeout=120)


@pytest.fixture(scope="module")
def ops():
    return [o.name for o in trace_model(load_model(BRANCHY), SHAPE).graph.ops]


@pytest.fixture(scope="module")
def two_ranks(ops):
    """One set of gloo workers for four placements: single device, a split after the stem, both branches
    sent across (their shared input's backward must run once, after both), alternating."""
    assert ops == ["x", "stem", "bn", "relu", "left", "right", "add", "pool", "flatten", "fc"]
    single = {op: "cpu0" for op in ops}
    split = {op: ("cpu0" if i < 4 else "cpu1") for i, op in enumerate(ops)}
    branches = {op: ("cpu0" if i < 6 else "cpu1") for i, op in enumerate(ops)}
    alternating = {op: ("cpu0", "cpu1")[i % 2] for i, op in enumerate(ops)}
    results = benchmark(BRANCHY, SHAPE, [single, split, branches, alternating], "cpu:2", runner="ranks",
                        batch_size=BATCH, settings=BenchmarkSettings(steps=3, warmup=1, rounds=2, timeout=120))
    return single, split, alternating, results


@pytest.mark.workers
def test_two_gloo_ranks_report_sane_numbers(two_ranks):
    *_, results = two_ranks
    for r in results:
        assert r.status == "ok", r.message
        assert len(r.steps_s) == 6 and len(r.warmup_s) == 2  # 3 steps x 2 rounds, warm-up dropped
        assert all(0 < s < 30 for s in r.steps_s)
        assert min(r.steps_s) <= r.median_step_s <= max(r.steps_s)
        q1, q3 = r.quartiles_s
        assert q1 <= r.median_step_s <= q3
        d = r.to_dict()
        assert set(d) >= {"median_step_s", "steps_s", "peak_memory_bytes", "iqr_s", "min_step_s", "max_step_s"}
        assert set(d["peak_memory_bytes"]) == {"cpu0", "cpu1"}


@pytest.mark.workers
def test_every_placement_trains_the_same_model(two_ranks):
    """Same seed, same data: the loss after each SGD step only matches if forward and gradients match."""
    *_, results = two_ranks
    in_process = benchmark(BRANCHY, SHAPE, [{op: "cpu0" for op in two_ranks[0]}], "cpu", runner="inprocess",
                           batch_size=BATCH, settings=BenchmarkSettings(steps=6, warmup=1))[0]
    assert in_process.status == "ok", in_process.message
    reference = in_process.losses[:3]
    assert len(set(round(v, 6) for v in reference)) == 3  # the loss moves: weights are being trained
    for r in results:
        assert r.losses[:3] == pytest.approx(reference, rel=1e-5)


def test_traffic_and_memory_follow_the_placement(two_ranks):
    single, split, alternating, results = two_ranks
    one, cut, branches, alt = results
    assert one.bytes_per_step == 0 and one.messages_per_step == 0
    # split after relu: its output (4 x 8 x 8 x 8 floats) goes forward once, its gradient comes back once
    relu_bytes = BATCH * 8 * 8 * 8 * 4
    assert cut.messages_per_step == 2 and cut.bytes_per_step == 2 * relu_bytes
    # both branch outputs (same size) forward, both gradients back
    assert branches.messages_per_step == 4 and branches.bytes_per_step == 4 * relu_bytes
    assert alt.messages_per_step > cut.messages_per_step
    weights = 4 * sum(p.numel() for p in load_model(BRANCHY).parameters())
    peak = one.to_dict()["peak_memory_bytes"]
    assert peak["cpu1"] == 0 and peak["cpu0"] > weights  # weights, gradients and activations on cpu0
    assert 0 < cut.to_dict()["peak_memory_bytes"]["cpu1"] < peak["cpu0"]


@pytest.mark.workers
def test_memory_limit_is_reported_not_raised(ops):
    r = benchmark(BRANCHY, SHAPE, [{op: "cpu0" for op in ops}], "cpu", runner="inprocess", batch_size=BATCH,
                  settings=BenchmarkSettings(steps=2, warmup=1, memory_limit=1000))[0]
    peak = r.devices[0]["peak_memory_bytes"]
    assert r.status == "memory_limit" and peak > 1000 and r.devices[0]["memory_limit_bytes"] == 1000
    assert 10_000 <= peak < 1_000_000
    assert r.message == f"peak memory above the limit of 1 kB on cpu0 (peak {peak / 1e3:.3g} kB)"
    assert r.steps_s == []


@pytest.mark.workers
def test_ranks_memory_limit_names_the_rank_that_went_over(ops):
    """Each rank knows only its own peak; the message names the device over the limit, whichever rank."""
    only_input = {op: ("cpu0" if op == "x" else "cpu1") for op in ops}
    single = {op: "cpu0" for op in ops}
    over_on_1, over_on_0 = benchmark(BRANCHY, SHAPE, [only_input, single], "cpu:2", batch_size=BATCH,
                                     settings=BenchmarkSettings(steps=2, warmup=1, memory_limit=25e3, timeout=120))
    peaks = over_on_1.to_dict()["peak_memory_bytes"]
    # cpu0 holds nothing but the input batch: 4 x 3 x 8 x 8 floats
    assert peaks["cpu0"] == BATCH * 3 * 8 * 8 * 4 == 3072
    # cpu1 holds every weight, activation and gradient, as cpu0 does when it runs everything alone
    whole = over_on_0.to_dict()["peak_memory_bytes"]
    assert peaks["cpu1"] == whole["cpu0"] > 25e3 and whole["cpu1"] == 0
    assert 10_000 <= peaks["cpu1"] < 1_000_000
    for r, dev in ((over_on_1, "cpu1"), (over_on_0, "cpu0")):
        assert r.status == "memory_limit" and r.steps_s == []
        assert r.message == f"peak memory above the limit of 25 kB on {dev} (peak {whole['cpu0'] / 1e3:.3g} kB)"
        assert all(d["memory_limit_bytes"] == 25e3 for d in r.devices)


@pytest.mark.workers
def test_exported_model_runs_at_another_batch_than_traced():
    """torch.export specialises to the example's batch; workers trace again at the batch they run."""
    source = f"{MODELS}:ShapeBranch"
    names = [o.name for o in trace_model(load_model(source), SHAPE).graph.ops]
    split = {op: ("cpu0" if i < 3 else "cpu1") for i, op in enumerate(names)}
    r = benchmark(source, SHAPE, [split], "cpu:2", batch_size=BATCH, settings=FAST)[0]
    assert r.status == "ok", r.message
    assert r.messages_per_step == 2 and r.bytes_per_step == 2 * BATCH * 8 * 6 * 6 * 4  # bn's output and gradient


@pytest.mark.workers
def test_out_of_memory_on_a_rank_is_reported_and_the_rest_still_runs():
    source = f"{MODELS}:Hog"
    names = [o.name for o in trace_model(load_model(source), (2, 4)).graph.ops]
    split = {op: ("cpu0" if i < 2 else "cpu1") for i, op in enumerate(names)}
    results = benchmark(source, (2, 4), [split, {op: "cpu1" for op in names}], "cpu:2", batch_size=4,
                        settings=FAST)
    assert [r.status for r in results] == ["oom", "oom"]  # the workers were restarted for the second one
    assert "allocate" in results[0].message


@pytest.mark.workers
def test_runaway_step_is_stopped_by_the_timeout():
    source = f"{MODELS}:Sleepy"
    names = [o.name for o in trace_model(load_model(source), (2, 4)).graph.ops]
    r = benchmark(source, (2, 4), [{op: "cpu0" for op in names}], "cpu", runner="inprocess", batch_size=4,
                  settings=BenchmarkSettings(steps=2, warmup=1, timeout=3))[0]
    assert r.status == "timeout" and "3 s" in r.message


@pytest.mark.workers
def test_runaway_step_on_a_rank_is_stopped_by_the_timeout():
    """Both placements sleep on the real batch: each is killed, the workers restarted for the second."""
    source = f"{MODELS}:Sleepy"
    names = [o.name for o in trace_model(load_model(source), (2, 4)).graph.ops]
    split = {op: ("cpu0" if i == 0 else "cpu1") for i, op in enumerate(names)}
    start = time.monotonic()
    results = benchmark(source, (2, 4), [split, {op: "cpu1" for op in names}], "cpu:2", batch_size=4,
                        settings=BenchmarkSettings(steps=2, warmup=1, timeout=3))
    assert [(r.status, r.message) for r in results] == [("timeout", "killed after 3 s")] * 2
    assert all(r.steps_s == [] for r in results)
    assert time.monotonic() - start < 55  # a step sleeps 60 s: neither ran to its end


def test_bad_requests_fail_before_any_worker_starts(ops):
    with pytest.raises(InputError, match="not among cpu0, cpu1"):
        benchmark(BRANCHY, SHAPE, [{op: "gpu0" for op in ops}], "cpu:2")
    with pytest.raises(InputError, match="unknown runner"):
        benchmark(BRANCHY, SHAPE, [{op: "cpu0" for op in ops}], "cpu", runner="threads")
    with pytest.raises(InputError, match="warmup must be at least 1"):
        benchmark(BRANCHY, SHAPE, [{op: "cpu0" for op in ops}], "cpu", settings=BenchmarkSettings(warmup=0))
    assert [d.name for d in parse_devices("cpu:2,cuda:1")] == ["cpu0", "cpu1", "gpu0"]
    with pytest.raises(InputError, match="cuda:0 is listed twice"):
        parse_devices("cuda:0,cuda:0")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without a GPU")
def test_cuda_without_a_gpu_is_a_clear_error(ops):
    with pytest.raises(InputError, match="no usable CUDA GPU"):
        benchmark(BRANCHY, SHAPE, [{op: "gpu0" for op in ops}], "cuda:0")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_in_process_and_ranks(ops):
    n = torch.cuda.device_count()
    spec = ",".join(f"cuda:{i}" for i in range(min(n, 2)))
    names = [f"gpu{i}" for i in range(min(n, 2))]
    split = {op: names[min(i // 5, len(names) - 1)] for i, op in enumerate(ops)}
    for runner in ("inprocess", "ranks"):
        r = benchmark(BRANCHY, SHAPE, [split], spec, runner=runner, batch_size=BATCH, settings=FAST)[0]
        assert r.status == "ok", r.message
        assert all(d["peak_memory_bytes"] > 0 for d in r.devices if d["name"] in split.values())


@pytest.mark.workers
def test_a_profiled_step_is_written_as_a_chrome_trace_per_placement_and_rank(ops, tmp_path):
    """--profile: one more step after the timed ones under torch.profiler; its trace holds the ops each rank
    ran (convolutions on the rank that holds them) and the tensors sent between ranks."""
    import json
    half = {op: ("cpu0" if i < len(ops) // 2 else "cpu1") for i, op in enumerate(ops)}
    folder = tmp_path / "profiles"
    results = benchmark(BRANCHY, SHAPE, [{op: "cpu0" for op in ops}, half], "cpu:2", runner="ranks",
                        settings=BenchmarkSettings(steps=1, warmup=1, profile=str(folder)))
    assert [r.status for r in results] == ["ok", "ok"]
    assert results[1].profiles == [str(folder / "placement1-rank0.json"), str(folder / "placement1-rank1.json")]
    assert len(results[1].steps_s) == 1  # the profiled step is not one of the timed steps
    names = {e.get("name", "") for e in json.loads((folder / "placement1-rank0.json").read_text())["traceEvents"]}
    assert any("conv" in n for n in names) and any("send" in n for n in names)
    alone = {e.get("name", "") for e in json.loads((folder / "placement0-rank1.json").read_text())["traceEvents"]}
    assert not any("conv" in n for n in alone)  # rank 1 holds no op of the single-device placement


def test_a_profile_folder_that_cannot_be_made_is_refused_before_any_worker(ops, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(InputError, match="cannot make the profile folder") as e:
        benchmark(BRANCHY, SHAPE, [{op: "cpu0" for op in ops}], "cpu:2", runner="ranks",
                  settings=BenchmarkSettings(profile=str(blocker / "sub")))
    assert e.value.field == "--profile"
