"""train-policy, optimize --algorithm placeto|gdp, policy files and their errors, the run store's record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from placement_core.cli import main
from placement_core.families.nmt import nmt_graph
from placement_core.base.jsonio import write_json
from placement_core.formats.network import network_to_dict

POLICIES = Path(__file__).resolve().parent.parent / "assets" / "policies"

ROOT = Path(__file__).resolve().parent.parent


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.training
def test_the_learned_placers_need_no_torch_until_used():
    code = ("import sys, placement_core, placement_core.cli, placement_core.families, placement_core.policies.features, "
            "placement_core.policies.policy_file, placement_core.policies.reinforce, placement_core.optimize\n"
            "from placement_core.optimize import ALGORITHMS\n"
            "assert {'pg', 'ppo', 'post'} <= set(ALGORITHMS)\n"
            "placement_core.cli.build_parser()\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


torch = pytest.importorskip("torch")


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    """Three small NMT graphs (34 ops): two to train on, one held out."""
    d = tmp_path_factory.mktemp("nets")
    paths = []
    for k, (steps, batch) in enumerate(((3, 256), (3, 384), (3, 320))):
        path = d / f"small{k}.json"
        write_json(path, network_to_dict(nmt_graph(f"small{k}", steps, batch, hidden=256, embed=128, vocab=2000)))
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def trained(nets, tmp_path_factory):
    """A Placeto policy trained for a few episodes, and the store that recorded it."""
    d = tmp_path_factory.mktemp("trained")
    policy = d / "policy.json"
    code = main(["train-policy", "--networks", str(nets[0]), str(nets[1]), "--devices", "malvik-4gpu",
                 "--episodes", "16", "--rollouts", "4", "--seed", "3", "--out", str(policy), "--home", str(d),
                 "--quiet"])
    assert code == 0
    return policy, d


def test_train_policy_writes_a_policy_and_stores_its_reward_curve(trained, capsys):
    policy, home = trained
    capsys.readouterr()  # what the fixture's training printed
    data = json.loads(policy.read_text())
    assert data["format"] == "placement-policy/1" and data["method"] == "placeto"
    assert data["devices"]["name"] == "malvik-4gpu" and data["devices"]["count"] == 5
    assert data["training"]["episodes"] == 16 and data["training"]["seed"] == 3
    assert policy.stat().st_size < 200_000  # a small file
    code, out, err = run(capsys, "runs", "show", "1", "--home", home, "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["algorithm"] == "train-placeto" and shown["status"] == "done" and shown["network"] == "small0"
    assert shown["history_points"] == 16 // 4  # one point per update
    assert shown["extras"]["training"]["graphs"] == ["small0", "small1"]
    from placement_core.store import RunStore
    with RunStore(home=home) as store:
        history = store.history(1)
    assert (np.diff(history[:, 0]) > 0).all()  # evaluations grow: 4 rollouts x 34 steps per update
    assert history[0, 0] == 4 * 34
    assert (np.diff(history[:, 1]) <= 1e-12).all()  # best so far never rises


def test_zero_shot_is_one_evaluation_of_the_policys_own_placement(trained, nets, capsys):
    policy, home = trained
    code, out, err = run(capsys, "optimize", "--algorithm", "placeto", "--policy", policy, "--network", nets[2],
                         "--devices", "malvik-4gpu", "--budget", "0", "--json", "--home", home)
    assert code == 0, err
    zero = json.loads(out)
    assert zero["evaluations"] == 1
    from placement_core import load_devices, load_network
    from placement_core.problem import ProblemSpec
    from placement_core.torch.policies import load_policy, place
    problem = ProblemSpec().build(load_network(str(nets[2])), load_devices("malvik-4gpu"))
    placement = place(load_policy(policy), problem)
    assert zero["best_objective_s"] == problem.evaluate(placement)
    names = problem.devices.names
    assert zero["best_assignment"] == {op.name: names[d] for op, d in zip(problem.graph.ops, placement)}
    code, out, err = run(capsys, "optimize", "--algorithm", "placeto", "--policy", policy, "--network", nets[2],
                         "--devices", "malvik-4gpu", "--budget", "40", "--json", "--home", home)
    tuned = json.loads(out)
    assert tuned["evaluations"] == 40 and tuned["best_objective_s"] <= zero["best_objective_s"]
    assert tuned["history"][0][1] == zero["best_objective_s"]  # fine-tuning starts from the zero-shot placement


def random_dag(rng: np.random.Generator, name: str, n: int):
    """A random layered DAG of ``n`` ops with FLOPs and tensors (for small, fast trainings)."""
    from placement_core.model.graph import Graph, Op
    ops = [Op(name="in", kind="input", output_bytes=1e6)]
    for k in range(1, n):
        parents = sorted({f"o{j}" if j else "in" for j in rng.integers(max(0, k - 3), k, 2)})
        ops.append(Op(name=f"o{k}", kind="conv", inputs=tuple(parents), fwd_flops=float(rng.uniform(1, 4) * 1e9),
                      bwd_flops=float(rng.uniform(2, 8) * 1e9), output_bytes=float(rng.uniform(0.2, 2) * 1e6),
                      mem_bytes=1e6))
    return Graph(name, ops)


def two_speeds():
    """A slow device and two fast ones on one shared link."""
    from placement_core.model.devices import Channel, Device, DeviceGraph
    devs = [Device("slow", "cpu", 1e11, 1e12, 1e10), Device("fast0", "gpu", 1e12, 1e12, 1e11),
            Device("fast1", "gpu", 1e12, 1e12, 1e11)]
    pairs = tuple((a.name, b.name) for a in devs for b in devs if a is not b)
    return DeviceGraph("two-speeds", devs, [Channel("bus", 1e9, 1e-5, pairs)])


@pytest.mark.training
def test_a_short_training_beats_a_random_policy_on_a_held_out_graph():
    from placement_core.problem import ProblemSpec
    from placement_core.torch.policies import TrainSettings, place, train
    from placement_core.torch.policies.placeto_net import PlacetoNet
    from placement_core.torch.policies.policy_io import LoadedPolicy
    rng = np.random.default_rng(5)
    devs = two_speeds()
    problems = [ProblemSpec().build(random_dag(rng, f"g{k}", 10), devs) for k in range(5)]
    held_out = problems.pop()
    # from the trivial start (all on one fast device) and without the bonus for keeping a node where it is,
    # so that the untrained policy scrambles the placement and what the trained one does is all it learned
    settings = TrainSettings(episodes=240, rollouts=4, hidden=8, rounds=2, lr=1e-2, seed=0, start="fastest")
    torch.manual_seed(0)
    net = PlacetoNet(hidden=8, rounds=2, start="fastest")
    with torch.no_grad():
        net.keep.zero_()
    before = held_out.evaluate(place(LoadedPolicy("placeto", net, {}, {}, {}), held_out))
    result = train(problems, settings, net=net)
    learned = held_out.evaluate(place(LoadedPolicy("placeto", result.net, {}, {}, {}), held_out))
    randoms = held_out.evaluate_many(rng.integers(0, 3, (200, held_out.n_ops), dtype=np.int32))
    # half the median uniformly random placement's time or better, and better than before training
    assert learned < 0.5 * np.median(randoms)
    assert learned < 0.5 * before
    assert result.curve[-1, 2] < 0.5 * result.curve[0, 2]  # the reward curve went the right way


@pytest.mark.training
def test_gdp_trains_and_places_in_one_shot(nets, tmp_path, capsys):
    policy = tmp_path / "gdp.json"
    code, out, err = run(capsys, "train-policy", "--method", "gdp", "--networks", nets[0], nets[1], "--devices",
                         "malvik-4gpu", "--episodes", "32", "--rollouts", "8", "--out", policy, "--no-store",
                         "--json")
    assert code == 0, err
    config = json.loads(policy.read_text())["config"]
    assert "devices" not in config and config["head"] == 64  # it scores devices: no device count of its own
    code, out, err = run(capsys, "optimize", "--algorithm", "gdp", "--policy", policy, "--network", nets[2],
                         "--devices", "malvik-4gpu", "--budget", "0", "--json", "--no-store")
    assert code == 0, err and json.loads(out)["evaluations"] == 1
    # trained on five devices, it places on three (and nine) too
    for devices in ("malvik", "nvlink-8gpu"):
        code, out, err = run(capsys, "optimize", "--algorithm", "gdp", "--policy", policy, "--network", nets[2],
                             "--devices", devices, "--budget", "0", "--json", "--no-store")
        assert code == 0, err
    # a policy of the first version (one output per device) refuses a device graph of another size, saying why
    code, out, err = run(capsys, "optimize", "--algorithm", "gdp", "--policy", POLICIES / "gdp-mix-malvik-4gpu.json",
                         "--network", nets[2], "--devices", "malvik", "--budget", "0", "--no-store")
    assert code == 2 and "places on 5 devices, the device graph has 3" in err


def test_a_policy_file_round_trips_exactly(trained, tmp_path):
    from placement_core.torch.policies import load_policy
    from placement_core.torch.policies.policy_io import save_policy
    a = load_policy(trained[0])
    save_policy(tmp_path / "again.json", a.method, a.net, devices=a.devices, training=a.training)
    b = load_policy(tmp_path / "again.json")
    for (k, va), (_, vb) in zip(a.net.state_dict().items(), b.net.state_dict().items()):
        assert torch.equal(va, vb), k
    assert a.config == b.config and a.config["start"] == "heft"


@pytest.mark.parametrize("argv, message", [
    (["--algorithm", "ga", "--budget", "0"], "a budget of 0 evaluations means zero-shot"),
    (["--algorithm", "placeto", "--budget", "0"], "--algorithm placeto applies a trained policy"),
    (["--algorithm", "ga", "--policy", "p.json"], "--policy is for --algorithm placeto or gdp"),
    (["--algorithm", "placeto", "--policy", "/nonexistent/p.json"], "cannot read the policy"),
    (["--algorithm", "placeto", "--policy", "p.json", "--init", "heft"], "a learned placer starts from its policy"),
])
def test_bad_learned_options_say_what_to_do(nets, capsys, argv, message):
    code, out, err = run(capsys, "optimize", "--network", nets[0], "--devices", "malvik-4gpu", "--no-store", *argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_a_damaged_policy_file_is_refused_with_the_field(trained, nets, tmp_path, capsys):
    data = json.loads(trained[0].read_text())
    name = next(iter(data["tensors"]))
    broken = json.loads(json.dumps(data))
    broken["tensors"][name]["data"] = broken["tensors"][name]["data"][:-8]
    (tmp_path / "b1.json").write_text(json.dumps(broken))
    code, out, err = run(capsys, "optimize", "--algorithm", "placeto", "--policy", tmp_path / "b1.json", "--network",
                         nets[0], "--devices", "malvik-4gpu", "--budget", "0", "--no-store")
    assert code == 2 and f"tensors.{name}" in err
    wrong = json.loads(json.dumps(data))
    wrong["tensors"][name]["shape"] = [1] + wrong["tensors"][name]["shape"]
    wrong["tensors"][name]["data"] = data["tensors"][name]["data"]
    (tmp_path / "b2.json").write_text(json.dumps(wrong))
    code, out, err = run(capsys, "optimize", "--algorithm", "placeto", "--policy", tmp_path / "b2.json", "--network",
                         nets[0], "--devices", "malvik-4gpu", "--budget", "0", "--no-store")
    assert code == 2 and f"tensors.{name}" in err
    (tmp_path / "b3.json").write_text(json.dumps({**data, "format": "placement-network/1"}))
    code, out, err = run(capsys, "optimize", "--algorithm", "gdp", "--policy", tmp_path / "b3.json", "--network",
                         nets[0], "--devices", "malvik-4gpu", "--budget", "0", "--no-store")
    assert code == 2 and "format" in err
    code, out, err = run(capsys, "optimize", "--algorithm", "gdp", "--policy", trained[0], "--network", nets[0],
                         "--devices", "malvik-4gpu", "--budget", "0", "--no-store")
    assert code == 2 and "is a placeto policy, not a gdp one" in err


def test_a_training_run_is_not_resumed(trained, capsys):
    code, out, err = run(capsys, "optimize", "--resume", "1", "--home", trained[1])
    assert code == 2 and "is a policy training" in err


def test_fine_tuning_resumes_exactly_from_a_checkpoint(trained, nets):
    from placement_core import load_devices, load_network
    from placement_core.optimize import make_optimizer
    from placement_core.optimize.driver import drive
    from placement_core.problem import ProblemSpec
    problem = ProblemSpec().build(load_network(str(nets[2])), load_devices("malvik-4gpu"))
    params = {"policy": str(trained[0]), "rollouts": 4}
    states = []
    whole = drive(make_optimizer(problem, "placeto", seed=2, params=params), evaluations=30,
                  checkpoint=states.append, checkpoint_every=10)
    state = next(s for s in states if s["evaluations"] >= 10)
    json.dumps(state)  # what the run store keeps
    resumed = drive(make_optimizer(problem, "placeto", seed=2, params=params), evaluations=30, state=state)
    assert np.array_equal(whole.history, resumed.history)
    assert np.array_equal(whole.best_placement, resumed.best_placement)


@pytest.mark.training
def test_ctrl_c_stops_a_training_after_its_update_and_keeps_the_policy(nets, tmp_path):
    import os
    import signal
    import time
    policy = tmp_path / "p.json"
    proc = subprocess.Popen([sys.executable, "-m", "placement_core", "train-policy", "--networks", str(nets[0]),
                             "--devices", "malvik-4gpu", "--episodes", "100000", "--rollouts", "2", "--out", str(policy),
                             "--home", str(tmp_path), "--quiet"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    from placement_core.store import RunStore
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until the training has written its first checkpoint
        time.sleep(0.5)
        try:
            with RunStore(home=tmp_path) as store:
                if len(store.history(1)):
                    break
        except Exception:
            pass
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "stopping after this update" in err and "policy written to" in out
    data = json.loads(policy.read_text())
    assert data["training"]["stopped"] is True and 2 <= data["training"]["episodes"] < 100000
    with RunStore(home=tmp_path) as store:
        assert store.get(1).status == "stopped"
    assert os.path.getsize(policy) > 0
