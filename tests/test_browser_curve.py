"""The live best-so-far curve in Chromium keeps a long run's early improvements.

Hill climbing reports after every evaluation, so 3,000 evaluations make 3,000 reports: the old curve, halved
whenever it reached 600 points, dropped the improvements at evaluations 2, 4, ... The expected curve is worked
out independently: the same run in this process, its reports reduced to the points where the best fell.
"""

from __future__ import annotations

import re

import pytest
from browser_util import no_errors, open_page, settle, type_number, wait_text

from placement_core import load_devices, load_network
from placement_core.optimize import run

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

BUDGET = 3000
TITLE = "Random hill climbing"


def expected_curve() -> list[tuple[float, float]]:
    """(evaluations, best ms) where the best fell, then the last report: the same run the page starts
    (unseeded: from all on gpu0, the best single device, hill climbing finds nothing better)."""
    from dashboard.settings import SimChoices

    g, d = load_network("resnet50"), load_devices("malvik-4gpu")
    problem = SimChoices().spec(d).build(g, d)
    reports = []
    run(problem, "hill-climbing", evaluations=BUDGET, seed=1,
        progress=lambda p: reports.append((float(p.evaluations), p.best * 1e3)))
    falls = [r for i, r in enumerate(reports) if i == 0 or r[1] < min(b for _, b in reports[:i])]
    return falls + ([reports[-1]] if reports[-1][0] > falls[-1][0] else [])


def choose_only(pg, title: str) -> None:
    box = pg.locator("[data-testid='stMultiSelect']").filter(has=pg.get_by_text("Algorithms", exact=True)).first
    for name in [t.get_attribute("aria-label") for t in box.locator(".react-aria-ComboBox [data-tag]").all()]:
        box.locator(".react-aria-ComboBox").get_by_role("button", name=f"Remove {name}", exact=True).first.click()
        settle(pg)
    box.click()
    pg.get_by_role("option", name=title, exact=True).first.click()
    pg.keyboard.press("Escape")
    settle(pg)


def test_a_long_runs_curve_keeps_its_early_improvements(page):
    pg = page
    want = expected_curve()
    assert len(want) > 50 and want[1][0] < 10  # improvements from the first evaluations on
    open_page(pg, "Optimize")
    choose_only(pg, TITLE)
    type_number(pg, "Evaluations per algorithm", BUDGET)
    type_number(pg, "Seed", 1)
    pg.get_by_text("Seed the search with the current placement").first.click()
    settle(pg)
    pg.get_by_role("button", name="Start", exact=True).click()
    wait_text(pg, "Results", timeout_s=60)
    settle(pg)
    chart = pg.locator("[data-testid='stPlotlyChart']").filter(has_text="Best objective so far").first
    chart.locator(".js-plotly-plot").wait_for()
    drawn = chart.locator(".js-plotly-plot").evaluate(
        "gd => gd._fullData.map(t => [t.name, Array.from(t.x), Array.from(t.y)])")
    # this run's curve, named by its run-store number (runs other sessions of this server compute show too)
    mine = [d for d in drawn if re.fullmatch(rf"run \d+ · {re.escape(TITLE)}", d[0])]
    assert len(mine) == 1, [d[0] for d in drawn]
    [(name, xs, ys)] = mine
    assert [x for x, _ in want] == xs  # every improvement, the earliest included, and the last report
    assert ys == pytest.approx([y for _, y in want], rel=1e-9)
    no_errors(pg)
