"""Issue 31, items 6 and 7, in Chromium: the Trace page at 10 batches (the critical path of one chosen batch,
clickable bars inside a time window on a step too large to click whole, Perfetto's W/A/S/D keys); answers before
the user asks on Optimize, Archive, Runs and Devices. What the page should show is worked out here from the
network and the simulator."""

from __future__ import annotations

import time

import pytest
from browser_util import (choose, click_until, gantt, main, no_errors, on_gantt, open_page, selected, settle, sidebar,
                          wait_text)

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
    _gantt_ready(pg)
    _trace_settings(pg, 10, 4)
    click_until(pg, pg.locator(".st-key-trace_use_stages button"), "4 pipeline stages", scope=sidebar(pg))
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


def _gantt_ready(pg) -> None:
    """Wait for the Gantt chart (a first Trace page on a loaded machine takes a while to simulate and draw)."""
    gantt(pg).locator(".js-plotly-plot").first.wait_for(timeout=120_000)
    settle(pg)


def _x_range(pg) -> list[float]:
    return on_gantt(pg, "gd => gd._fullLayout.xaxis.range.map(Number)")


def test_keyboard_zoom_and_pan_on_the_gantt_chart(page):
    pg = page
    open_page(pg, "Trace")
    _gantt_ready(pg)
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
    _gantt_ready(pg)
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


# -- Optimize: nothing beat the seed ---------------------------------------------------------------------

def _algorithms(pg, keep: list[str]) -> None:
    """Make the Algorithms box hold exactly ``keep`` (titles), as a person does: remove the others, add."""
    box = main(pg).locator("[data-testid='stMultiSelect']").filter(has=pg.get_by_text("Algorithms", exact=True)).first
    tags = box.locator(".react-aria-ComboBox [data-tag]")
    tags.first.wait_for()
    settle(pg)
    for name in [tags.nth(i).get_attribute("aria-label") for i in range(tags.count())]:
        if name not in keep:
            box.locator(".react-aria-ComboBox").get_by_role("button", name=f"Remove {name}", exact=True).click()
            settle(pg)
    for name in keep:
        if not box.locator(f".react-aria-ComboBox [data-tag][aria-label='{name}']").count():
            box.click()
            pg.keyboard.type(name)
            pg.get_by_role("option", name=name, exact=True).first.click()
            pg.keyboard.press("Escape")
            settle(pg)


def test_nothing_beat_the_seed_is_said_and_a_setup_where_placement_matters_is_one_click_away(page):
    from browser_util import type_number
    pg = page
    open_page(pg, "Optimize")
    _algorithms(pg, ["Genetic algorithm"])
    type_number(pg, "Evaluations per algorithm", 300)
    main(pg).get_by_role("button", name="Start").click()
    wait_text(pg, "Nothing beat the seed", timeout_s=120)
    settle(pg)
    body = main(pg).inner_text()
    assert "after 300 evaluations" in body and "one GPU is optimal" in body
    assert "91% of the network's compute lies on one chain of dependent ops" in body
    main(pg).get_by_role("button", name="gpt2 on malvik-4gpu").click()
    wait_text(pg, "gpt2", scope=sidebar(pg))
    settle(pg)
    assert "Network · gpt2" in sidebar(pg).inner_text().replace("\n", " ")
    assert "all on gpu0" in sidebar(pg).inner_text()
    no_errors(pg)


# -- Runs: evaluations/s, wall time, best, group by configuration ---------------------------------------

def test_runs_columns_and_group_by_configuration(page, home):
    from placement_core.store import RunStore
    from placement_core.store.recording import start_run

    problem = Problem(load_network("alexnet"), load_devices("malvik"))
    with RunStore(home) as store:
        ids = {(a, sd): start_run(store, problem, a, evaluations=200, seed=sd)[0]
               for a, sd in (("ga", 1), ("ga", 2), ("map-elites", 1))}
        records = {r.id: r for r in store.runs()}
        sizes = store.archive_sizes()
    pg = page
    # the table draws only the columns in view: wide enough for all of them whatever the other runs' names
    pg.set_viewport_size({"width": 2560, "height": 1000})
    open_page(pg, "Runs")
    table = main(pg).locator("[data-testid='stDataFrame']").first
    table.wait_for()
    heads = table.locator("[role='columnheader']").all_inner_texts()
    for name in ("best objective (ms)", "evaluations/s", "wall time (s)", "elites", "seed"):
        assert name in heads, heads
    col = {h: k for k, h in enumerate(heads)}

    def cell(row: int, name: str) -> str:
        return table.locator(f"#glide-cell-{col[name]}-{row}").text_content().strip()

    shown = {int(cell(r, "run")): r for r in range(len(records))}
    for (algorithm, seed), i in ids.items():
        r = shown[i]
        assert float(cell(r, "evaluations/s")) == pytest.approx(200 / records[i].wall_s, rel=1e-6)
        assert float(cell(r, "wall time (s)")) == pytest.approx(records[i].wall_s, rel=1e-6)
        assert cell(r, "elites") == (str(sizes[i]) if algorithm == "map-elites" else "")
    groups = main(pg).locator("[data-testid='stDataFrame']").first
    switch = pg.locator(".st-key-runs_grouped input[type='checkbox']").first
    for _ in range(5):  # a click while the page still reruns can be lost: click while the switch reads off
        settle(pg)
        if switch.is_checked():
            break
        main(pg).get_by_text("Group by configuration").click()
        settle(pg)
    assert switch.is_checked()
    deadline = time.time() + 30
    while (gheads := groups.locator("[role='columnheader']").all_inner_texts())[:1] != ["configuration"] \
            and time.time() < deadline:
        time.sleep(0.2)
    assert gheads[:4] == ["configuration", "runs", "seeds", "best objective (ms)"]
    runs_col = gheads.index("runs")
    counts = sorted(int(groups.locator(f"#glide-cell-{runs_col}-{r}").text_content()) for r in range(2))
    assert counts == [1, 2]  # GA with seeds 1 and 2 together, MAP-Elites alone
    no_errors(pg)


