"""The whole workflow in a real browser (Debian's Chromium driven by Playwright).

Start the dashboard, choose ResNet-50 and the memory-limited 4-GPU server, run the GA and MAP-Elites for
2,000 evaluations each, watch them finish, pick an elite in the archive, open its trace and the benchmark
page. Every step asserts visible text and that no exception box appeared; a screenshot of each page goes to
test-artifacts/.

Skipped (with the reason) when Chromium or the playwright package is missing: `bash scripts/browser-deps.sh`
installs Chromium; `.venv/bin/pip install -e ".[app,test]"` installs playwright. Never run `playwright install`.
"""

from __future__ import annotations

import re
import time

import pytest
from browser_util import ARTIFACTS, choose, network_graph, no_errors, open_list, open_page, settle, shot

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]


def test_whole_workflow_in_a_browser(page):
    pg = page
    ARTIFACTS.mkdir(exist_ok=True)
    t0 = time.time()
    # 1. Network: ResNet-50
    pg.get_by_role("heading", name="Network", exact=True).first.wait_for()
    settle(pg)
    choose(pg, "Network", "ResNet-50  (resnet50)")
    main = pg.locator("[data-testid='stMain']")
    main.get_by_text("ResNet-50", exact=True).first.wait_for()
    assert "176" in main.locator("[data-testid='stMetricValue']").first.inner_text()
    main.locator("[data-testid='stImage'] img").first.wait_for()  # the picture first
    network_graph(pg)
    no_errors(pg)
    shot(pg, "1-network")

    # 2. Devices: the memory-limited 4-GPU Malvik server
    open_page(pg, "Devices")
    choose(pg, "Start from a preset", "malvik-4gpu-limited-resnet50")
    pg.locator("[data-testid='stSidebar']").get_by_text("malvik-4gpu-limited-resnet50").first.wait_for()
    pg.frame_locator("iframe[title^='The device graph as an explorable graph']").locator(
        "body[data-drawn='1']").wait_for()
    no_errors(pg)
    shot(pg, "2-devices")

    # 3. Optimize: GA and MAP-Elites (the defaults), 2,000 evaluations each
    open_page(pg, "Optimize")
    pg.get_by_text("Genetic algorithm").first.wait_for()
    pg.get_by_text("MAP-Elites").first.wait_for()
    evals = pg.get_by_role("spinbutton", name="Evaluations per algorithm")
    evals.fill("2000")
    evals.press("Enter")
    settle(pg)
    pg.get_by_role("button", name="Start").click()
    pg.get_by_text("Progress").first.wait_for(timeout=30_000)
    pg.get_by_role("button", name="Use this placement").nth(1).wait_for(timeout=90_000)
    settle(pg)
    assert pg.get_by_text("Results").first.is_visible()
    assert pg.get_by_text("Best objective so far").first.is_visible()
    no_errors(pg)
    shot(pg, "3-optimize")

    # 4. Archive: pick the second-best elite from the list
    open_page(pg, "Archive")
    pg.get_by_text("Map of the archive").first.wait_for()
    box = pg.locator("[data-testid='stSelectbox']").filter(has=pg.get_by_text("Elite", exact=True)).first
    open_list(pg, box, nth=1)
    pg.get_by_role("option").nth(1).click()
    settle(pg)
    pg.get_by_text("Elite #2").first.wait_for()
    pg.get_by_text("Top elites").first.wait_for()
    no_errors(pg)
    shot(pg, "4-archive")
    pg.get_by_role("button", name="Use it and show its trace").click()

    # 5. Trace of that elite
    pg.get_by_role("heading", name="Trace", exact=True).first.wait_for()
    settle(pg)
    pg.get_by_text("Time per batch").first.wait_for()
    pg.get_by_text("Bottlenecks").first.wait_for()
    # the run is named by its number in the run store ("run 3 · MAP-Elites")
    pg.locator("[data-testid='stSidebar']").get_by_text(re.compile(r"elite #2 of run \d+ · MAP-Elites")).first.wait_for()
    pg.get_by_text("Highlight the critical path").first.click()
    pg.get_by_text("Critical path:").first.wait_for()
    no_errors(pg)
    shot(pg, "5-trace")

    # 6. Benchmark
    open_page(pg, "Benchmark")
    pg.get_by_text("simulated").first.wait_for()
    no_errors(pg)
    shot(pg, "6-benchmark")
    assert time.time() - t0 < 200
