"""The learned placers' constraints (issue 30): memory, shared modules, the search space of pg/ppo/post, GDP on any
number of devices."""

from __future__ import annotations

import numpy as np
import pytest

from placement_core.base.errors import InputError
from placement_core.optimize import make_optimizer, run
from placement_core.optimize.base import stored_params
from placement_core.optimize.feasible import MemoryGuard, fits, overflowing
from placement_core.optimize.search_space import POSTS_OWN, build_space
from tests.helpers import devices, op, problem

SOFTMAX = ("pg", "ppo", "post", "cem")


def tight():
    """A chain a -> b -> c -> d on two devices; d1 holds 1,000 bytes. c has 5,000 bytes of weights: moving c to d1
    overflows it, moving any other op (or all three) does not."""
    ops = [op("a"), op("b", ["a"]), op("c", ["b"], params=5_000.0), op("d", ["c"])]
    devs = devices(2)
    small = devs.with_memory({"d1": 1_000.0})
    return problem(ops, small)


def test_the_tight_instance_overflows_exactly_when_c_moves():
    p = tight()
    x = np.array([[0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 1], [1, 1, 0, 1], [0, 0, 1, 0], [1, 1, 1, 1]],
                 dtype=np.int32)
    assert overflowing(p, x).tolist() == [False, False, False, False, False, True, True]


def test_the_memory_guard_falls_back_move_by_move():
    p = tight()
    guard = MemoryGuard(p, np.zeros(4, dtype=np.int32))
    assert guard.active
    # a placement that fits is left alone, one check
    assert guard(np.array([[1, 1, 0, 0]])).tolist() == [[1, 1, 0, 0]]
    # moves a, b, c, d in order: a and b fit, c would overflow and is skipped, d fits again
    assert guard(np.array([[1, 1, 1, 1]])).tolist() == [[1, 1, 0, 1]]
    assert guard.skipped == 1 and guard.repaired == 1
    # in the visiting order d, c, b, a the same: only c is skipped
    assert guard(np.array([[1, 1, 1, 1]]), order=[3, 2, 1, 0]).tolist() == [[1, 1, 0, 1]]
    # a start that overflows promises nothing: the guard leaves placements as they are
    idle = MemoryGuard(p, np.ones(4, dtype=np.int32))
    assert not idle.active and idle(np.array([[0, 0, 1, 0]])).tolist() == [[0, 0, 1, 0]]


@pytest.mark.parametrize("algorithm", SOFTMAX)
def test_the_softmax_placers_never_propose_an_overflowing_placement(algorithm):
    p = tight()
    space = {"groups": 0, "devices": "all", "start": "heft", "feasible": True}
    params = {**space, "samples": 12} if algorithm != "cem" else {**space, "samples": 12}
    opt = make_optimizer(p, algorithm, seed=0, params={**params, "start_epsilon": 0.5}, evaluations=600)
    assert opt.guard is not None and opt.guard.active
    asked = []
    for _ in range(50):
        x = opt.ask(12)
        asked.append(x)
        opt.tell(x, p.evaluate_many(x))
    asked = np.concatenate(asked)
    assert not overflowing(p, asked).any()
    assert (asked[:, 2] == 0).all() and (asked[:, [0, 1, 3]] == 1).any()  # c never moves; the others do
    # without the fallback the same distribution proposes c on d1 (so the test above means something)
    free = make_optimizer(p, algorithm, seed=0, params={**params, "start_epsilon": 0.5, "feasible": False},
                          evaluations=600)
    assert overflowing(p, np.concatenate([free.ask(12) for _ in range(5)])).any()


def test_the_start_distribution_is_posts_cross_entropy_update_of_the_start():
    p = tight()
    opt = make_optimizer(p, "post", seed=0, params={"groups": 0, "devices": "all", "start": "heft"})
    start = opt.search.start
    probs = opt.probs
    k = p.n_devices
    # (1 - ε) on the start device plus ε/|D| everywhere, ε = 0.1
    assert np.allclose(probs[np.arange(4), start], 0.9 + 0.1 / k)
    assert np.allclose(probs.sum(axis=1), 1.0) and np.allclose(np.sort(probs, axis=1)[:, 0], 0.1 / k)
    # Post's own space: uniform, every logit 0
    own = make_optimizer(p, "post", seed=0, params=POSTS_OWN)
    assert np.array_equal(own.logits, np.zeros((4, k)))


