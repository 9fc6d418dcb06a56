"""The learned cost model: features worked out by hand and checked against the simulator's own counts, the
statistics against scipy, `placement surrogate fit|score` on simulated and on (synthetic) measured samples."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_core import Problem, load_devices, load_network
from placement_core.analysis.stats import kendall_tau, mape, pearson_r
from placement_core.cli import main
from placement_core.surrogate.features import Featurizer
from placement_core.store import RunStore

from helpers import devices, examples, op, problem as make_problem

pytest.importorskip("sklearn")
scipy_stats = pytest.importorskip("scipy.stats")


def test_features_of_a_hand_built_placement():
    """x -> a -> b on two devices joined by a 100 B/s bus, every op 1 s forward and 2 s backward, 100 B out.
    x and a on d0, b on d1: d0 computes 6 s, d1 3 s; a's output goes over once (100 B) and b's gradient
    comes back (100 B): 2 messages, 200 B, 2 s on the bus. Forward critical path 1 + 1 + 1 (transfer) + 1 =
    4 s, backward 2 + 1 + 2 + 2 = 7 s: 11 s, the simulated makespan too."""
    p = make_problem([op("x"), op("a", ["x"]), op("b", ["a"])], devices(2))
    f = Featurizer(p)
    row = dict(zip(f.names, f(np.array([[0, 0, 1]]))[0]))
    assert (row["compute d0"], row["compute d1"]) == (6.0, 3.0)
    assert (row["compute, rank 1"], row["compute, rank 2"]) == (6.0, 3.0)
    assert (row["resident bytes d0"], row["resident bytes d1"]) == (200.0, 100.0)
    assert row["overflow total"] == 0.0
    assert (row["bytes on bus"], row["transfer time on bus"], row["messages"]) == (200.0, 2.0, 2.0)
    assert (row["forward critical path"], row["backward critical path"], row["critical path"]) == (4.0, 7.0, 11.0)
    assert (row["busiest device"], row["lower bound"], row["devices used"]) == (6.0, 11.0, 2.0)
    assert row["compute balance"] == pytest.approx(6 / 9)
    assert p.simulate([0, 0, 1]).result.makespan == pytest.approx(11.0)
    # one device: nothing crosses, the critical path is the whole step
    one = dict(zip(f.names, f(np.zeros((1, 3), dtype=np.int32))[0]))
    assert (one["messages"], one["bytes cut"], one["critical path"], one["devices used"]) == (0.0, 0.0, 9.0, 1.0)
    # the one-hot encoding (dissertation §5.4): op i on device d is feature i * devices + d
    onehot = Featurizer(p, "one-hot")(np.array([[0, 0, 1]]))[0]
    assert onehot.tolist() == [1, 0, 1, 0, 0, 1]


@pytest.fixture(scope="module")
def resnet():
    return Problem(load_network("resnet50"), load_devices("malvik-4gpu"))


@settings(max_examples=examples(15), deadline=None)
@given(st.integers(0, 2**32 - 1), st.floats(0.0, 1.0))
def test_bytes_per_channel_and_messages_are_the_simulators(resnet, seed, spread):
    """Counted in numpy the way the simulator sends (one message per producer and receiving device, one
    per consumer back to each device holding its inputs): exactly the simulated channel bytes and transfers."""
    rng = np.random.default_rng(seed)
    x = np.where(rng.random(resnet.n_ops) < spread, rng.integers(0, resnet.n_devices, resnet.n_ops), 1)
    f = Featurizer(resnet)
    row = dict(zip(f.names, f(x[None])[0]))
    r = resnet.simulate(x).result
    assert [row[f"bytes on {c.name}"] for c in resnet.devices.channels] == pytest.approx(r.channel_bytes.tolist())
    assert row["messages"] == r.transfers


@settings(max_examples=examples(80), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=2, max_size=30))
def test_tau_r_and_mape_agree_with_scipy(pairs):
    x = np.array([a for a, _ in pairs], float)
    y = np.array([b for _, b in pairs], float) + 1.0
    want_tau = scipy_stats.kendalltau(x, y).statistic  # tau-b, ties in either variable
    got_tau = kendall_tau(x, y)
    assert (np.isnan(got_tau) and np.isnan(want_tau)) or got_tau == pytest.approx(want_tau, abs=1e-12)
    if np.ptp(x) > 0 and np.ptp(y) > 0:
        assert pearson_r(x, y) == pytest.approx(scipy_stats.pearsonr(x, y).statistic, abs=1e-9)
    assert mape(x + 1, y) == pytest.approx(100 * np.mean(np.abs(x + 1 - y) / y))


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.training
def test_fit_and_score_a_simulated_surrogate(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path))
    code, out, err = run(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "ga",
                         "--budget", "500", "--json")
    assert code == 0, err
    run_id = json.loads(out)["run_id"]
    model = tmp_path / "m.json"
    code, out, err = run(capsys, "surrogate", "fit", "--run", run_id, "--samples", "300", "--out", model, "--json")
    assert code == 0, err
    fit = json.loads(out)
    assert {"kendall_tau", "pearson_r", "mape", "n_train", "n_test"} <= set(fit)
    assert fit["n_train"] == 300 and fit["target"] == "simulated" and fit["kendall_tau"] > 0.7
    saved = json.loads(model.read_text())
    assert saved["format"] == "placement-surrogate/1" and len(saved["placements"]) == 300
    # the file's targets are the simulator's objectives of its placements
    with RunStore() as store:
        p = store.problem(run_id)
    assert saved["targets"] == pytest.approx(p.evaluate_many(np.array(saved["placements"])).tolist(), rel=1e-12)
    code, out, err = run(capsys, "surrogate", "score", "--model", model, "--run", run_id, "--test", "200", "--json")
    assert code == 0, err
    score = json.loads(out)
    assert score["n_train"] == 300 and score["n_test"] == 200 and score["kendall_tau"] > 0.7
    assert [c["n_train"] for c in score["learning_curve"]] == [50, 100, 250, 300]
    assert score["learning_curve"][-1]["kendall_tau"] == pytest.approx(score["kendall_tau"])
    # refitting is deterministic: the same file scores the same
    code, again, err = run(capsys, "surrogate", "score", "--model", model, "--run", run_id, "--test", "200", "--json")
    assert json.loads(again) == score
    code, out, err = run(capsys, "surrogate", "score", "--model", model, "--run", run_id, "--test", "200")
    assert code == 0 and "training samples" in out and "Kendall tau" in out
    # a run of another network is refused with the reason
    code, out, err = run(capsys, "optimize", "--network", "vgg16", "--devices", "malvik", "--algorithm", "random",
                         "--budget", "20", "--json")
    other = json.loads(out)["run_id"]
    code, out, err = run(capsys, "surrogate", "score", "--model", model, "--run", other)
    assert code == 2 and "the model was fitted on alexnet / malvik, not on this run's vgg16 / malvik" in err
    code, out, err = run(capsys, "surrogate", "fit", "--run", run_id, "--measured", "--out", tmp_path / "n.json")
    assert code == 2 and "has 0 usable measurement(s)" in err


@pytest.mark.training
def test_a_measured_surrogate_learns_what_the_simulator_misses(capsys, tmp_path, monkeypatch):
    """Synthetic measurements: the simulated time, 5 % longer per message sent. The simulated time alone
    ranks them poorly; the surrogate, with the simulated time and the message count as features, ranks held-out
    measurements nearly perfectly."""
    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path))
    code, out, err = run(capsys, "optimize", "--network", "alexnet", "--devices", "malvik", "--algorithm", "random",
                         "--budget", "50", "--json")
    run_id = json.loads(out)["run_id"]
    from placement_core.surrogate.model import sample_placements

    with RunStore() as store:
        p = store.problem(run_id)
        xs = sample_placements(p, [], 160, np.random.default_rng(3))
        names = p.devices.names
        truth = []
        for x in xs:
            r = p.simulate(x).result
            t = r.batch_time * (1 + 0.05 * r.transfers)
            truth.append(t)
            store.add_benchmark(network_name=p.graph.name, devices_spec="test", runner="ranks",
                                placement={o.name: names[int(i)] for o, i in zip(p.graph.ops, x)},
                                simulated_s=None, measured_median_s=t, result={}, run_id=run_id)
    model = tmp_path / "m.json"
    code, out, err = run(capsys, "surrogate", "fit", "--run", run_id, "--measured", "--out", model, "--json")
    assert code == 0, err
    assert json.loads(out)["n_train"] == 160 and json.loads(out)["target"] == "measured"
    # held out: 60 new measurements the model never saw
    with RunStore() as store:
        more = sample_placements(p, [], 60, np.random.default_rng(4), exclude=xs)
        held = []
        for x in more:
            r = p.simulate(x).result
            held.append(r.batch_time * (1 + 0.05 * r.transfers))
            store.add_benchmark(network_name=p.graph.name, devices_spec="test", runner="ranks",
                                placement={o.name: names[int(i)] for o, i in zip(p.graph.ops, x)},
                                simulated_s=None, measured_median_s=held[-1], result={}, run_id=run_id)
    code, out, err = run(capsys, "surrogate", "score", "--model", model, "--run", run_id, "--json")
    assert code == 0, err
    score = json.loads(out)
    assert score["n_test"] == 60 and score["n_train"] == 160
    simulated_only = kendall_tau(held, [p.simulate(x).result.batch_time for x in more])
    assert score["kendall_tau"] > 0.9 > simulated_only
