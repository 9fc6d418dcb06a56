import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pytest


@pytest.fixture(autouse=True)
def _private_data_dir(tmp_path_factory, monkeypatch):
    """Every test gets its own PLACEMENT_HOME: runs, calibrations and the store never leak."""
    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path_factory.mktemp("placement_home")))


# -- real-browser tests (tests/test_browser*.py): one dashboard server per module, one fresh browser session
# (a new tab, so a new Streamlit session) per test. Skipped with the reason when Chromium or playwright is
# missing.

@pytest.fixture(scope="module")
def app_url(tmp_path_factory, request):
    import browser_util
    if browser_util.missing():  # skip before making a folder for nothing
        pytest.skip(browser_util.missing())
    yield from browser_util.serve_for_module(tmp_path_factory.mktemp("browser_home"), request)


@pytest.fixture(scope="module")
def chromium(app_url):
    from playwright.sync_api import sync_playwright
    import browser_util
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_util.CHROMIUM, args=browser_util.CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium, app_url, request):
    import browser_util
    ctx = chromium.new_context(viewport={"width": 1440, "height": 1000}, accept_downloads=True)
    pg = ctx.new_page()
    pg.set_default_timeout(30_000)
    pg.goto(app_url)
    pg.get_by_role("heading", name="Network", exact=True).first.wait_for()
    browser_util.settle(pg)
    yield pg
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:  # what the browser showed when the test failed
        try:
            browser_util.ARTIFACTS.mkdir(exist_ok=True)
            pg.screenshot(path=str(browser_util.ARTIFACTS / f"failed-{request.node.name}.png"), full_page=True)
        except Exception:
            pass
    ctx.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report
