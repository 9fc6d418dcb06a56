"""Split ops in a real browser: a person lets the optimizers split ops by batch, runs the data-parallel placer on
ResNet-50, adopts its placement, reads the shards and the ring all-reduce in the Trace page's Gantt, downloads
the placement and finds its split entries, and the choice stays after leaving the page.

The expected numbers come from placement_core directly: the data-parallel placement of ResNet-50 on malvik-4gpu
(every op over the four GPUs), its objective, and the downloaded file simulated again.
"""

from __future__ import annotations

import json

import pytest
from browser_util import (choose, download, main, multiselect, no_errors, on_gantt, open_page, selected, settle, shot,
                          sidebar_text)

from placement_core import Problem, load_devices, load_network
from placement_core.analysis import fmt_seconds
from placement_core.optimize import problem_for, run
from placement_core.model.placement import placement_from_dict
from placement_core.model.sharding import search_splits

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

HOVERS = """gd => gd._fullData.filter(t => t.type === 'bar').flatMap(t => Array.from(t.hovertext || []))"""


def _settings(pg):
    """Open the page's simulator settings (an expander titled 'Simulator settings — ...')."""
    head = main(pg).get_by_text("Simulator settings", exact=False).first
    if not main(pg).get_by_text("Split ops", exact=True).first.is_visible():
        head.click()
        settle(pg)


def test_a_run_over_split_ops_is_adopted_traced_downloaded_and_kept(page, tmp_path):
    pg = page
    open_page(pg, "Optimize")
    _settings(pg)
    choose(pg, "Split ops", "by batch", scope=main(pg))
    assert "ops split by batch" in main(pg).inner_text()

    algorithms = multiselect(pg, "Algorithms")
    for name in ("Genetic algorithm", "MAP-Elites"):
        algorithms.locator(".react-aria-ComboBox").get_by_role("button", name=f"Remove {name}").click()
        settle(pg)
    algorithms.click()
    pg.keyboard.type("Data parallel")  # the list is long: type to narrow it, as a person does
    pg.get_by_role("option", name="Data parallel: every op split by batch over all GPUs").click()
    pg.keyboard.press("Escape")
    settle(pg)

    open_page(pg, "Network")  # leave and come back: the split setting and the algorithm stay
    open_page(pg, "Optimize")
    _settings(pg)
    assert selected(pg, "Split ops", scope=main(pg)) == "by batch"

    # what the placer is worth, computed here under the page's split table (windows of up to 4 GPUs)
    g, d = load_network("resnet50"), load_devices("malvik-4gpu")
    base = Problem(g, d).with_splits(search_splits(d, ["batch"], 4))
    data_parallel = run(problem_for(base, "data-parallel"), "data-parallel", evaluations=10, seed=1).best_objective

    pg.get_by_role("button", name="Start", exact=True).click()
    pg.get_by_role("button", name="Use this placement").first.wait_for(timeout=120_000)
    settle(pg)
    assert "Data parallel" in main(pg).inner_text()
    pg.get_by_role("button", name="Use this placement").first.click()
    settle(pg)
    no_errors(pg)
    assert fmt_seconds(data_parallel) in sidebar_text(pg), sidebar_text(pg)

    open_page(pg, "Trace")
    hovers = on_gantt(pg, HOVERS)
    assert any(" shard 4/4" in h for h in hovers), "no op drawn on four device rows"
    assert any("ring all-reduce" in h for h in hovers), "no all-reduce on the channel rows"
    shot(pg, "trace-sharded")

    path = download(pg, pg.get_by_role("button", name="Download the placement (JSON)"), tmp_path / "placement.json")
    doc = json.loads(path.read_text())
    split = [v for v in doc["assignment"].values() if isinstance(v, dict)]
    assert len(split) == 176 and all(v["split"] == "batch" and v["devices"] == ["gpu0", "gpu1", "gpu2", "gpu3"] for v in split), doc["assignment"]
    splits: list = []
    placement = placement_from_dict(doc, g, d, splits=splits)
    assert Problem(g, d).with_splits(tuple(splits)).evaluate(placement) == pytest.approx(data_parallel, rel=1e-12)

    open_page(pg, "Optimize")
    _settings(pg)
    assert selected(pg, "Split ops", scope=main(pg)) == "by batch"
    no_errors(pg)
