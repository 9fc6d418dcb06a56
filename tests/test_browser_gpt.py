"""A GPT by its shape in Chromium: build one on the Network page, see its numbers, visit the Trace and come
back to it; a shape that does not divide says so and keeps the network."""

from __future__ import annotations

import pytest

import browser_util
from browser_util import main, no_errors, open_page, settle, sidebar_text, wait_text

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def app_url(tmp_path_factory, request):
    yield from browser_util.serve_for_module(tmp_path_factory.mktemp("gpt_home"), request)


def _gpt_tab(pg):
    pg.get_by_role("tab", name="A GPT by its shape").click()
    settle(pg)


def test_build_a_gpt_visit_the_trace_and_come_back(page):
    pg = page
    open_page(pg, "Network")
    _gpt_tab(pg)
    for label, value in (("Layers", 12), ("Hidden size", 768), ("Attention heads", 12), ("Sequence length", 1024),
                         ("Sequences per batch", 4)):
        box = main(pg).get_by_role("spinbutton", name=label, exact=True).first
        box.fill(str(value))  # inside a form: nothing reruns until Build
    main(pg).get_by_role("button", name="Build this GPT").click()
    settle(pg)
    wait_text(pg, "GPT, 0.124 B parameters", scope=browser_util.sidebar(pg))
    text = main(pg).inner_text()
    assert "149" in text and "326 MB" in text  # ops; 124,439,808 bf16 weights and the tied copy
    open_page(pg, "Trace")
    no_errors(pg)
    open_page(pg, "Network")
    assert "GPT, 0.124 B parameters" in sidebar_text(pg)
    assert "326 MB" in main(pg).inner_text()
    no_errors(pg)


def test_a_shape_that_does_not_divide_is_refused(page):
    pg = page
    open_page(pg, "Network")
    _gpt_tab(pg)
    main(pg).get_by_role("spinbutton", name="Hidden size", exact=True).first.fill("1000")
    main(pg).get_by_role("button", name="Build this GPT").click()
    settle(pg)
    wait_text(pg, "hidden=1000 is not a multiple of heads=16")
    assert "is still loaded" in main(pg).inner_text()
    assert main(pg).locator("[data-testid='stException']").count() == 0
