"""The Learned policies page in a real browser: place with a policy in one click, train one, stop it, find it kept.

The module's dashboard serves a PLACEMENT_HOME whose policies/ folder holds one small Placeto policy, as a user
who trained one on the command line would have.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from browser_util import main, no_errors, open_page, settle, shot, sidebar_text, type_number, wait_text

pytest.importorskip("torch")
pytestmark = [pytest.mark.browser, pytest.mark.timeout(400)]


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    import torch
    from placement_core.torch.policies.placeto_net import PlacetoNet
    from placement_core.torch.policies.policy_io import save_policy
    home = tmp_path_factory.mktemp("learned_home")
    torch.manual_seed(1)
    (home / "policies").mkdir()
    save_policy(home / "policies" / "my-policy.json", "placeto", PlacetoNet(hidden=8, rounds=2, start="fastest"),
                devices={"name": "malvik-4gpu", "count": 5}, training={"family": "nmt", "episodes": 8})
    return home


def pick_policy(pg, name: str) -> None:
    box = main(pg).locator("[data-testid='stSelectbox']").filter(has=pg.get_by_text("Policy", exact=True)).first
    for _ in range(3):
        box.click()
        try:
            pg.get_by_role("option").filter(has_text=name).first.wait_for(timeout=3000)
            break
        except Exception:
            settle(pg)
    pg.get_by_role("option").filter(has_text=name).first.click()
    settle(pg)


def test_place_with_a_policy_then_train_stop_and_keep(page, home):
    pg = page
    open_page(pg, "Learned policies")
    no_errors(pg)
    pick_policy(pg, "my-policy")
    main(pg).get_by_role("button", name="Place the current network").click()
    settle(pg)
    wait_text(pg, "It is now the current placement")
    assert "my-policy (zero-shot)" in sidebar_text(pg)
    assert "placed 176 ops in" in main(pg).inner_text()
    # the placement is the policy's own: check it against the policy read back here
    from placement_core import load_devices, load_network
    from placement_core.problem import ProblemSpec
    from placement_core.torch.policies import load_policy, place
    from placement_core.analysis import fmt_seconds
    problem = ProblemSpec().build(load_network("resnet50"), load_devices("malvik-4gpu"))
    expected = problem.simulate(place(load_policy(home / "policies" / "my-policy.json"), problem))
    assert fmt_seconds(expected.result.batch_time) in sidebar_text(pg)

    # the Trace page shows that placement, and the page keeps its message on return
    main(pg).get_by_text("See its trace").click()
    pg.get_by_role("heading", name="Trace", exact=True).first.wait_for()
    settle(pg)
    no_errors(pg)
    open_page(pg, "Learned policies")
    assert "It is now the current placement" in main(pg).inner_text()

    # train a policy on the ptb family for many episodes, watch the curve grow, stop it
    type_number(pg, "Episodes", 100000)
    box = main(pg).locator("[data-testid='stMultiSelect']").filter(has=pg.get_by_text("Families", exact=True)).first
    box.get_by_role("button", name="Clear all").click()
    settle(pg)
    box.click()
    pg.get_by_role("option", name="ptb", exact=True).first.click()
    pg.keyboard.press("Escape")
    settle(pg)
    main(pg).get_by_role("button", name="Start training").click()
    chart = pg.locator("[data-testid='stPlotlyChart']").filter(has_text="reward curve").first
    chart.wait_for(timeout=180_000)
    # two updates drawn means the curve is live (redrawn every second)
    pg.wait_for_function("() => { const el = document.querySelector('[data-testid=stPlotlyChart] .js-plotly-plot');"
                         " return el && el._fullData && el._fullData[0].x.length >= 2; }", timeout=180_000)
    main(pg).get_by_role("button", name="Stop").click()
    wait_text(pg, "Saved as", timeout_s=180)
    settle(pg)
    text = main(pg).inner_text()
    assert "stopped" in text and "Stored as run" in text
    no_errors(pg)
    shot(pg, "learned-policies")

    # the stopped training's policy is kept in the data folder and offered above
    saved = sorted((home / "policies").glob("placeto-ptb-*.json"))
    assert len(saved) == 1
    data = json.loads(saved[0].read_text())
    assert data["training"]["stopped"] is True and data["training"]["family"] == "ptb"
    assert 8 <= data["training"]["episodes"] < 100000
    open_page(pg, "Network")
    open_page(pg, "Learned policies")
    pick_policy(pg, saved[0].stem)
    main(pg).get_by_role("button", name="Place the current network").click()
    settle(pg)
    wait_text(pg, "It is now the current placement")
    assert f"{saved[0].stem} (zero-shot)" in sidebar_text(pg)

    # the training is on the Runs page with its reward curve
    open_page(pg, "Runs")
    wait_text(pg, "A policy training")
    assert np.isfinite(len(main(pg).inner_text()))
    no_errors(pg)