def test_post_mixes_its_cross_entropy_update_with_the_start_distribution():
    p = tight()
    opt = make_optimizer(p, "post", seed=0, params={"groups": 0, "devices": "all", "start": "heft", "samples": 4,
                                                    "ce_every": 4, "elite_fraction": 0.25, "epsilon": 0.2,
                                                    "steps": 8, "feasible": False})
    base = opt.base.copy()
    x = np.array([[1, 1, 1, 1], [0, 0, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0]], dtype=np.int32)
    opt.tell(x, np.array([1.0, 2.0, 3.0, 4.0]))  # the elite is (1, 1, 1, 1); ε = 0.2 · (1 - 4/8) = 0.1
    assert np.allclose(opt.probs, 0.9 * np.array([[0.0, 1.0]] * 4) + 0.1 * base)


def test_units_devices_and_projection():
    from placement_core.formats.catalog import load_devices, load_network
    from placement_core.problem import ProblemSpec
    p = ProblemSpec().build(load_network("inception_v3"), load_devices("malvik-4gpu"))
    space = build_space(p, groups=40, devices="gpus", start="heft")
    assert space.units <= 40 and space.devices.tolist() == [1, 2, 3, 4]
    assert build_space(p, groups=40, devices="all").devices.tolist() == [0, 1, 2, 3, 4]
    assert build_space(p, groups=40, devices="auto").devices.tolist() == [1, 2, 3, 4]  # the GPUs hold it
    # ops of one unit always share a device; a placement on the CPU is projected onto the start's devices
    x = space.expand(np.random.default_rng(0).integers(0, 4, (3, space.units)))
    for u in range(space.units):
        assert (x[:, space.unit_of == u] == x[:, [space.first[u]]]).all()
    projected = space.project(np.zeros((1, p.n_ops), dtype=np.int32))
    assert np.array_equal(projected[0], space.start_placement())
    assert np.array_equal(space.project(x), x)


def test_stored_runs_of_the_softmax_placers_resume_in_posts_own_space():
    old = {"samples": 12, "lr": 1.0, "baseline_decay": 0.9}
    assert stored_params("ppo", old) == {**POSTS_OWN, **old}
    assert stored_params("ppo", {**old, "groups": 64})["groups"] == 64
    assert stored_params("ga", {"population": 50}) == {"population": 50}


# -- shared modules -------------------------------------------------------------------------------------------

def shared():
    """x -> m -> r -> m#2 -> y: module m (with weights) is called twice; r, a module without weights, twice too."""
    ops = [op("x", kind="input", out=100.0), op("m", ["x"], params=400.0, module="m"),
           op("r", ["m"], module="r"), op("m#2", ["r"], module="m"), op("r#2", ["m#2"], module="r"),
           op("y", ["r#2"])]
    return problem(ops, devices(3))


def test_simulate_refuses_a_placement_that_splits_a_shared_module_with_weights():
    p = shared()
    assert p.tied == [[1, 3]]
    with pytest.raises(InputError) as e:
        p.simulate(np.array([0, 0, 0, 1, 0, 0], dtype=np.int32))
    assert "module 'm' has weights" in e.value.message and "'m#2' (on d1)" in e.value.message
    assert p.simulate(np.array([0, 2, 0, 2, 1, 0], dtype=np.int32)).objective > 0  # r's calls may split
    assert p.tie(np.array([[0, 2, 0, 1, 0, 0]])).tolist() == [[0, 2, 0, 2, 0, 0]]


