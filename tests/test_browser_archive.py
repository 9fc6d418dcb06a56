"""The Archive page in a real browser: click a heatmap cell, compare its elite with another, leave and come back.

The run's archive is read back from the dashboard's own run store (this module's PLACEMENT_HOME), so the test
knows, independently of the page, which elite each cell holds and what its rank and objective are.
"""

from __future__ import annotations

import pytest
from browser_util import (ARTIFACTS, choose, main, missing, no_errors, open_page, selected, serve, settle, shot,
                          type_number, wait_text)

from placement_core.analysis import elite_label, fmt_seconds
from placement_core.store.recording import load_archive
from placement_core.store import RunStore

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def app_home(tmp_path_factory):
    return tmp_path_factory.mktemp("archive_home")


@pytest.fixture(scope="module")
def app_url(app_home):
    """This module's dashboard (conftest's ``page`` opens it), with a home the test can read runs from."""
    why = missing()
    if why:
        pytest.skip(why)
    with serve(app_home, log_name="streamlit-test_browser_archive.log") as url:
        yield url


def stored_archive(home):
    with RunStore(home=home) as store:
        [rec] = [r for r in store.runs() if r.algorithm == "map-elites"]
        return load_archive(store, rec.id, store.problem(rec.id))


def best_per_cell(archive, x_dim=2, y_dim=0):
    best = {}
    for e in archive.elites.values():
        cell = (e.niche[y_dim], e.niche[x_dim])
        if cell not in best or e.objective < best[cell].objective:
            best[cell] = e
    return best


def cell_centre(pg, cell, shape):
    """Pixel centre of heatmap cell (row, column): the chart's axes span [-0.5, n - 0.5], rows upwards."""
    chart = main(pg).locator("[data-testid='stPlotlyChart']").first
    box = chart.locator(".nsewdrag").first.bounding_box()
    (yi, xi), (ny, nx) = cell, shape
    return box["x"] + (xi + 0.5) / nx * box["width"], box["y"] + (1 - (yi + 0.5) / ny) * box["height"]


def option(archive, ranked, k):
    e = ranked[k - 1]
    return f"elite #{k} · {fmt_seconds(e.objective)} · {elite_label(archive, e)}"


def test_click_a_cell_compare_and_come_back(page, app_home):
    pg = page
    open_page(pg, "Devices")
    choose(pg, "Start from a preset", "malvik-4gpu-limited-resnet50")
    open_page(pg, "Optimize")
    box = pg.locator("[data-testid='stMultiSelect']").filter(has=pg.get_by_text("Algorithms", exact=True)).first
    box.locator(".react-aria-ComboBox").get_by_role("button", name="Remove Genetic algorithm").click()
    settle(pg)
    type_number(pg, "Evaluations per algorithm", 2500)
    pg.get_by_role("button", name="Start").click()
    pg.get_by_role("button", name="Use this placement").first.wait_for(timeout=60_000)
    settle(pg)
    no_errors(pg)

    archive = stored_archive(app_home)
    ranked = archive.ranked()
    rank = {e.niche: k for k, e in enumerate(ranked, start=1)}
    best = best_per_cell(archive)
    # a cell whose elite is neither the first-ranked (the default) nor next to it in the list: the middle one
    cells = sorted(best, key=lambda c: rank[best[c].niche])
    target = cells[len(cells) // 2]
    elite = best[target]
    k = rank[elite.niche]
    assert k > 1

    open_page(pg, "Archive")
    wait_text(pg, "Map of the archive")
    wait_text(pg, "Elite #1")
    no_errors(pg)
    main(pg).get_by_text("every bin", exact=True).click()  # the 40 bins of cross-device edges, not 8 groups
    settle(pg)
    x, y = cell_centre(pg, target, (5, 40))
    pg.mouse.move(x, y)
    hover = pg.locator(".hoverlayer .hovertext").first
    hover.wait_for()
    assert f"objective {fmt_seconds(elite.objective)}" in hover.text_content()
    pg.mouse.click(x, y)
    settle(pg)
    no_errors(pg)  # before the fix: "Something went wrong while drawing the archive" (KeyError: 0)
    wait_text(pg, f"Elite #{k}")
    metric = main(pg).locator("[data-testid='stMetric']").filter(has=pg.get_by_text("Objective", exact=True))
    assert metric.locator("[data-testid='stMetricValue']").inner_text().strip() == fmt_seconds(elite.objective)
    assert selected(pg, "Elite").startswith(f"#{k} · {fmt_seconds(elite.objective)}")

    # compare it: A is the inspected elite, choose B
    assert selected(pg, "Placement A") == option(archive, ranked, k)
    j = 2 if k != 2 else 3
    choose(pg, "Placement B", option(archive, ranked, j))
    no_errors(pg)
    table = main(pg).locator("[data-testid='stDataFrame']").nth(1)
    assert table.locator("#glide-cell-0-0").text_content() == "objective"
    assert table.locator("#glide-cell-1-0").text_content() == fmt_seconds(elite.objective)
    assert table.locator("#glide-cell-2-0").text_content() == fmt_seconds(ranked[j - 1].objective)
    moved = int((elite.placement != ranked[j - 1].placement).sum())
    wait_text(pg, f"{moved} of 176 ops")
    shot(pg, "archive-compare")

    # leave the page and come back: the inspected elite and both choices are still there
    open_page(pg, "Trace")
    no_errors(pg)
    open_page(pg, "Archive")
    wait_text(pg, f"Elite #{k}")
    no_errors(pg)
    assert selected(pg, "Elite").startswith(f"#{k} · ")
    assert selected(pg, "Placement A") == option(archive, ranked, k)
    assert selected(pg, "Placement B") == option(archive, ranked, j)
    assert table.locator("#glide-cell-2-0").text_content() == fmt_seconds(ranked[j - 1].objective)
    assert (ARTIFACTS / "archive-compare.png").exists()
