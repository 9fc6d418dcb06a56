"""The explorable views in a real browser: the network and device graphs (pyvis, inside their iframes) and the
Trace page you can follow. A person's moves: search an op, click it on the canvas, read its card, expand a
module, click a channel; click a bar of the Gantt, box-select a time range, find ops by name, pick a row of
the critical path. What the page should show is worked out here from the network and the simulator.

With PLACEMENT_DOC_SCREENSHOTS=1 the screenshots also go to docs/img/ (1280×800, 256-colour PNG): the pictures in
docs/dashboard.md come from these tests (``PLACEMENT_DOC_SCREENSHOTS=1 .venv/bin/python -m pytest
tests/test_browser_views.py``); without it they stay in test-artifacts/, so a test run changes no tracked file.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest
from browser_util import (ARTIFACTS, ROOT, choose, click_until, gantt, main, no_errors, on_gantt, open_page, segment,
                          selected, settle, wait_text)

from placement_core import load_devices, load_network
from placement_core.analysis import fmt_bytes, fmt_flops
from placement_core.problem import ProblemSpec

pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]
FADED = {"background": "#ececef", "border": "#d9d9de"}  # dashboard/nodelink.html


def doc_shot(pg, name: str, target=None, above: int = 60) -> None:
    """A 1280×800 picture of the view (``target`` at the top, ``above`` pixels of what precedes it):
    test-artifacts/, and docs/img/ when asked."""
    pg.set_viewport_size({"width": 1280, "height": 800})
    pg.mouse.move(5, 5)  # no hover label over the picture, no wheel over a chart
    if target is not None:
        target.evaluate("""(el, above) => {
            el.scrollIntoView({block: 'start'});
            let box = el.parentElement;  // the page's scrolling container (Streamlit's main section)
            while (box && !(box.scrollHeight > box.clientHeight && /auto|scroll/.test(getComputedStyle(box).overflowY)))
                box = box.parentElement;
            (box || document.scrollingElement).scrollBy(0, -above);
        }""", above)
    time.sleep(1.0)  # Plotly and vis.js redraw at the new size
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    pg.screenshot(path=str(path))
    if os.environ.get("PLACEMENT_DOC_SCREENSHOTS") == "1":
        from PIL import Image
        out = ROOT / "docs" / "img" / f"{name}.png"
        out.parent.mkdir(exist_ok=True)
        Image.open(path).convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(out, optimize=True)
    pg.set_viewport_size({"width": 1440, "height": 1000})


def graph_frame(pg, title: str):
    if title.startswith("The network"):
        segment(pg, "View", "explorable graph")  # the page opens on the picture
    frame = pg.frame_locator(f"iframe[title^='{title}']")
    frame.locator("body[data-drawn='1']").wait_for(timeout=30_000)
    return frame


def in_frame(frame, script: str, arg=None):
    return frame.locator("body").evaluate(f"(body, arg) => {{ {script} }}", arg)


def click_node(frame, node_id) -> None:
    """Click the node on the canvas where it is drawn, as a person does."""
    at = in_frame(frame, "const v = graphView.network; const p = v.getPositions([arg])[arg]; return v.canvasToDOM(p);",
                  node_id)
    frame.locator("#graph canvas").click(position={"x": at["x"], "y": at["y"]})


def card(frame) -> dict:
    rows = frame.locator("#card-rows tr")
    return {rows.nth(k).locator("td").nth(0).inner_text(): rows.nth(k).locator("td").nth(1).inner_text()
            for k in range(rows.count())}


def test_the_network_opens_as_a_picture_and_the_graph_choice_is_kept(page):
    """Issue 31 (5): a new session's Network page shows the network as a still picture (no script, no frame),
    drawn whole; the explorable graph is one click away, and that choice stays when the user leaves the page
    and comes back, until they change it."""
    pg = page
    picture = main(pg).locator("[data-testid='stImage'] img").first
    picture.wait_for()
    assert main(pg).locator("iframe").count() == 0
    box = picture.bounding_box()
    assert box["width"] > 600 and box["height"] > 100  # drawn at the page's width, ResNet-50 folded into rows
    assert pg.evaluate("(img) => img.complete && img.naturalWidth", picture.element_handle()) == 1000
    doc_shot(pg, "network-picture", picture)
    graph_frame(pg, "The network as an explorable graph")
    open_page(pg, "Devices")
    open_page(pg, "Network")
    view = main(pg).locator("[data-testid='stButtonGroup']").filter(has=pg.get_by_text("View", exact=True)).first
    assert view.get_by_role("radio", name="explorable graph").is_checked()  # kept across pages, no click
    graph_frame(pg, "The network as an explorable graph")
    assert main(pg).locator("[data-testid='stImage'] img").count() == 0
    segment(pg, "View", "picture")
    main(pg).locator("[data-testid='stImage'] img").first.wait_for()
    assert main(pg).locator("iframe").count() == 0
    no_errors(pg)


def test_a_long_network_opens_at_its_input_end_with_names_a_short_one_whole(page):
    """ResNet-50 fitted whole is a line of dots; it opens where its data starts, names readable. Fit shows it all,
    and that camera is kept when the page is left and come back to. AlexNet fits whole as it is."""
    pg = page
    frame = graph_frame(pg, "The network as an explorable graph")
    g = load_network("resnet50")
    view = in_frame(frame, "const v = graphView.network; return {scale: v.getScale(), opened: graphView.opened, "
                           "first: v.body.nodes[0].labelModule.visible(), "
                           "at: v.canvasToDOM(v.getPositions([0])[0]), width: document.body.clientWidth};")
    assert view["opened"] == "input end" and view["scale"] == pytest.approx(0.75) and view["first"] is True
    assert 0 < view["at"]["x"] < view["width"] / 2  # the input op, on the left of the view
    assert g.ops[0].kind == "input"
    frame.get_by_role("button", name="Fit").click()
    fitted = in_frame(frame, "return graphView.network.getScale();")
    assert fitted < 0.2  # why it did not open this way: 168 layers in 1,200 pixels
    open_page(pg, "Devices")
    open_page(pg, "Network")
    frame = graph_frame(pg, "The network as an explorable graph")
    assert in_frame(frame, "return graphView.network.getScale();") == pytest.approx(fitted)
    choose(pg, "Network", "AlexNet  (alexnet)")
    frame = graph_frame(pg, "The network as an explorable graph")
    assert in_frame(frame, "return graphView.opened || null;") is None


def test_search_and_click_an_op_in_the_network_graph(page):
    pg = page
    choose(pg, "Network", "Inception-V3  (inception_v3)")
    g = load_network("inception_v3")
    title = "The network as an explorable graph"
    frame = graph_frame(pg, title)
    no_errors(pg)
    # search: part of a name lists the matches; choosing one selects it
    frame.locator("#search").fill("mixed_6a.branch3x3")
    expected = [o.name for o in g.ops if "mixed_6a.branch3x3" in o.name.lower()]
    assert frame.locator("#matches button").all_inner_texts() == expected
    frame.locator("#matches button", has_text=expected[0]).first.click()
    assert frame.locator("#card-title").inner_text() == expected[0]
    # the concat with four producers and four consumers, clicked where it is drawn
    target = max(range(len(g)), key=lambda i: (len(g.parents[i]) + len(g.children[i]), -i))
    op = g.ops[target]
    label = "return graphView.network.body.nodes[arg].labelModule.visible();"
    frame.get_by_role("button", name="Fit").click()
    assert in_frame(frame, label, target) is False  # the whole network in view: no names, too small to read
    in_frame(frame, "graphView.network.focus(arg, {scale: 1.2, animation: false});", target)  # zoom to it
    assert in_frame(frame, label, target) is True  # names appear on zoom
    click_node(frame, target)
    frame.locator("#card-title", has_text=op.name).wait_for()
    c = card(frame)
    assert (c["kind"], c["forward"], c["device"]) == (op.kind, fmt_flops(op.fwd_flops), "gpu0")
    assert c["output"].startswith(fmt_bytes(op.output_bytes))
    assert set(c) >= {f"on {d} (per batch)" for d in load_devices("malvik-4gpu").names}  # its times on every device
    producers = [g.ops[p].name for p in g.parents[target]]
    consumers = [g.ops[k].name for k in g.children[target]]
    assert frame.locator("#card-links .prod").inner_text() == f"Producers (4): {', '.join(producers)}"
    assert sorted(frame.locator("#card-links .cons").inner_text().split(": ", 1)[1].split(", ")) == sorted(consumers)
    state = in_frame(frame, "return graphView.highlighted;")
    assert (state["selected"], sorted(state["producers"]), sorted(state["consumers"])) == (
        target, sorted(g.parents[target]), sorted(g.children[target]))
    colours = in_frame(frame, "return Object.fromEntries(graphView.nodes.get().map(n => [n.id, n.color]));")
    near = {target, *g.parents[target], *g.children[target]}
    assert all((colours[str(i)] == FADED) == (i not in near) for i in range(len(g)))  # the rest fades
    doc_shot(pg, "network-graph", main(pg).locator("iframe").first)
    # leave the page and come back: the same op is selected, its card shown
    open_page(pg, "Devices")
    open_page(pg, "Network")
    frame = graph_frame(pg, title)
    frame.locator("#card-title", has_text=op.name).wait_for()
    assert in_frame(frame, "return graphView.highlighted.selected;") == target
    # a click on empty canvas clears the selection
    frame.locator("#graph canvas").click(position={"x": 5, "y": 5})
    assert in_frame(frame, "return graphView.highlighted;") is None
    assert not frame.locator("#card").is_visible()


def blocks(n: int) -> dict:
    ops, prev = [{"name": "x", "kind": "input", "inputs": [], "output_bytes": 1e6}], "x"
    for k in range(n):
        ops += [{"name": f"b{k}.conv", "kind": "conv", "inputs": [prev], "fwd_flops": 1e9, "bwd_flops": 2e9,
                 "output_bytes": 1e6},
                {"name": f"b{k}.relu", "kind": "activation", "inputs": [f"b{k}.conv"], "output_bytes": 1e6},
                {"name": f"b{k}.add", "kind": "elementwise", "inputs": [f"b{k}.relu", prev], "output_bytes": 1e6}]
        prev = f"b{k}.add"
    return {"format": "placement-network/1", "name": "blocks", "batch_size": 1, "ops": ops}


def test_a_large_network_opens_as_modules_and_a_click_expands_one(page, tmp_path):
    pg = page
    path = tmp_path / "blocks.json"
    path.write_text(json.dumps(blocks(400)))  # 1,201 ops
    pg.get_by_role("tab", name="Upload a file").click()
    pg.locator("[data-testid='stFileUploaderDropzoneInput']").first.set_input_files(str(path))
    wait_text(pg, "Loaded blocks.json: 1201 ops", timeout_s=60)
    settle(pg)
    frame = graph_frame(pg, "The network as an explorable graph")
    status = frame.locator("#status")
    m = re.match(r"(\d+) shown: (\d+) of (\d+) modules collapsed", status.inner_text())
    shown, collapsed, modules = map(int, m.groups())
    assert collapsed == modules > 50 and shown < 1201 / 5
    module = in_frame(frame, "return graphView.nodes.get().find(n => n.role === 'module').id;")
    members = in_frame(frame, "return [...graphView.byId.values()].filter(n => n.module === arg).length;", module)
    in_frame(frame, "graphView.network.focus(arg, {scale: 1.0, animation: false});", module)
    click_node(frame, module)
    frame.locator("#status", has_text=f"{modules - 1} of {modules} modules collapsed").wait_for()
    assert in_frame(frame, "return graphView.nodes.length;") == shown - 1 + members
    assert frame.locator("#card-title").inner_text() == in_frame(frame, "return graphView.byId.get(arg).name;", module)
    in_frame(frame, "const last = [...graphView.byId.values()].filter(n => n.module === arg).pop().id; "
                    "graphView.network.focus(last, {scale: 0.2, animation: false});", module)  # and the next modules
    doc_shot(pg, "network-modules", main(pg).locator("iframe").first)
    frame.get_by_role("button", name="Collapse it again").click()
    frame.locator("#status", has_text=f"{modules} of {modules} modules collapsed").wait_for()
    assert in_frame(frame, "return graphView.nodes.length;") == shown


def test_click_a_channel_in_the_device_graph(page):
    pg = page
    open_page(pg, "Trace")
    pg.get_by_text("— change").first.click()
    click_until(pg, pg.locator(".st-key-trace_use_stages button"), "4 pipeline stages",
                scope=pg.locator("[data-testid='stSidebar']"))  # four pipeline stages: tensors cross the links
    settle(pg)
    open_page(pg, "Devices")
    frame = graph_frame(pg, "The device graph as an explorable graph")
    g, d = load_network("resnet50"), load_devices("malvik-4gpu")
    from placement_core.analysis.pipeline import even_stages
    placement = even_stages(g, d, 4)
    result = ProblemSpec().build(g, d).simulate(placement).result
    busiest = int(np.argmax(result.channel_bytes))
    assert result.channel_bytes[busiest] > 0
    click_node(frame, f"c{busiest}")
    frame.locator("#card-title", has_text=d.channels[busiest].name).wait_for()
    c = card(frame)
    assert c["carries"] == fmt_bytes(result.channel_bytes[busiest]) and c["bandwidth"] == "16 GB/s"
    touched = {a for a, _ in d.channels[busiest].routes} | {b for _, b in d.channels[busiest].routes}
    linked = frame.locator("#card-links .prod").inner_text()
    assert linked.startswith(f"Connected ({len(touched)}): ") and set(linked.split(": ", 1)[1].split(", ")) == touched
    doc_shot(pg, "device-graph", main(pg).locator("iframe").first)


# -- the Trace page -------------------------------------------------------------------------------------

def bar_centre(pg, predicate: str):
    """Page coordinates of the centre of the first bar whose hover label satisfies ``predicate`` (JS, on h)."""
    chart = gantt(pg)
    chart.scroll_into_view_if_needed()
    plot = chart.locator(".js-plotly-plot").first
    rel = plot.evaluate(f"""gd => {{
        for (const t of gd._fullData) {{
            if (t.type !== 'bar') continue;
            const k = t.hovertext.findIndex(h => {predicate});
            if (k < 0) continue;
            const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
            return [xa._offset + xa.l2p(t.base[k] + t.x[k] / 2), ya._offset + ya.l2p(t.y[k])];
        }} }}""")
    box = plot.bounding_box()
    return box["x"] + rel[0], box["y"] + rel[1]


def test_follow_an_op_box_select_a_window_find_ops_and_pick_a_critical_event(page):
    pg = page
    open_page(pg, "Trace")
    pg.get_by_text("— change").first.click()
    click_until(pg, pg.locator(".st-key-trace_use_stages button"), "4 pipeline stages",
                scope=pg.locator("[data-testid='stSidebar']"))
    settle(pg)
    g, d = load_network("resnet50"), load_devices("malvik-4gpu")
    from placement_core.analysis.pipeline import even_stages
    placement = even_stages(g, d, 4)
    res = ProblemSpec().build(g, d).simulate(placement, trace=True).result
    # the widest forward bar among the ops whose output crosses to the next stage
    crossing = {g.ops[a].name for a, b, _ in g.edges() if placement[a] != placement[b]}
    fwd = max((e for e in res.trace if e.kind == "op" and e.phase == "fwd" and e.op in crossing),
              key=lambda e: e.end - e.start)
    consumers = sorted(g.ops[b].name for a, b, _ in g.edges() if g.ops[a].name == fwd.op and placement[a] != placement[b])
    # zoom the chart to that bar so it is wide enough to hit, then click it
    on_gantt(pg, "(gd, r) => Plotly.relayout(gd, {'xaxis.range': r})", [fwd.start * 1e3 - 40, fwd.end * 1e3 + 40])
    x, y = bar_centre(pg, f"h.startsWith('<b>{fwd.op}</b> · fwd')")
    pg.mouse.click(x, y)
    deadline = time.time() + 30
    while selected(pg, "Follow an op (or click its bar)") != fwd.op and time.time() < deadline:
        time.sleep(0.2)
    settle(pg)
    assert selected(pg, "Follow an op (or click its bar)") == fwd.op
    wait_text(pg, f"{len(consumers)} tensor(s) cross devices")
    no_errors(pg)
    arrows = on_gantt(pg, "gd => (gd.layout.annotations || []).filter(a => a.showarrow && a.axref === 'x').length")
    assert arrows == 2 * len(consumers)  # producer → transfer → consumer, per crossing tensor
    assert gantt(pg).locator(".annotation-arrow-g").count() >= arrows
    doc_shot(pg, "trace-follow", gantt(pg))

    # box-select a time range with the chart's tool; the window's sums follow
    chart = gantt(pg)
    chart.scroll_into_view_if_needed()
    chart.hover()
    chart.locator("[data-title='Box Select']").click()
    on_gantt(pg, "gd => Plotly.relayout(gd, {'xaxis.autorange': true})")
    plot = chart.locator(".js-plotly-plot").first
    settle(pg)
    box = plot.locator(".nsewdrag").first.bounding_box()
    x0, x1, ym = box["x"] + 0.25 * box["width"], box["x"] + 0.55 * box["width"], box["y"] + 0.5 * box["height"]
    pg.mouse.move(x0, ym)
    pg.mouse.down()
    pg.mouse.move((x0 + x1) / 2, ym, steps=4)
    pg.mouse.move(x1, ym, steps=4)
    pg.mouse.up()
    caption = main(pg).get_by_text(re.compile(r"^From [\d.]+ to [\d.]+ ms"))
    deadline = time.time() + 30
    while caption.inner_text().startswith("From 0 to") and time.time() < deadline:
        time.sleep(0.2)
    settle(pg)
    assert selected(pg, "Follow an op (or click its bar)") == fwd.op  # the bars inside the box are not followed
    a_ms, b_ms = map(float, re.match(r"From ([\d.]+) to ([\d.]+) ms", caption.inner_text()).groups())
    assert 0 < a_ms < b_ms < res.makespan * 1e3
    slider = [float(v) for v in main(pg).locator("[data-testid='stSliderThumbValue']").all_inner_texts()]
    a, b = slider[0] / 1e3, slider[1] / 1e3
    table = main(pg).locator("[data-testid='stDataFrame']").filter(has_text="device or channel").first
    busy_gpu1 = sum(max(0.0, min(e.end, b) - max(e.start, a)) for e in res.trace if e.resource == "gpu1")
    assert _cell(table, row=2, col=0) == "gpu1"
    cell = _cell(table, row=2, col=1)  # gpu1's busy (ms)
    assert float(cell) == pytest.approx(busy_gpu1 * 1e3, rel=2e-3, abs=2e-3)
    doc_shot(pg, "trace-window", table, above=560)  # the window on the chart, its sums below

    # find ops by name
    box = pg.get_by_role("textbox", name="Find ops by name")
    box.fill("layer3.0")
    box.press("Enter")
    n = sum(1 for o in g.ops if "layer3.0" in o.name)
    wait_text(pg, f"{n} op(s) match “layer3.0”")
    found = on_gantt(pg, "gd => gd._fullData.filter(t => t.name === 'found').map(t => t.x.length)[0]")
    assert found == 6 * sum(1 for e in res.trace if e.kind == "op" and "layer3.0" in e.op)

    # the critical path: select a row of its table, its event is marked on the chart
    main(pg).get_by_text("Highlight the critical path").click()
    wait_text(pg, "Select a row to mark its event on the chart")
    settle(pg)
    crit = main(pg).locator("[data-testid='stDataFrame']").filter(has_text="share of the makespan").first
    crit.scroll_into_view_if_needed()
    bb = crit.locator("canvas").first.bounding_box()
    pg.mouse.click(bb["x"] + 12, bb["y"] + 35 + 35 * 2.5)  # the row marker of the third row
    deadline = time.time() + 30
    note = None
    while time.time() < deadline:
        notes = on_gantt(pg, "gd => (gd.layout.annotations || []).filter(a => !a.axref).map(a => a.text)")
        if notes:
            note = notes[0]
            break
        time.sleep(0.2)
    settle(pg)
    third = _cell(crit, row=2, col=1)  # column 0 holds the row markers
    assert note is not None and note.split(" (")[0] in third
    doc_shot(pg, "trace-critical", gantt(pg))
    no_errors(pg)


def _cell(table, row: int, col: int) -> str:
    """The text of a cell of a Streamlit dataframe (glide data grid keeps an accessible copy of its cells)."""
    return table.locator(f"#glide-cell-{col}-{row}").text_content().strip()
