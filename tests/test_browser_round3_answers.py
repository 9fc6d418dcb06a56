"""Issue 31, items 6 and 7, in Chromium: the Trace page at 10 batches (the critical path of one chosen batch,
clickable bars inside a time window on a step too large to click whole, Perfetto's W/A/S/D keys); answers before
the user asks on Optimize, Archive, Runs and Devices. What the page should show is worked out here from the
network and the simulator."""

from __future__ import annotations

import time

import pytest
from browser_util import choose, gantt, main, no_errors, on_gantt, open_page, selected, settle, sidebar, wait_text

from placement_core import Problem, load_devices, load_network
from placement_core.analysis.pipeline import even_stages
from placement_core.simulate.model import SimSettings

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def _trace_settings(pg, batches: int, in_flight: int) -> None:
    """Open the Trace page's settings and type the batches and batches in flight, as a person does."""
    pg.get_by_text("— change").first.click()
    for key, value in (("trace_batches", batches), ("trace_in_flight", in_flight)):
        box = pg.locator(f".st-key-{key} input").first
        box.fill(str(value))
        box.press("Enter")
        settle(pg)


def _critical_bars(pg) -> int:
    """How many bars the critical-path overlay draws (its outline has 6 vertices per bar, plus joins)."""
    return on_gantt(pg, """gd => {
        const t = gd._fullData.find(t => t.name === 'critical path' && t.fill === 'toself');
        return t ? t.x.length : 0; }""")


def test_the_critical_path_of_one_batch_at_ten_batches(page):
    pg = page
    open_page(pg, "Trace")
    _trace_settings(pg, 10, 4)
    pg.locator(".st-key-trace_use_stages button").click()
    wait_text(pg, "4 pipeline stages", scope=sidebar(pg))
    settle(pg)
    g, d = load_network("resnet50"), load_devices("malvik-4gpu")
    placement = even_stages(g, d, 4)
    trace = Problem(g, d, settings=SimSettings(units=10, units_in_flight=4)).simulate(placement, trace=True).result.trace
    main(pg).get_by_text("Highlight the critical path").click()
    wait_text(pg, "Critical path of batch 10:")
    settle(pg)
    assert selected(pg, "Critical path of batch") == "batch 10 (ends the step)"
    per_batch = sum(1 for e in trace if e.batch == 9)
    drawn = _critical_bars(pg)
    # at most the batch's own events (6 outline vertices each, plus one join per row): not the whole step
    assert 0 < drawn <= 6 * per_batch + 2 * 9 and drawn < len(trace)
    choose(pg, "Critical path of batch", "batch 3")
    wait_text(pg, "Critical path of batch 3:")
    settle(pg)
    lines = on_gantt(pg, """gd => gd._fullData.filter(t => t.name === 'critical path' && t.mode === 'lines')
                                       .map(t => t.x.length)""")
    table = main(pg).locator("[data-testid='stDataFrame']").filter(has_text="share of the makespan").first
    table.scroll_into_view_if_needed()
    n = int(main(pg).get_by_text("Critical path of batch 3:").first.inner_text().split(":")[1].split()[0])
    assert lines == [2 * n]
    last = max(e.end for e in trace if e.batch == 2)
    x_end = on_gantt(pg, """gd => Math.max(...gd._fullData.find(t => t.name === 'critical path'
                                                             && t.mode === 'lines').x)""")
    assert x_end == pytest.approx(last * 1e3, rel=1e-5)  # the chain ends when batch 3 is done
    no_errors(pg)


def _x_range(pg) -> list[float]:
    return on_gantt(pg, "gd => gd._fullLayout.xaxis.range.map(Number)")


