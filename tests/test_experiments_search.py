"""Short runs of each path of the search experiments: `placement experiment assisted`, `seeding` and `e4`
(the full runs take minutes to tens of minutes; their figures are in docs/surrogate.md and docs/e4.md)."""

import json

import pytest

from placement_core import Problem, load_devices, load_network
from placement_core.cli import main
from placement_core.optimize import run

pytest.importorskip("sklearn")


@pytest.mark.workers
def test_assisted_compares_with_the_plain_ga(capsys):
    code = main(["experiment", "assisted", "--problems", "alexnet:malvik", "--seeds", "1", "--budget", "60",
                 "--reference", "400", "--initial", "20", "--batch", "10", "--generations", "3", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    [row] = json.loads(out)
    reference = run(Problem(load_network("alexnet"), load_devices("malvik")), "ga", evaluations=400, seed=0)
    assert row["ga_reference"] == reference.best_objective
    assert row["ga_at_budget"] == reference.history[reference.history[:, 0] <= 60][-1, 1]
    assert row["assisted_reached_at"] is None or (row["assisted_reached_at"] <= 60
                                                   and row["assisted"] <= row["ga_reference"])


def test_seeding_charges_the_start_to_the_budget(capsys):
    code = main(["experiment", "seeding", "--problems", "alexnet:malvik", "--seeds", "1", "--bayes", "5",
                 "--checkpoints", "100,500,2000", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    rows = {r["start"]: r for r in json.loads(out)}
    assert set(rows) == {"random", "heuristics", "bayes", "heuristics + bayes"}
    assert rows["random"]["start_evaluations"] == 0 and rows["bayes"]["start_evaluations"] == 5
    assert rows["heuristics + bayes"]["start_evaluations"] == rows["heuristics"]["start_evaluations"] + 5
    plain = run(Problem(load_network("alexnet"), load_devices("malvik")), "ga", evaluations=2000, seed=0)
    assert rows["random"]["best@2000"] == plain.best_objective
    for r in rows.values():
        assert r["best@100"] >= r["best@500"] >= r["best@2000"]


@pytest.mark.workers
def test_e4_from_the_archive_to_measurements(capsys, tmp_path):
    """The whole E4 path on a tiny model and a made-up calibration: an archive, three measured searches, the
    confirmation, the report; run again, it measures nothing more."""
    pytest.importorskip("torch")
    from placement_core.base.jsonio import write_json
    from placement_core.model.devices import devices_to_dict
    from placement_core.torch.devspec import nominal_device_graph, parse_devices
    from placement_core.torch.model_import import trace_model
    from placement_core.torch.sources import load_model, parse_source

    model = "tests/torch_models.py:SmallCNN"
    graph = trace_model(load_model(parse_source(model), seed=0), (1, 3, 8, 8), name="smallcnn").graph.with_batch_size(4)
    cal = tmp_path / "cal"
    cal.mkdir()
    devs = nominal_device_graph(parse_devices("cpu:2"))
    write_json(cal / "devices.json", devices_to_dict(devs))
    write_json(cal / "timings.json", {"format": "placement-timings/1", "network": graph.name, "batch_size": 4,
                                      "input_shape": [1, 3, 8, 8],
                                      "ops": {op.name: {d: {"fwd": 1e-4 * (i + 1), "bwd": 2e-4, "update": 0.0}
                                                        for d in ("cpu0", "cpu1")}
                                              for i, op in enumerate(graph.ops)}})
    out = tmp_path / "e4"
    argv = ["experiment", "e4", "--model", model, "--input-shape", "1,3,8,8", "--batch-size", "4", "--calibration",
            str(cal), "--out", str(out), "--budget", "3", "--archive-budget", "200", "--steps", "1", "--rounds", "1",
            "--confirm-rounds", "1"]
    code = main(argv)
    text, err = capsys.readouterr()
    assert code == 0, err
    report = (out / "report.md").read_text()
    for title in ("top-K re-benchmarking", "surrogate-assisted GA", "plain GA on measurements"):
        assert f"| {title} |" in report
    assert (out / "e4.png").stat().st_size > 0 and "Load average" in report
    from placement_core.store import RunStore
    with RunStore(path=out / "runs.sqlite") as store:
        counts = {r.label: len(store.benchmarks(run_id=r.id)) for r in store.runs()}
    assert counts == {"e4 archive": 0, "e4 top-k": 3, "e4 assisted": 3, "e4 ga": 3}
    history = (out / "history.csv").read_text().splitlines()
    assert history[0] == "search,measurements,best_measured_s" and len(history) == 1 + 9
    # again: every search is done, so only the confirmation measures
    code = main(argv)
    capsys.readouterr()
    with RunStore(path=out / "runs.sqlite") as store:
        assert {r.label: len(store.benchmarks(run_id=r.id)) for r in store.runs()} == counts
