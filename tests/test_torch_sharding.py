"""Split layers for real: channel- and batch-split convolutions and linear layers on two gloo CPU ranks train
exactly the model one device trains, and move the bytes the simulator's semantics say they move."""

from pathlib import Path

import pytest

from placement_core.base.errors import InputError

torch = pytest.importorskip("torch")

from placement_core.torch.benchmark import BenchmarkSettings, benchmark  # noqa: E402

MODEL = str(Path(__file__).resolve().parent / "torch_models.py") + ":SmallCNN"
SHAPE = (2, 3, 8, 8)
BATCH = 4
OPS = ["x", "conv1", "relu", "pool", "flatten", "fc"]
CONV_W, FC_W = (3 * 4 * 9 + 4) * 4, (64 * 10 + 10) * 4  # weights and biases, bytes


def batch(devs=("cpu0", "cpu1")):
    return {"devices": list(devs), "split": "batch"}


@pytest.fixture(scope="module")
def runs():
    single = {op: "cpu0" for op in OPS}
    channel = dict(single, conv1={"devices": ["cpu0", "cpu1"], "split": "channel"},
                   fc={"devices": ["cpu1", "cpu0"], "split": "channel", "sizes": [3, 7]})
    data_parallel = {op: batch() for op in OPS}
    mixed = dict(data_parallel, relu="cpu1", fc={"devices": ["cpu0", "cpu1"], "split": "channel"})
    bad = dict(single, relu={"devices": ["cpu0", "cpu1"], "split": "channel"})
    results = benchmark(MODEL, SHAPE, [single, channel, data_parallel, mixed, bad], "cpu:2", runner="ranks",
                        batch_size=BATCH, settings=BenchmarkSettings(steps=3, warmup=1, timeout=120))
    return dict(zip(["single", "channel", "data_parallel", "mixed", "bad"], results))


@pytest.mark.workers
def test_split_layers_train_the_same_model(runs):
    reference = runs["single"].losses
    assert runs["single"].status == "ok" and len(set(round(v, 6) for v in reference)) == 3  # it trains
    for name in ("channel", "data_parallel", "mixed"):
        assert runs[name].status == "ok", runs[name].message
        assert runs[name].losses == pytest.approx(reference, rel=1e-5), name


def test_bytes_moved_follow_the_semantics(runs):
    act = BATCH * 4 * 8 * 8 * 4  # conv1's output
    # channel: the input goes to conv1's second shard (3 x 8 x 8 floats a sample; the input needs no gradient),
    # that shard's slice (2 of 4 channels) to relu on cpu0 and its gradient back; fc's input (64 features) to
    # its shard on cpu1 and back; the loss sits on fc's first device, cpu1, so the 7 outputs of the shard on
    # cpu0 go there and their gradient back: 7 messages
    x = BATCH * 3 * 8 * 8 * 4
    flat = BATCH * 64 * 4
    assert runs["channel"].bytes_per_step == x + 2 * act // 2 + 2 * flat + 2 * BATCH * 7 * 4
    assert runs["channel"].messages_per_step == 7
    # data parallel: no activation crosses, not even the logits (each rank takes the loss of its own half
    # batch, as DDP does); each rank all-reduces every weight: 2 (k - 1) / k of them, k = 2, in one bucket
    # (one all-reduce a rank). Until 2026-11-28 the second half's logits went to the first rank for the loss
    # and their gradient came back: 2 * (BATCH // 2) * 10 * 4 bytes and 2 messages more
    assert runs["data_parallel"].bytes_per_step == 2 * (CONV_W + FC_W)
    assert runs["data_parallel"].messages_per_step == 2 * 1


def test_a_bad_split_is_reported_with_the_op(runs):
    assert runs["bad"].status == "error"
    assert "relu" in runs["bad"].message and "Conv2d" in runs["bad"].message


def test_the_in_process_runner_refuses_splits():
    with pytest.raises(InputError, match="ranks runner"):
        benchmark(MODEL, SHAPE, [{op: (batch() if op == "fc" else "cpu0") for op in OPS}], "cpu:2",
                  runner="inprocess", batch_size=BATCH, settings=BenchmarkSettings(steps=1, warmup=1))


@pytest.mark.workers
def test_placement_benchmark_runs_a_sharded_placement_file_on_cpu_ranks(tmp_path, capsys):
    """The command a user types: a placement/1 file with a channel and a batch split, two gloo ranks."""
    import json

    from placement_core.cli import main
    entries = dict({op: "cpu0" for op in OPS}, conv1={"devices": ["cpu0", "cpu1"], "split": "channel"},
                   fc=batch())
    path = tmp_path / "sharded.json"
    path.write_text(json.dumps({"format": "placement/1", "assignment": entries}))
    assert main(["benchmark", "--model", MODEL, "--input-shape", ",".join(map(str, SHAPE)), "--batch-size",
                 str(BATCH), "--devices", "cpu:2", "--placement", str(path), "--steps", "2", "--warmup", "1",
                 "--rounds", "1", "--no-store", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    row = out[0] if isinstance(out, list) else out
    assert row["status"] == "ok", row
    assert row["median_step_s"] > 0


def test_one_process_group_per_rank_set_for_every_placement(monkeypatch):
    """A group per replicated layer and placement leaked a gloo context (sockets and threads) each time:
    500 threads per rank after six data-parallel runs (docs/e5.md). Every rank set gets one group, kept."""
    import torch.distributed as dist

    from placement_core.torch.collectives import replica_group
    made = []
    monkeypatch.setattr(dist, "new_group", lambda ranks: made.append(tuple(ranks)) or object())
    groups: dict = {}
    first = [replica_group(groups, ranks) for ranks in [(0, 1), (1, 0), (0, 2), (0, 1, 2), (2, 0)]]
    again = [replica_group(groups, ranks) for ranks in [(0, 1), (1, 0), (0, 2), (0, 1, 2), (2, 0)]]
    assert made == [(0, 1), (0, 2), (0, 1, 2)]  # in first-asked order, the same on every rank
    assert first[0] is first[1] is again[0] and first[2] is first[4] is again[4] and first[3] is again[3]


@pytest.mark.parametrize("shape", [(5, 10), (5, 3, 4)])
def test_the_shares_of_a_split_loss_add_up_to_the_whole_batchs(shape):
    """Cross-entropy (2-d outputs, the batch's labels sliced) and mean square: samples 0:2 and 2:5 of a batch
    of 5 weigh 2/5 and 3/5 of their own means, which add up to the mean over all 5."""
    from placement_core.torch.executor import Loss
    out = torch.randn(*shape, generator=torch.Generator().manual_seed(3))
    whole = Loss(7)(out)
    shares = Loss(7)(out[0:2], (0, 2, 5)) + Loss(7)(out[2:5], (2, 5, 5))
    assert float(shares) == pytest.approx(float(whole), rel=1e-6)
    assert float(Loss(7)(out[0:2], (0, 2, 5))) != pytest.approx(float(whole) * 2 / 5, rel=1e-3)  # not a scaled copy
