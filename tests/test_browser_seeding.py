"""The Optimize page's initial mappings in Chromium: a person picks HEFT and a Bayesian start, leaves the page
and comes back (the choice is kept), starts a GA, and reads in its result how it was seeded and what that cost.

The expected seed count comes from placement_core directly (initial_placements on the same problem).
"""

from __future__ import annotations

import re

import pytest
from browser_util import choose, main, multiselect, no_errors, number, open_page, settle, shot, type_number, wait_text

from placement_core import Problem, load_devices, load_network
from placement_core.optimize.seeding import initial_placements

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]


def _tags(pg, label: str) -> list[str]:
    tags = multiselect(pg, label).locator(".react-aria-ComboBox [data-tag]")
    return [tags.nth(i).get_attribute("aria-label") for i in range(tags.count())]


def test_initial_mappings_are_kept_used_and_reported(page):
    pg = page
    choose(pg, "Network", "AlexNet  (alexnet)")
    open_page(pg, "Optimize")
    multiselect(pg, "Algorithms").locator(".react-aria-ComboBox").get_by_role(
        "button", name="Remove MAP-Elites").click()
    settle(pg)
    type_number(pg, "Evaluations per algorithm", 500)
    multiselect(pg, "Initial mappings").click()
    pg.get_by_role("option", name="HEFT (earliest finish time)").click()
    pg.keyboard.press("Escape")
    settle(pg)
    type_number(pg, "Bayesian trials", 5)

    open_page(pg, "Trace")
    open_page(pg, "Optimize")
    no_errors(pg)
    assert _tags(pg, "Initial mappings") == ["HEFT (earliest finish time)"]
    assert number(pg, "Bayesian trials") == "5" and number(pg, "Random placements") == "0"
    assert pg.get_by_role("checkbox", name="Seed the search with the current placement").first.is_checked()

    pg.get_by_role("button", name="Start", exact=True).click()
    seeds = initial_placements(Problem(load_network("alexnet"), load_devices("malvik-4gpu")), "heft,bayes:5",
                               seed=1)
    said = (f"Seeded with {len(seeds.labels)} initial placement(s) (heft,bayes:5; 6 evaluations, not counted in "
            "the budget) and the current placement")
    wait_text(pg, said, timeout_s=120)
    no_errors(pg)
    result = main(pg).inner_text()
    assert f"best seed {seeds.labels[0]}" in result
    assert re.search(r"run \d+ · Genetic algorithm", result) and "· done" in result  # named by its store id
    shot(pg, "optimize-seeded")