@pytest.mark.parametrize("algorithm", ["ga", "random", "pg", "ppo", "post", "cem"])
def test_every_search_keeps_a_shared_modules_calls_on_one_device(algorithm):
    p = shared()
    params = {} if algorithm in ("ga", "random", "cem") else {"groups": 0, "start": "uniform"}
    r = run(p, algorithm, evaluations=120, seed=0, params=params)
    assert r.best_placement[1] == r.best_placement[3]
    assert all(x[1] == x[3] for _, x in r.kept)


def test_the_search_space_keeps_a_shared_modules_calls_in_one_unit():
    space = build_space(shared(), groups=0)
    assert space.unit_of[1] == space.unit_of[3] and space.units == 5


# -- Placeto and GDP (torch) ------------------------------------------------------------------------------------

def _policy_file(tmp_path, net, method: str):
    from placement_core.torch.policies.policy_io import save_policy
    path = tmp_path / f"{method}.json"
    save_policy(path, method, net, devices={}, training={})
    return str(path)


def _eager_placeto(tmp_path):
    """An untrained Placeto policy that wants to move every node off its current device (keep bonus −20)."""
    import torch
    from placement_core.torch.policies.placeto_net import PlacetoNet
    torch.manual_seed(0)
    net = PlacetoNet(hidden=8, rounds=2, head=8, start="fastest")
    with torch.no_grad():
        net.keep.fill_(-20.0)
    return net, _policy_file(tmp_path, net, "placeto")


def test_placetos_greedy_pass_masks_the_move_that_would_overflow(tmp_path):
    pytest.importorskip("torch")
    from placement_core.policies.features import GraphInfo
    from placement_core.torch.policies import load_policy, place
    from placement_core.torch.policies.optimizers import fast_greedy
    p = tight()
    net, path = _eager_placeto(tmp_path)
    unmasked = fast_greedy(net, GraphInfo(p, start="fastest"))
    assert unmasked.tolist() == [1, 1, 1, 1] and not fits(p, unmasked)  # every node moves: c overflows d1
    assert place(load_policy(path), p).tolist() == [1, 1, 0, 1]  # c's move is masked: it stays
    zero = run(p, "placeto", evaluations=1, seed=0, params={"policy": path})
    assert zero.best_placement.tolist() == [1, 1, 0, 1] and zero.best.feasible
    # fine-tuning: every sampled episode's placement falls back where it would overflow
    opt = make_optimizer(p, "placeto", seed=0, params={"policy": path, "rollouts": 4}, evaluations=40)
    for _ in range(6):
        x = opt.ask(40)
        assert not overflowing(p, x).any()
        opt.tell(x, p.evaluate_many(x))


def _gdp_net(devices_count=None):
    import torch
    from placement_core.torch.policies.gdp import GdpNet
    torch.manual_seed(0)
    return GdpNet(devices_count, hidden=8, layers=1, heads=2, attention_layers=1, head=8)


@pytest.mark.parametrize("count", [3, 5, 9])
def test_gdp_places_on_3_5_and_9_devices(tmp_path, count):
    pytest.importorskip("torch")
    from placement_core.policies.features import GDP_DEVICE_FEATURES, GraphInfo
    from placement_core.torch.policies import load_policy, place
    from placement_core.torch.policies.gdp import GdpGraph
    net = _gdp_net()
    path = _policy_file(tmp_path, net, "gdp")
    ops = [op("a"), op("b", ["a"]), op("c", ["a"]), op("d", ["b", "c"])]
    p = problem(ops, devices(count))
    g = GdpGraph(GraphInfo(p))
    assert tuple(g.device_x.shape) == (4, count, len(GDP_DEVICE_FEATURES))
    assert tuple(net.logits(g).shape) == (4, count)
    x = place(load_policy(path), p)
    assert x.shape == (4,) and 0 <= x.min() and x.max() < count
    r = run(p, "gdp", evaluations=20, seed=0, params={"policy": path, "rollouts": 4})
    assert r.evaluations == 20 and r.best.feasible


