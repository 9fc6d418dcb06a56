import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# The app's `dashboard` package, imported before any test module puts benchmarks/ first on the path: that
# folder holds the dashboard.py benchmark script, which `from dashboard import ...` would otherwise find in a
# run whose first test module did so (test_bad_input.py before test_app_cluster.py).
import dashboard  # noqa: E402,F401

import pytest
from hypothesis import settings

# Two tiers (README, "Tests"): `bash scripts/test.sh` runs everything, as CI does; `bash scripts/test.sh --fast`
# leaves out what is marked slow and runs the property tests with the "dev" Hypothesis profile. Every kind of
# heavy test has its own marker, and each of them makes a test slow.
HEAVY = {
    "browser": "drives the dashboard in a real Chromium (tests/test_browser*.py)",
    "workers": "starts worker processes: torch ranks, model imports in a subprocess, a killed CLI run",
    "dask": "starts a Dask cluster on this machine",
    "training": "trains a policy or a learned cost model",
    "fuzz": "a large fuzz campaign (FUZZ_EXAMPLES, FUZZ_APP_EXAMPLES, FUZZ_CLI_EXAMPLES size it)",
}
BROWSER_FIXTURES = {"page", "app_url", "chromium"}
# Module-scoped fixtures that do heavy work once for the tests of their module: each test that uses one is
# as heavy as the fixture (the first to run pays for it), whatever its own time.
HEAVY_FIXTURES = {("test_torch_benchmark", "two_ranks"): "workers", ("test_torch_calibrate", "calibration"): "workers",
                  ("test_torch_sharding", "runs"): "workers", ("test_pipelined_benchmark", "runs"): "workers",
                  ("test_parallel", "cluster"): "dask", ("test_learned_cli", "trained"): "training"}

# "ci" is Hypothesis' own default; "dev" tries a tenth of each property test's examples (at least 10): the
# tests that set max_examples themselves ask tests/helpers.examples for it, which reads the profile.
settings.register_profile("ci", settings())
settings.register_profile("dev", settings(max_examples=10))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: left out of the fast tier (scripts/test.sh --fast)")
    for name, what in HEAVY.items():
        config.addinivalue_line("markers", f"{name}: {what}; implies slow")


def pytest_collection_modifyitems(config, items):
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if BROWSER_FIXTURES & used and not item.get_closest_marker("browser"):
            item.add_marker(pytest.mark.browser)
        module = item.module.__name__.rpartition(".")[2] if getattr(item, "module", None) else ""
        for (where, fixture), marker in HEAVY_FIXTURES.items():
            if module == where and fixture in used and not item.get_closest_marker(marker):
                item.add_marker(getattr(pytest.mark, marker))
        if any(item.get_closest_marker(name) for name in HEAVY) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _private_data_dir(tmp_path_factory, monkeypatch):
    """Every test gets its own PLACEMENT_HOME: runs, calibrations and the store never leak."""
    monkeypatch.setenv("PLACEMENT_HOME", str(tmp_path_factory.mktemp("placement_home")))


# -- real-browser tests (tests/test_browser*.py): one dashboard server per module, one fresh browser session
# (a new tab, so a new Streamlit session) per test. Skipped with the reason when Chromium or playwright is
# missing.

@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """The PLACEMENT_HOME the module's dashboard serves; a module overrides it to serve stored runs or policies."""
    return tmp_path_factory.mktemp("browser_home")


@pytest.fixture(scope="module")
def app_url(home, request):
    import browser_util
    yield from browser_util.serve_for_module(home, request)


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
