"""The Learned policies page (AppTest): apply a policy in one click, train one in the background, see it stored."""

from __future__ import annotations

import time

import numpy as np
import pytest
from apptest_util import assert_clean, figures, goto, sidebar_text, start, text

torch = pytest.importorskip("torch")

from dashboard import learnview  # noqa: E402
from placement_core import load_devices, load_network  # noqa: E402
from placement_core.problem import ProblemSpec  # noqa: E402
from placement_core.store import RunStore  # noqa: E402


def save_untrained(name: str, method: str = "placeto", devices: int = 5) -> str:
    """An untrained policy in the user's policies folder (what is applied does not matter here, only how)."""
    from placement_core.torch.policies.gdp import GdpNet
    from placement_core.torch.policies.placeto_net import PlacetoNet
    from placement_core.torch.policies.policy_io import save_policy
    torch.manual_seed(0)
    net = PlacetoNet(hidden=8, rounds=2, start="fastest") if method == "placeto" else GdpNet(devices, hidden=8)
    path = learnview.user_dir() / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    save_policy(path, method, net, devices={"name": "malvik-4gpu", "count": devices}, training={"family": "nmt"})
    return str(path)


def learned_page(at=None):
    at = at or start()
    goto(at, "learned")
    assert_clean(at)
    return at


def wait_for_trainings(at, timeout: float = 240):
    deadline = time.time() + timeout
    for job in learnview.jobs(at.session_state["session_key"]):
        job.thread.join(max(0.0, deadline - time.time()))
        assert not job.active, "the training did not finish in time"
    at.run()


@pytest.mark.slow
def test_one_click_places_the_current_network_with_a_policy():
    path = save_untrained("mine")
    at = learned_page()
    at.selectbox(key="learn_policy").set_value(path).run()
    at.button(key="learn_apply").click().run()
    assert_clean(at)
    assert at.session_state["placement_label"] == "mine (zero-shot)"
    assert "mine (zero-shot)" in sidebar_text(at)
    assert "placed 176 ops in" in text(at) and "It is now the current placement" in text(at)
    # exactly the policy's own placement of ResNet-50 on malvik-4gpu
    from placement_core.torch.policies import load_policy, place
    problem = ProblemSpec().build(load_network("resnet50"), load_devices("malvik-4gpu"))
    assert np.array_equal(at.session_state["placement"], place(load_policy(path), problem))


@pytest.mark.slow
def test_a_gdp_policy_for_another_device_count_is_explained_not_applied():
    path = save_untrained("gdp3", "gdp", devices=3)
    at = learned_page()
    at.selectbox(key="learn_policy").set_value(path).run()
    assert "This GDP policy places on 3 devices" in text(at)
    at.button(key="learn_apply").click().run()
    assert "places on 3 devices, the device graph has 5" in "\n".join(str(e.value) for e in at.error)
    assert at.session_state["placement_label"] != "gdp3 (zero-shot)"


def test_the_shipped_policies_are_offered():
    at = learned_page()
    shipped = [p for p in learnview.policies()[0] if p.shipped]
    assert shipped, "assets/policies/ holds the pretrained policies"
    options = at.selectbox(key="learn_policy").options
    assert all(any(p.name in o for o in options) for p in shipped)


def test_a_damaged_policy_file_is_named_and_the_rest_still_listed():
    save_untrained("good")
    (learnview.user_dir() / "broken.json").write_text("{not json")
    at = learned_page()
    assert "broken.json" in "\n".join(str(w.value) for w in at.warning)
    assert any("good" in o for o in at.selectbox(key="learn_policy").options)


@pytest.mark.training
def test_a_training_runs_in_the_background_draws_its_curve_and_is_stored():
    at = learned_page()
    at.multiselect(key="learn_families").set_value(["ptb"])
    at.number_input(key="learn_episodes").set_value(16)
    at.button(key="learn_start").click().run()
    wait_for_trainings(at)
    assert_clean(at)
    job = learnview.jobs(at.session_state["session_key"])[-1]
    assert job.status == "done" and job.episodes_done == 16
    curves = [f for f in figures(at) if "reward curve" in f["layout"]["title"]["text"]]
    assert curves and len(curves[0]["data"][0]["x"]) == 2  # one point per update of 8 episodes
    # the policy is saved among the user's, listed above, and the training is a stored run
    from pathlib import Path
    assert any(Path(job.policy_path).stem in o for o in at.selectbox(key="learn_policy").options)
    with RunStore() as store:
        rec = store.get(job.run_id)
        history = store.history(job.run_id)
    assert rec.algorithm == "train-placeto" and rec.status == "done" and len(history) == 2
    assert rec.extras["training"]["family"] == "ptb"
    goto(at, "runs")
    assert_clean(at)
    assert "A policy training" in text(at)
    titles = [f["layout"]["yaxis"]["title"]["text"] for f in figures(at)]
    assert any("best single device" in t for t in titles)


@pytest.mark.training
def test_stop_ends_a_training_early_and_keeps_what_it_learned():
    at = learned_page()
    at.multiselect(key="learn_families").set_value(["cifar10"])
    at.number_input(key="learn_episodes").set_value(100_000)
    at.button(key="learn_start").click().run()
    job = learnview.jobs(at.session_state["session_key"])[-1]
    deadline = time.time() + 120
    while job.view()["episodes"] < 8 and time.time() < deadline:
        time.sleep(0.2)
    at.run()
    at.button(key=f"learn_stop_{job.id}").click().run()
    wait_for_trainings(at)
    assert job.status == "stopped" and 8 <= job.episodes_done < 100_000
    assert job.policy_path and "stopped" in text(at).lower()
    with RunStore() as store:
        assert store.get(job.run_id).status == "stopped"


@pytest.mark.slow
def test_the_form_is_kept_when_leaving_the_page():
    at = learned_page()
    at.number_input(key="learn_episodes").set_value(1234).run()
    at.selectbox(key="learn_method").set_value("gdp").run()
    goto(at, "network")
    goto(at, "learned")
    assert at.number_input(key="learn_episodes").value == 1234
    assert at.selectbox(key="learn_method").value == "gdp"


@pytest.mark.slow
def test_without_torch_the_page_says_what_to_install(monkeypatch):
    monkeypatch.setattr(learnview, "torch_available", lambda: False)
    at = learned_page()
    assert 'pip install -e ".[torch]"' in text(at)


def test_optimize_offers_post_pg_and_ppo():
    at = start()
    goto(at, "optimize")
    options = at.multiselect(key="opt_algorithms").options
    assert {"Post (cross-entropy + PPO)", "Policy gradient (REINFORCE)", "Proximal policy optimization"} <= set(options)