# -- Devices: labels legible, never crossed by an edge -----------------------------------------------------

GEOMETRY = """() => { const net = window.graphView.network, s = net.getScale(), pos = net.getPositions();
  const out = {nodes: {}, crossings: [], overlaps: []}, boxes = {};
  for (const id of Object.keys(pos)) {
    const n = net.body.nodes[id], bb = net.getBoundingBox(id);
    boxes[id] = [bb.left, bb.top, bb.right, bb.bottom];
    out.nodes[id] = {px: n.labelModule.fontOptions.size * s, shape: n.options.shape}; }
  function hits(x1, y1, x2, y2, b) {  // does the segment pass through the box (Liang-Barsky)
    let t0 = 0, t1 = 1; const dx = x2 - x1, dy = y2 - y1, p = [-dx, dx, -dy, dy],
          q = [x1 - b[0], b[2] - x1, y1 - b[1], b[3] - y1];
    for (let i = 0; i < 4; i++) {
      if (p[i] === 0) { if (q[i] < 0) return false; continue; }
      const r = q[i] / p[i];
      if (p[i] < 0) { if (r > t1) return false; t0 = Math.max(t0, r); } else { if (r < t0) return false; t1 = Math.min(t1, r); } }
    return true; }
  for (const e of Object.values(net.body.edges)) {  // a label outside its node's opaque box can be crossed
    const a = pos[e.fromId], b = pos[e.toId];
    for (const [id, bx] of Object.entries(boxes))
      if (out.nodes[id].shape !== "box" && hits(a.x, a.y, b.x, b.y, [bx[0] + 1, bx[1] + 1, bx[2] - 1, bx[3] - 1]))
        out.crossings.push([e.fromId, e.toId, id]); }
  const ids = Object.keys(boxes);
  for (let i = 0; i < ids.length; i++) for (let j = i + 1; j < ids.length; j++) {
    const p = boxes[ids[i]], q = boxes[ids[j]];
    if (p[0] < q[2] && q[0] < p[2] && p[1] < q[3] && q[1] < p[3]) out.overlaps.push([ids[i], ids[j]]); }
  return out; }"""


@pytest.mark.parametrize("preset", ["malvik-4gpu", "nvlink-8gpu"])
def test_device_graph_labels_are_at_least_12_px_and_never_crossed_by_an_edge(page, preset):
    pg = page
    open_page(pg, "Devices")
    if preset != "malvik-4gpu":
        choose(pg, "Start from a preset", preset)
    frame = pg.frame_locator("iframe[title^='The device graph as an explorable graph']")
    frame.locator("body[data-drawn='1']").wait_for(timeout=60_000)
    g = frame.locator("body").evaluate(GEOMETRY.replace("() =>", "(_) =>"))
    d = load_devices(preset)
    assert len(g["nodes"]) == len(d) + len(d.channels)
    assert min(n["px"] for n in g["nodes"].values()) >= 12 - 1e-9
    assert {n["shape"] for n in g["nodes"].values()} == {"box"}  # every label inside its node's box
    assert g["crossings"] == [] and g["overlaps"] == []
    no_errors(pg)


# -- Archive: over memory crossed, 8 quantile groups ----------------------------------------------------

def test_archive_marks_over_memory_and_groups_bins_into_quantiles(page):
    from browser_util import type_number
    pg = page
    open_page(pg, "Devices")
    choose(pg, "Start from a preset", "malvik-4gpu-limited-resnet50")
    open_page(pg, "Optimize")
    _algorithms(pg, ["MAP-Elites"])
    type_number(pg, "Evaluations per algorithm", 1500)
    main(pg).get_by_role("button", name="Start").click()
    main(pg).get_by_role("button", name="Use this placement").first.wait_for(timeout=120_000)
    open_page(pg, "Archive")
    wait_text(pg, "Map of the archive")
    settle(pg)
    chart = main(pg).locator("[data-testid='stPlotlyChart']").first
    plot = chart.locator(".js-plotly-plot").first
    plot.wait_for()
    info = plot.evaluate("""gd => { const heat = gd._fullData[0];
        const over = gd._fullData.find(t => (t.name || '').startsWith('✕ over memory'));
        return {cols: heat.z[0].length, text: heat.text,
                over: over ? over.x.map((x, k) => [over.y[k], x]) : [],
                legend: [...gd.querySelectorAll('.legendtext')].map(e => e.textContent)}; }""")
    assert info["cols"] <= 8
    assert info["over"], "no cell over memory is marked"  # the seed, all on gpu0, does not fit this preset
    assert all(info["text"][r][c] != "▲" for r, c in info["over"])
    assert any(t.startswith("✕ over memory") for t in info["legend"])
    # coverage and QD-score over time: two rising step curves ending at 1,500 evaluations
    curves = main(pg).locator("[data-testid='stPlotlyChart']").filter(has_text="QD-score").first
    ends = curves.locator(".js-plotly-plot").first.evaluate(
        "gd => gd._fullData.map(t => [t.name, t.x[t.x.length - 1], t.y[0] <= t.y[t.y.length - 1]])")
    assert ends == [["coverage", 1500, True], ["QD-score", 1500, True]]
    main(pg).get_by_text("every bin", exact=True).click()
    settle(pg)
    assert plot.evaluate("gd => gd._fullData[0].z[0].length") == 40
    no_errors(pg)