def test_a_gdp_policy_of_the_first_version_still_loads_and_places_on_its_devices(tmp_path):
    pytest.importorskip("torch")
    from placement_core.torch.policies import load_policy, place
    path = _policy_file(tmp_path, _gdp_net(3), "gdp")
    p = problem([op("a"), op("b", ["a"])], devices(3))
    assert place(load_policy(path), p).max() < 3
    with pytest.raises(InputError) as e:
        run(problem([op("a"), op("b", ["a"])], devices(5)), "gdp", evaluations=1, params={"policy": path})
    assert "places on 3 devices" in e.value.message


def test_gdp_never_returns_an_overflowing_placement(tmp_path):
    pytest.importorskip("torch")
    import torch
    from placement_core.torch.policies import load_policy, place
    p = tight()
    net = _gdp_net(2)  # the first version: its output bias can send every node to d1
    with torch.no_grad():
        net.out.weight.zero_()
        net.out.bias.copy_(torch.tensor([0.0, 5.0]))
    path = _policy_file(tmp_path, net, "gdp")
    x = place(load_policy(path), p)
    assert fits(p, x) and x[2] == 0  # falls back toward memory-aware HEFT's placement; c stays on d0
    opt = make_optimizer(p, "gdp", seed=0, params={"policy": path, "rollouts": 4}, evaluations=30)
    for _ in range(5):
        batch = opt.ask(30)
        assert not overflowing(p, batch).any()
        opt.tell(batch, p.evaluate_many(batch))


def test_every_learned_placer_returns_a_placement_the_benchmark_accepts(tmp_path):
    """A model that calls one Linear twice: the benchmark worker's own check (torch/apply.py's
    shared_module_conflicts over the fx nodes' devices) accepts what each learned placer returns."""
    torch = pytest.importorskip("torch")
    from torch import nn
    from placement_core.torch.apply import node_devices, shared_module_conflicts
    from placement_core.torch.model_import import trace_model
    from placement_core.torch.policies.placeto_net import PlacetoNet

    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.mid, self.out = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 4)

        def forward(self, x):
            return self.out(self.lin(torch.relu(self.mid(self.lin(x)))))

    traced = trace_model(Twice(), (8, 16))
    p = problem(traced.graph.ops, devices(3))
    split = {o.name: "d1" if o.name == "lin#2" else "d0" for o in traced.graph.ops}
    with pytest.raises(InputError):  # the check really refuses a split of lin's calls
        shared_module_conflicts(traced.gm, node_devices(traced.gm, traced.node_op, split))
    torch.manual_seed(1)
    placeto = _policy_file(tmp_path, PlacetoNet(hidden=8, rounds=2, head=8, start="heft"), "placeto")
    gdp = _policy_file(tmp_path, _gdp_net(), "gdp")
    runs = {"pg": {}, "ppo": {}, "post": {}, "placeto": {"policy": placeto, "rollouts": 4},
            "gdp": {"policy": gdp, "rollouts": 4}}
    for algorithm, params in runs.items():
        for budget in (1, 30):
            r = run(p, algorithm, evaluations=budget, seed=0, params=params)
            names = {o.name: p.devices.names[int(d)] for o, d in zip(traced.graph.ops, r.best_placement)}
            shared_module_conflicts(traced.gm, node_devices(traced.gm, traced.node_op, names))
            p.simulate(r.best_placement)


def test_every_shipped_policy_loads_and_places():
    pytest.importorskip("torch")
    from pathlib import Path
    from placement_core.formats.catalog import load_devices, load_network
    from placement_core.problem import ProblemSpec
    from placement_core.torch.policies import load_policy, place
    graph = load_network("alexnet")
    shipped = sorted((Path(__file__).resolve().parent.parent / "assets" / "policies").glob("*.json"))
    assert len(shipped) >= 5
    for path in shipped:
        policy = load_policy(path)
        presets = ["malvik-4gpu"] if "devices" in policy.config else ["malvik", "malvik-4gpu", "nvlink-8gpu"]
        for preset in presets:
            p = ProblemSpec().build(graph, load_devices(preset))
            x = place(policy, p)
            assert x.shape == (p.n_ops,) and x.max() < p.n_devices and p.simulate(x).feasible, (path.name, preset)
