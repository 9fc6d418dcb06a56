"""Driving the dashboard in a real browser (Debian's Chromium through Playwright), shared by the browser tests
and ``benchmarks/dashboard.py``.

``serve`` starts ``streamlit run app.py`` on a free localhost port with its own ``PLACEMENT_HOME`` (runs never
leak into the user's store); ``launch`` opens Chromium with the flags this machine needs. The helpers act as a
person does: click the sidebar link, type into a box and press Enter, click a chart, press a download button.
Never run ``playwright install``: ``bash scripts/browser-deps.sh`` installs Debian's Chromium.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def missing() -> str | None:
    """Why a browser cannot be driven here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed (.venv/bin/pip install -e '.[test]')"
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM}: run `bash scripts/browser-deps.sh`"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(home: Path, log_name: str = "streamlit.log", env: dict | None = None, extra_args=()):
    """The dashboard on a free port, storing runs under ``home``; yields its URL."""
    port = free_port()
    ARTIFACTS.mkdir(exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    with open(ARTIFACTS / log_name, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "app.py", "--server.headless", "true",
             "--server.port", str(port), "--browser.gatherUsageStats", "false",
             "--server.fileWatcherType", "none", *extra_args],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            env={**os.environ, "PLACEMENT_HOME": str(home), **(env or {})})
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.time() + 90
            while True:
                try:
                    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"the dashboard did not start (see {ARTIFACTS / log_name})")
                time.sleep(0.3)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


def serve_for_module(home: Path, request):
    """The ``app_url`` fixture's body: the module's dashboard serving ``home`` (skipped without a browser)."""
    why = missing()
    if why:
        import pytest
        pytest.skip(why)
    with serve(home, log_name=f"streamlit-{request.module.__name__}.log") as url:
        yield url


@contextlib.contextmanager
def launch(downloads: bool = True):
    """Chromium (headless) with a 1440×1000 page; yields (browser, page)."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            ctx = browser.new_context(viewport={"width": 1440, "height": 1000}, accept_downloads=downloads)
            pg = ctx.new_page()
            pg.set_default_timeout(30_000)
            yield browser, pg
        finally:
            browser.close()


def settle(pg, quiet_s: float = 0.6, timeout_s: float = 60) -> float:
    """Wait until the app has stopped running (no running indicator for ``quiet_s``); returns when it went
    quiet (time.time()), so callers can time an action to its finished rerun."""
    deadline = time.time() + timeout_s
    quiet_since = None
    while time.time() < deadline:
        running = pg.locator("[data-testid='stStatusWidget']").count() > 0
        stale = pg.locator("[data-stale='true']").count() > 0
        if running or stale:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = time.time()
        elif time.time() - quiet_since >= quiet_s:
            return quiet_since
        time.sleep(0.05)
    return time.time()


def main(pg):
    return pg.locator("[data-testid='stMain']")


def sidebar(pg):
    return pg.locator("[data-testid='stSidebar']")


def no_errors(pg) -> None:
    assert pg.locator("[data-testid='stException']").count() == 0, "an exception box is shown: " + \
        pg.locator("[data-testid='stException']").first.inner_text()[:2000]
    text = main(pg).inner_text()
    assert "Traceback" not in text and "Something went wrong" not in text, text[:3000]


def shot(pg, name: str) -> None:
    """A full-length screenshot of the page (the app scrolls inside its main container)."""
    settle(pg)
    ARTIFACTS.mkdir(exist_ok=True)
    height = pg.evaluate("() => document.querySelector('[data-testid=\"stMainBlockContainer\"]').scrollHeight")
    pg.set_viewport_size({"width": 1440, "height": max(1000, min(int(height) + 120, 6000))})
    time.sleep(0.8)  # let Plotly re-layout at the new size
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"))
    pg.set_viewport_size({"width": 1440, "height": 1000})


def open_page(pg, title: str) -> None:
    """Click the page's link in the sidebar navigation, as a person does (the session stays the same)."""
    pg.locator("[data-testid='stSidebarNavLink']", has_text=title).first.click()
    pg.get_by_role("heading", name=title, exact=True).first.wait_for()
    settle(pg)


def segment(pg, label: str, option: str) -> None:
    """Choose ``option`` of the segmented control ``label`` unless it is already chosen (a click on the chosen
    option would clear it)."""
    control = main(pg).locator("[data-testid='stButtonGroup']").filter(has=pg.get_by_text(label, exact=True)).first
    button = control.get_by_role("radio", name=option)
    button.wait_for()
    if not button.is_checked():
        button.click()
        settle(pg)


def network_graph(pg, timeout_ms: float = 30_000):
    """The Network page's explorable graph, drawn (the page opens on the picture: choose the graph first)."""
    segment(pg, "View", "explorable graph")
    frame = pg.frame_locator("iframe[title^='The network as an explorable graph']")
    frame.locator("body[data-drawn='1']").wait_for(timeout=timeout_ms)
    return frame


