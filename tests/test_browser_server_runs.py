"""Runs belong to the server that computes them (issue 31, items 1 and 3), in Chromium.

A reload mid-run is a new Streamlit session: it must still show the run on Optimize (progress and Stop), count
it in the sidebar, and offer Stop on the Runs page; Stop there stores the run as stopped. A run has one number
everywhere, its id in the run store: what Optimize calls "run 10 · HEFT" is run 10 on the Runs page.
"""

from __future__ import annotations

import re
import time

import pytest
from browser_util import main, no_errors, open_page, settle, sidebar, sidebar_text, type_number, wait_text

from placement_core.optimize import ALGORITHMS
from placement_core.store import RunStore

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]


def _algorithms(pg, keep: list[str]) -> None:
    """Make the Algorithms box hold exactly ``keep`` (titles), as a person does: remove the others, add."""
    box = main(pg).locator("[data-testid='stMultiSelect']").filter(has=pg.get_by_text("Algorithms", exact=True)).first
    tags = box.locator(".react-aria-ComboBox [data-tag]")
    tags.first.wait_for()  # the default choices are drawn
    settle(pg)
    for name in [tags.nth(i).get_attribute("aria-label") for i in range(tags.count())]:
        if name not in keep:
            box.locator(".react-aria-ComboBox").get_by_role("button", name=f"Remove {name}", exact=True).click()
            settle(pg)
    for name in keep:
        if not box.locator(f".react-aria-ComboBox [data-tag][aria-label='{name}']").count():
            box.click()
            pg.keyboard.type(name)  # the list is virtual: later options are drawn once typed for
            pg.get_by_role("option", name=name, exact=True).first.click()
            pg.keyboard.press("Escape")
            settle(pg)
    assert sorted(tags.nth(i).get_attribute("aria-label") for i in range(tags.count())) == sorted(keep)


def _wait_store(home, predicate, timeout_s: float = 120):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        with RunStore(home) as store:
            found = [r for r in store.runs() if predicate(r)]
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError("the run store never showed the expected run")


def test_a_reload_mid_run_keeps_the_run_in_sight_and_stoppable(page, home):
    pg = page
    open_page(pg, "Optimize")
    _algorithms(pg, ["MAP-Elites"])
    type_number(pg, "Evaluations per algorithm", 5_000_000)
    pg.get_by_role("button", name="Start", exact=True).click()
    wait_text(pg, "1 optimization run(s) in progress", scope=sidebar(pg))
    [rec] = _wait_store(home, lambda r: r.algorithm == "map-elites" and r.status == "running")

    pg.reload()  # a new session of the same server
    pg.get_by_role("heading", name="Optimize", exact=True).first.wait_for()
    wait_text(pg, "1 optimization run(s) in progress", scope=sidebar(pg))
    settle(pg)
    wait_text(pg, f"run {rec.id} · MAP-Elites", scope=main(pg))  # its progress, by its store id (drawn by a
    wait_text(pg, "evaluations/s", scope=main(pg))  # fragment that may come a moment after the page)
    assert "No runs yet" not in main(pg).inner_text()
    assert main(pg).get_by_role("button", name="Stop", exact=True).count() == 1

    # a fresh tab (another session) sees it too, and the Runs page offers Stop, not only Resume
    other = pg.context.new_page()
    other.goto(pg.url.split("/optimize")[0] + "/runs")
    other.get_by_role("heading", name="Runs", exact=True).first.wait_for()
    settle(other)
    wait_text(other, "1 optimization run(s) in progress", scope=sidebar(other))
    stop = main(other).get_by_role("button", name="Stop", exact=True)
    stop.wait_for()
    assert main(other).get_by_role("button", name="Resume").is_disabled()
    stop.click()
    _wait_store(home, lambda r: r.id == rec.id and r.status == "stopped")
    other.close()
    # the first tab's count goes away by itself (its sidebar polls while a run works)
    deadline = time.time() + 30
    while "optimization run(s) in progress" in sidebar_text(pg) and time.time() < deadline:
        time.sleep(0.3)
    assert "optimization run(s) in progress" not in sidebar_text(pg)
    no_errors(pg)


def test_a_run_has_one_number_everywhere(page, home):
    pg = page
    open_page(pg, "Optimize")
    ga, heft = ALGORITHMS["ga"].title, ALGORITHMS["heft"].title
    _algorithms(pg, [ga, heft])
    type_number(pg, "Evaluations per algorithm", 2000)
    pg.get_by_role("button", name="Start", exact=True).click()
    pg.get_by_role("button", name="Use this placement").nth(1).wait_for(timeout=180_000)
    settle(pg)
    text = main(pg).inner_text()
    named = dict((int(k), title) for k, title in re.findall(rf"run (\d+) · ({re.escape(ga)}|{re.escape(heft)})",
                                                            text))
    assert sorted(named.values()) == sorted([ga, heft]), text[:2000]
    with RunStore(home) as store:
        for run_id, title in named.items():  # Optimize's number is the store's: the same run
            assert ALGORITHMS[store.get(run_id).algorithm].title == title
    open_page(pg, "Runs")
    table = main(pg).locator("[data-testid='stDataFrame']").first
    table.wait_for()
    # and the Runs page's run with that number is that algorithm
    picker = main(pg).locator("[data-testid='stSelectbox']").filter(has=pg.get_by_text("Run", exact=True)).first
    for run_id, title in named.items():
        picker.click()
        option = pg.get_by_role("option", name=re.compile(rf"^run {run_id} · ")).first
        assert option.inner_text().startswith(f"run {run_id} · {title}")
        option.click()
        settle(pg)
    no_errors(pg)
