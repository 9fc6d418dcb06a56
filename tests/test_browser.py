"""The whole workflow in a real browser (Debian's Chromium driven by Playwright).

Start the dashboard, choose ResNet-50 and the memory-limited 4-GPU server, run the GA and MAP-Elites for
2,000 evaluations each, watch them finish, pick an elite in the archive, open its trace and the benchmark
page. Every step asserts visible text and that no exception box appeared; a screenshot of each page goes to
test-artifacts/.

Skipped (with the reason) when Chromium or the playwright package is missing: `bash scripts/browser-deps.sh`
installs Chromium; `pip install -e ".[app,test]"` installs playwright. Never run `playwright install`.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]

playwright_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium at {CHROMIUM}: run `bash scripts/browser-deps.sh`", allow_module_level=True)

pytestmark = pytest.mark.timeout(240)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def app_url():
    port = _free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / "streamlit.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true", "--server.port", str(port),
         "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://localhost:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                pytest.fail(f"the dashboard did not start (see {ARTIFACTS / 'streamlit.log'})")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@pytest.fixture(scope="module")
def page(app_url):
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        pg = browser.new_page(viewport={"width": 1440, "height": 1000})
        pg.set_default_timeout(30_000)
        pg.goto(app_url)
        yield pg
        browser.close()


def settle(pg, quiet_s: float = 0.8, timeout_s: float = 40) -> None:
    """Wait until the app has stopped running (no running indicator for ``quiet_s``)."""
    deadline = time.time() + timeout_s
    quiet_since = None
    while time.time() < deadline:
        running = pg.locator("[data-testid='stStatusWidget']").count() > 0
        if running:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.time()
        elif time.time() - quiet_since >= quiet_s:
            return
        time.sleep(0.1)


def no_errors(pg) -> None:
    assert pg.locator("[data-testid='stException']").count() == 0, "an exception box is shown"
    text = pg.locator("[data-testid='stMain']").inner_text()
    assert "Traceback" not in text and "Something went wrong" not in text, text[:2000]


def shot(pg, name: str) -> None:
    """A full-length screenshot of the page (the app scrolls inside its main container)."""
    settle(pg)
    height = pg.evaluate("() => document.querySelector('[data-testid=\"stMainBlockContainer\"]').scrollHeight")
    pg.set_viewport_size({"width": 1440, "height": max(1000, min(int(height) + 120, 6000))})
    time.sleep(0.8)  # let Plotly re-layout at the new size
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"))
    pg.set_viewport_size({"width": 1440, "height": 1000})


def open_page(pg, title: str) -> None:
    pg.locator("[data-testid='stSidebarNavLink']", has_text=title).first.click()
    pg.get_by_role("heading", name=title, exact=True).first.wait_for()
    settle(pg)


def choose(pg, label: str, option: str) -> None:
    box = pg.locator("[data-testid='stSelectbox']").filter(has=pg.get_by_text(label, exact=True)).first
    box.click()
    pg.get_by_role("option", name=option).first.click()
    settle(pg)


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
    pg.locator("[data-testid='stPlotlyChart']").first.wait_for()
    no_errors(pg)
    shot(pg, "1-network")

    # 2. Devices: the memory-limited 4-GPU Malvik server
    open_page(pg, "Devices")
    choose(pg, "Start from a preset", "malvik-4gpu-limited-resnet50")
    pg.locator("[data-testid='stSidebar']").get_by_text("malvik-4gpu-limited-resnet50").first.wait_for()
    pg.get_by_text("Which channel carries a transfer").first.wait_for()
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
    box.click()
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
    pg.locator("[data-testid='stSidebar']").get_by_text("elite #2 of MAP-Elites").first.wait_for()
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