def test_keyboard_zoom_and_pan_on_the_gantt_chart(page):
    pg = page
    open_page(pg, "Trace")
    on_gantt(pg, "gd => true")
    settle(pg)
    lo, hi = _x_range(pg)
    main(pg).get_by_role("heading", name="Trace", exact=True).first.click()  # focus the page, not a field
    pg.keyboard.press("w")
    deadline = time.time() + 10
    while _x_range(pg) == [lo, hi] and time.time() < deadline:
        time.sleep(0.1)
    a, b = _x_range(pg)
    assert b - a == pytest.approx(0.8 * (hi - lo), rel=1e-6)  # zoomed in around the middle
    assert (a + b) / 2 == pytest.approx((lo + hi) / 2, rel=1e-6)
    pg.keyboard.press("d")
    time.sleep(0.5)
    c, e = _x_range(pg)
    assert c - a == pytest.approx(0.2 * (b - a), rel=1e-6) and e - c == pytest.approx(b - a, rel=1e-6)
    pg.keyboard.press("a")
    pg.keyboard.press("s")
    time.sleep(0.5)
    f, h = _x_range(pg)
    assert f == pytest.approx(lo, rel=1e-6, abs=1e-6) and h == pytest.approx(hi, rel=1e-6)
    box = pg.get_by_role("textbox", name="Find ops by name")  # typing in a field zooms nothing
    box.fill("")
    box.type("sw")
    time.sleep(0.5)
    assert _x_range(pg) == pytest.approx([f, h])
    no_errors(pg)


def test_a_large_step_has_clickable_bars_inside_a_dragged_window(page):
    pg = page
    open_page(pg, "Trace")
    _trace_settings(pg, 14, 1)
    wait_text(pg, "to click bars, choose a time window")
    assert on_gantt(pg, "gd => gd._fullData.filter(t => t.type === 'bar').length") == 0
    chart = gantt(pg)
    chart.scroll_into_view_if_needed()
    chart.hover()
    chart.locator("[data-title='Box Select']").click()
    box = chart.locator(".nsewdrag").first.bounding_box()
    x0, x1, ym = box["x"] + 0.40 * box["width"], box["x"] + 0.43 * box["width"], box["y"] + 0.5 * box["height"]
    pg.mouse.move(x0, ym)
    pg.mouse.down()
    pg.mouse.move((x0 + x1) / 2, ym, steps=3)
    pg.mouse.move(x1, ym, steps=3)
    pg.mouse.up()
    wait_text(pg, "the bars inside the time window are clickable")
    settle(pg)
    n = on_gantt(pg, "gd => gd._fullData.filter(t => t.type === 'bar').reduce((s, t) => s + t.x.length, 0)")
    assert 0 < n <= 6000
    # zoom to the window's first bar on gpu0 and click it: its op is followed
    target = on_gantt(pg, """gd => { const t = gd._fullData.find(t => t.type === 'bar' && t.hovertext.length);
        let k = 0; for (let i = 1; i < t.x.length; i++) if (t.x[i] > t.x[k]) k = i;
        return [t.base[k], t.base[k] + t.x[k], t.hovertext[k]]; }""")
    on_gantt(pg, "(gd, r) => Plotly.relayout(gd, {'xaxis.range': r, dragmode: 'pan'})",
             [target[0] - 0.2 * (target[1] - target[0]), target[1] + 0.2 * (target[1] - target[0])])
    settle(pg)
    plot = gantt(pg).locator(".js-plotly-plot").first
    rel = plot.evaluate("""(gd, x) => { const t = gd._fullData.find(t => t.type === 'bar' && t.hovertext.length);
        const k = t.base.findIndex(b => b === x); const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
        return [xa._offset + xa.l2p(t.base[k] + t.x[k] / 2), ya._offset + ya.l2p(t.y[k])]; }""", target[0])
    bb = plot.bounding_box()
    pg.mouse.click(bb["x"] + rel[0], bb["y"] + rel[1])
    op = target[2].split("</b>")[0].replace("<b>", "")
    deadline = time.time() + 30
    while selected(pg, "Follow an op (or click its bar)") != op and time.time() < deadline:
        time.sleep(0.2)
    assert selected(pg, "Follow an op (or click its bar)") == op
    no_errors(pg)