def open_list(pg, box, nth: int = 0, tries: int = 3) -> None:
    """Open a selectbox's list (``box``: its locator) until option ``nth`` shows: a click while the page still
    reruns (a fragment, a chart settling) can be lost, leaving the box focused and closed."""
    for attempt in range(tries):
        settle(pg)
        box.click()
        try:
            pg.get_by_role("option").nth(nth).wait_for(timeout=10_000)
            return
        except Exception:  # noqa: BLE001 - not open yet: close whatever opened and try again
            if attempt == tries - 1:
                raise
            pg.keyboard.press("Escape")


def choose(pg, label: str, option: str, scope=None) -> None:
    """Pick ``option`` in the selectbox labelled ``label``."""
    scope = scope or pg
    box = scope.locator("[data-testid='stSelectbox']").filter(has=pg.get_by_text(label, exact=True)).first
    item = pg.get_by_role("option", name=option, exact=True).first
    for attempt in range(5):  # a click during a rerun may open the list just before it is redrawn closed
        settle(pg)
        if not item.is_visible():  # a list that opened late is not clicked shut again
            box.click()
        try:
            item.wait_for(timeout=5000)
            break
        except Exception:  # noqa: BLE001 - not open: close whatever opened and try again
            if attempt == 4:
                raise
            pg.keyboard.press("Escape")
    item.click()
    settle(pg)
    if selected(pg, label, scope) != option.strip():  # the choice landed in a rerun that redrew the box: again
        box.click()
        item.wait_for(timeout=5000)
        item.click()
        settle(pg)


def selected(pg, label: str, scope=None) -> str:
    """The shown value of the selectbox labelled ``label``."""
    scope = scope or pg
    box = scope.locator("[data-testid='stSelectbox']").filter(has=pg.get_by_text(label, exact=True)).first
    return box.get_by_role("combobox").first.input_value().strip()


def type_number(pg, label: str, value, scope=None) -> None:
    """Type into the number box labelled ``label`` and press Enter."""
    scope = scope or pg
    box = scope.get_by_role("spinbutton", name=label, exact=True).first
    box.fill(str(value))
    box.press("Enter")
    settle(pg)


def number(pg, label: str, scope=None) -> str:
    scope = scope or pg
    return scope.get_by_role("spinbutton", name=label, exact=True).first.input_value()


def sidebar_text(pg) -> str:
    return sidebar(pg).inner_text()


def wait_text(pg, text: str, timeout_s: float = 30, scope=None) -> None:
    (scope or pg).get_by_text(text).first.wait_for(timeout=timeout_s * 1000)


def click_until(pg, button, text: str, scope=None, tries: int = 3, timeout_s: float = 20) -> None:
    """Click ``button`` until ``text`` shows, as a person clicks again when nothing happened: a click that lands
    while a rerun replaces the button can be lost on a loaded machine. Only for idempotent actions."""
    for k in range(tries):
        settle(pg)
        button.click()
        try:
            wait_text(pg, text, timeout_s=timeout_s, scope=scope)
            return
        except Exception:
            if k == tries - 1:
                raise


def multiselect(pg, label: str):
    """The multiselect labelled ``label``."""
    return pg.locator("[data-testid='stMultiSelect']").filter(has=pg.get_by_text(label, exact=True)).first


def gantt(pg):
    return main(pg).locator("[data-testid='stPlotlyChart']").filter(
        has=pg.locator(".ytick", has_text="(link)")).first


def on_gantt(pg, script: str, arg=None):
    """Evaluate ``script`` (a function of the Plotly graph div) on the Gantt chart once it is drawn."""
    deadline = time.time() + 20
    while True:
        try:
            plot = gantt(pg).locator(".js-plotly-plot").first
            if plot.evaluate("gd => !!(gd.layout && gd._fullData)"):
                return plot.evaluate(script, arg)
        except Exception:
            if time.time() > deadline:
                raise
        if time.time() > deadline:
            raise AssertionError("the Gantt chart was not drawn")
        time.sleep(0.2)


def download(pg, button, path: Path, timeout_s: float = 60) -> Path:
    """Press ``button`` (a locator) as a person does and save the file it delivers at ``path``."""
    with pg.expect_download(timeout=timeout_s * 1000) as d:
        button.click()
    d.value.save_as(path)
    return path


def choose_python_file(pg) -> None:
    """Pick "Python file" on the Network page's import tab and see it picked: a click on the radio while the
    page was still settling from the tab switch was lost in CI's browser, and the import then ran the
    torchvision model instead (no confirmation to give)."""
    radio = pg.get_by_role("radio", name="Python file")
    for _ in range(3):
        pg.get_by_text("Python file", exact=True).first.click()
        settle(pg)
        if radio.is_checked():
            return
    assert radio.is_checked(), "the Python file choice did not take"
