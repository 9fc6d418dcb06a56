"""The Pipeline page in Chromium, as a lecturer uses it: set p, m and V, pick the schedules, leave and come back,
switch on the presentation mode, open the toy pipeline and play its animation (and jump with its slider).

Screenshots go to test-artifacts/; with PLACEMENT_DOC_SCREENSHOTS=1 they are also written to docs/img/ (the
pictures docs/dashboard.md and docs/pipeline.md show).
"""

from __future__ import annotations

import os
import time

import pytest
from browser_util import ROOT, main, no_errors, number, open_page, settle, shot, type_number, wait_text

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def _schedules(pg) -> list[str]:
    box = pg.locator("[data-testid='stMultiSelect']").filter(has=pg.get_by_text("Schedules", exact=True)).first
    tags = box.locator(".react-aria-ComboBox [data-tag]")
    return [tags.nth(i).get_attribute("aria-label") for i in range(tags.count())]


def _gantt_titles(pg) -> list[str]:
    return [t for t in main(pg).locator(".gtitle").all_text_contents() if "· step" in t]


def _slider_value(pg, chart) -> str:
    return chart.locator("text.slider-label").first.text_content()


def _keep(pg, name: str, first, last) -> None:
    """With PLACEMENT_DOC_SCREENSHOTS=1, the part of the page from ``first`` to ``last`` (locators) as
    docs/img/NAME.png: the window made as tall as the page (the app scrolls inside it), then clipped."""
    if os.environ.get("PLACEMENT_DOC_SCREENSHOTS") != "1":
        return
    (ROOT / "docs" / "img").mkdir(exist_ok=True)
    height = pg.evaluate("() => document.querySelector('[data-testid=\"stMainBlockContainer\"]').scrollHeight")
    pg.set_viewport_size({"width": 1440, "height": min(int(height) + 120, 9000)})
    time.sleep(1.5)  # Plotly re-lays out at the new size
    a, b = first.bounding_box(), last.bounding_box()
    top, bottom = a["y"] - 10, b["y"] + b["height"] + 10
    box = pg.locator("[data-testid='stMainBlockContainer']").bounding_box()
    left, right = box["x"], box["x"] + box["width"]
    pg.screenshot(path=str(ROOT / "docs" / "img" / f"{name}.png"),
                  clip={"x": left, "y": top, "width": right - left, "height": bottom - top})
    pg.set_viewport_size({"width": 1440, "height": 1000})


def test_a_lecture_on_pipeline_schedules(page):
    pg = page
    open_page(pg, "Pipeline")
    no_errors(pg)
    type_number(pg, "Stages p", 3)
    type_number(pg, "Micro-batches m", 8)
    type_number(pg, "Virtual stages V", 3)
    box = pg.locator("[data-testid='stMultiSelect']").filter(has=pg.get_by_text("Schedules", exact=True)).first
    box.locator(".react-aria-ComboBox").get_by_role("button", name="Remove ZB-H1").click()
    settle(pg)
    wait_text(pg, "3 stage(s), 8 micro-batches of 16 · V = 3 chunks per device for interleaved 1F1B")
    no_errors(pg)
    assert _schedules(pg) == ["GPipe", "1F1B", "Interleaved 1F1B"]
    titles = _gantt_titles(pg)
    assert [t.split(" · ")[0] for t in titles] == ["GPipe", "1F1B (PipeDream-flush)", "Interleaved 1F1B"]
    shot(pg, "pipeline-schedules")
    _keep(pg, "pipeline-schedules", main(pg).get_by_text("3 stage(s), 8 micro-batches of 16").first,
          main(pg).get_by_text("Every chart has the same time axis").first)
    # on PCIe every chunk boundary is a transfer: the page splits the bubble to show it, in its tab
    pg.get_by_role("tab", name="Where the bubble comes from").click()
    settle(pg)
    main(pg).locator(".gtitle", has_text="Where the bubble comes from").first.wait_for()
    assert not _gantt_titles(pg)  # one tab drawn at a time
    no_errors(pg)
    # in the ideal pipeline (free transfers) interleaving cuts the bubble
    pg.get_by_text("Ideal pipeline", exact=True).click()
    settle(pg)
    wait_text(pg, "· ideal pipeline (free transfers and weight updates)")
    # nothing left to split: that tab goes and the timelines are shown
    assert pg.get_by_role("tab", name="Where the bubble comes from").count() == 0
    main(pg).locator(".gtitle", has_text="GPipe · step").first.wait_for()
    bubble = {t.split(" · ")[0]: float(t.rsplit("bubble ", 1)[1].rstrip("%")) for t in _gantt_titles(pg)}
    assert bubble["Interleaved 1F1B"] < bubble["1F1B (PipeDream-flush)"] <= bubble["GPipe"] + 1e-9

    open_page(pg, "Trace")
    open_page(pg, "Pipeline")
    no_errors(pg)
    assert (number(pg, "Stages p"), number(pg, "Micro-batches m"), number(pg, "Virtual stages V")) == ("3", "8", "3")
    assert _schedules(pg) == ["GPipe", "1F1B", "Interleaved 1F1B"]
    assert pg.get_by_role("switch", name="Ideal pipeline").is_checked()
    wait_text(pg, "3 stage(s), 8 micro-batches of 16 · ideal pipeline")

    # presentation mode: larger type in the charts
    def title_size():
        title = main(pg).locator(".gtitle").filter(has_text="GPipe · step").first
        return title.evaluate("e => parseFloat(getComputedStyle(e).fontSize)")
    size_before = title_size()
    pg.get_by_text("Presentation mode", exact=True).click()
    settle(pg)
    size_after = title_size()
    assert size_after > size_before

    # the toy pipeline: interleaved, played frame by frame
    pg.get_by_text("Teach it: p equal stages, no network").click()
    settle(pg)
    pg.get_by_text("Interleaved 1F1B", exact=True).last.click()
    settle(pg)
    no_errors(pg)
    chart = main(pg).locator("[data-testid='stPlotlyChart']").filter(has=pg.locator("text.slider-label")).first
    chart.scroll_into_view_if_needed()
    end = _slider_value(pg, chart)
    assert end == "time: 28.5 ms"  # the whole step: 8·3 ms + 3·3 ms / 2 (p = 4, m = 8, V = 2)
    chart.locator(".updatemenu-button").filter(has_text="Play").click()
    seen = set()
    for _ in range(40):
        time.sleep(0.25)
        seen.add(_slider_value(pg, chart))
    assert len(seen) > 5  # the cursor moved through the step
    time.sleep(4)
    assert _slider_value(pg, chart) == end  # and stopped at its end
    # a click on the slider's tick jumps to that instant
    ticks = chart.locator("text.slider-label")
    labels = [t for t in ticks.all_text_contents() if not t.startswith("time:")]
    middle = labels[len(labels) // 2]
    box = ticks.filter(has_text=middle).first.bounding_box()  # a person clicks the slider under that label
    pg.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    time.sleep(0.5)
    assert _slider_value(pg, chart) == f"time: {middle} ms"
    shot(pg, "pipeline-lecture")
    _keep(pg, "pipeline-lecture", main(pg).get_by_text("Schedule", exact=True).last, chart)
    no_errors(pg)
