"""The Pipeline page's presentation mode on a projector, in Chromium: at 1024 × 768 and 1280 × 720 (the sidebar
open) every element of the page and of the lecture lies inside the window, no number, label or toggle is cut
short (an element's text wider than its box: scrollWidth > clientWidth), the memory bars' labels are whole and
legible, every chart fits the window's height, and no toolbar covers a title (Plotly's over a chart's title,
Streamlit's header over the page's).

With PLACEMENT_DOC_SCREENSHOTS=1 the two sizes' screenshots go to docs/img/projector-<w>x<h>.png (docs/dashboard.md
shows them).
"""

from __future__ import annotations

import os
import time

import pytest
from browser_util import ARTIFACTS, ROOT, main, no_errors, open_page, settle, wait_text

pytestmark = [pytest.mark.browser, pytest.mark.timeout(400)]

# Elements a person reads or clicks: each must lie inside the window, whole.
PARTS = ("stMetric", "stButton", "stCheckbox", "stNumberInput", "stRadio", "stMultiSelect", "stPlotlyChart",
         "stDataFrame", "stAlert", "stExpander", "stHeading", "stCaption", "stMarkdown")

# Problems on the page as drawn: [what, text] pairs.
PROBLEMS = """(parts) => {
  const out = [], vw = window.innerWidth;
  const main = document.querySelector("[data-testid='stMain']");
  for (const part of parts) {
    for (const e of main.querySelectorAll(`[data-testid='${part}']`)) {
      const r = e.getBoundingClientRect();
      if (r.width === 0) continue;  // not drawn (a closed expander's content)
      if (r.left < -0.5 || r.right > vw + 0.5)
        out.push(["outside the window", `${part} ${e.innerText.slice(0, 40)} ${r.left.toFixed(0)}–${r.right.toFixed(0)}`]);
    }
  }
  // text cut short: any element inside a metric or a widget's label whose text is wider than its box
  for (const e of main.querySelectorAll("[data-testid='stMetricValue'] *, [data-testid='stMetricValue'], "
      + "[data-testid='stMetricLabel'] *, [data-testid='stWidgetLabel'] *, [data-testid='stMetricDelta'] *")) {
    if (e.clientWidth > 0 && e.scrollWidth > e.clientWidth + 1)
      out.push(["cut short", `${e.innerText.slice(0, 60)} (${e.scrollWidth} > ${e.clientWidth} px)`]);
  }
  return out;
}"""

CHART = r"""(gd) => {
  const out = [], box = gd.getBoundingClientRect();
  const header = document.querySelector("[data-testid='stHeader']");
  const room = window.innerHeight - (header ? header.getBoundingClientRect().height : 0);
  const title = (gd.querySelector('.gtitle') || {}).textContent || '';
  if (/…|\.\.\./.test(title)) out.push(["title cut short", title]);
  if (box.height > room + 0.5) out.push(["taller than the window", `${title} ${box.height.toFixed(0)} > ${room.toFixed(0)}`]);
  const t = gd.querySelector('.gtitle'), bar = gd.querySelector('.modebar-container .modebar');
  if (t && bar) {
    const a = t.getBoundingClientRect(), b = bar.getBoundingClientRect();
    if (b.width > 0 && a.right > b.left && b.right > a.left && a.bottom > b.top && b.bottom > a.top)
      out.push(["title under the toolbar", title]);
  }
  if (/Peak memory per stage$/.test(title)) {  // the bars' labels: whole, inside the chart, legible
    for (const s of gd.querySelectorAll('.bartext')) {
      const r = s.getBoundingClientRect();
      if (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.height < 11)
        out.push(["memory label clipped", `${s.textContent} ${r.left.toFixed(0)}–${r.right.toFixed(0)} in `
                  + `${box.left.toFixed(0)}–${box.right.toFixed(0)}, ${r.height.toFixed(0)} px high`]);
    }
  }
  return out;
}"""


def _charts_problems(pg) -> list:
    """Each chart scrolled into view (Streamlit draws a chart when it is shown), then checked."""
    problems = []
    charts = main(pg).locator("[data-testid='stPlotlyChart']")
    for i in range(charts.count()):
        chart = charts.nth(i)
        if not chart.evaluate("e => { const d = e.closest('details'); return !d || d.open; }"):
            continue  # inside a closed expander: not shown
        chart.scroll_into_view_if_needed()
        plot = chart.locator(".js-plotly-plot").first
        plot.wait_for()
        deadline = time.time() + 20
        while not plot.evaluate("gd => !!(gd._fullLayout && gd.querySelector('.main-svg'))"):
            assert time.time() < deadline, "a chart was not drawn"
            time.sleep(0.2)
        problems += plot.evaluate(CHART)
    return problems


def _keep(pg, w: int, h: int) -> None:
    """The first schedule's timeline and numbers on screen, as the room sees them."""
    first = main(pg).locator("[data-testid='stVerticalBlockBorderWrapper'], [data-testid='stVerticalBlock']").filter(
        has=pg.locator(".gtitle", has_text="GPipe · step")).last
    first.scroll_into_view_if_needed()
    pg.evaluate("""() => { const t = [...document.querySelectorAll('.gtitle')].find(e => /GPipe · step/.test(e.textContent));
        t.closest('.stPlotlyChart, [data-testid="stPlotlyChart"]').scrollIntoView({block: 'start'});
        const main = document.querySelector("[data-testid='stMain']"); main.scrollBy(0, -70); }""")
    time.sleep(1.0)
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"projector-{w}x{h}.png"
    pg.screenshot(path=str(path))
    if os.environ.get("PLACEMENT_DOC_SCREENSHOTS") == "1":
        from PIL import Image
        out = ROOT / "docs" / "img" / path.name
        Image.open(path).convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(out, optimize=True)


@pytest.mark.parametrize("w, h", [(1024, 768), (1280, 720)])
def test_the_presentation_mode_fits_a_projector(page, w, h):
    pg = page
    open_page(pg, "Pipeline")
    pg.get_by_text("Presentation mode", exact=True).click()
    settle(pg)
    pg.set_viewport_size({"width": w, "height": h})
    time.sleep(1.0)  # Plotly re-lays out at the new size
    wait_text(pg, "4 stage(s), 4 micro-batches of 32")
    no_errors(pg)
    # the page's title is clear of Streamlit's header (its toolbar) at the top of the page
    title = main(pg).get_by_role("heading", name="Pipeline", exact=True).first.bounding_box()
    header = pg.locator("[data-testid='stHeader']").first.bounding_box()
    assert title["y"] >= header["y"] + header["height"], (title, header)
    problems = pg.evaluate(PROBLEMS, list(PARTS)) + _charts_problems(pg)
    assert not problems, problems
    _keep(pg, w, h)
    # every stage's peak memory, in its tab: whole labels on the projector too
    pg.get_by_role("tab", name="Numbers and memory").click()
    settle(pg)
    main(pg).locator(".gtitle", has_text="Peak memory per stage").first.wait_for()
    no_errors(pg)
    problems = pg.evaluate(PROBLEMS, list(PARTS)) + _charts_problems(pg)
    assert not problems, problems
    # the lecture, opened and checked the same way
    pg.get_by_text("Teach it: p equal stages, no network").click()
    settle(pg)
    wait_text(pg, "Step (simulated)")
    no_errors(pg)
    problems = pg.evaluate(PROBLEMS, list(PARTS)) + _charts_problems(pg)
    assert not problems, problems


def test_transfers_that_dominate_are_said_with_the_switch_right_there(page):
    """Ideal off on ResNet-50 over PCIe: one line says transfers dominate, and its button turns Ideal on."""
    pg = page
    open_page(pg, "Pipeline")
    wait_text(pg, "Transfers dominate", scope=main(pg))
    switch = pg.get_by_role("switch", name="Ideal pipeline")
    assert not switch.is_checked()
    line = main(pg).locator("[data-testid='stAlert']").filter(has_text="Transfers dominate").first
    button = main(pg).get_by_role("button", name="Free transfers (Ideal pipeline)")
    a, b = line.bounding_box(), button.bounding_box()
    assert abs((a["y"] + a["height"] / 2) - (b["y"] + b["height"] / 2)) < a["height"]  # side by side, one row
    button.click()
    settle(pg)
    wait_text(pg, "· ideal pipeline (free transfers and weight updates)", scope=main(pg))
    assert switch.is_checked()
    assert main(pg).get_by_text("Transfers dominate").count() == 0
    no_errors(pg)
