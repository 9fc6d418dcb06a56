"""A plan archive in Chromium: search a small GPT's plans with MAP-Elites on the Cluster plan page, follow the link
to the Archive page, click the niche pipeline stages 2 × tensor parallel 2 on its map and see that niche's plan
(the exhaustive search's best there, worked out by the test itself), then open its trace; reload the tab (a new
session): the archive, stored as a run, is still listed and browsable, and the Runs page lists it. Then the same
search on 128 nodes, whose replicas are folded."""

from __future__ import annotations

import json

import pytest

import browser_util
from browser_util import main, multiselect, no_errors, open_page, selected, settle, shot, wait_text

from placement_core.analysis import fmt_seconds
from placement_core.families import gpt
from placement_core.formats.catalog import load_devices, load_network
from placement_core.formats.clusters import load_plan_cluster
from placement_core.optimize.plans import PlanRequest, plan

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

NET = "gpt:layers=2,hidden=64,heads=4,seq=32,vocab=100,batch=8"


def best_per_niche(devices=None, batch=8):
    """(pp, tp) -> the exhaustive search's fastest plan there (every plan of this GPT fits an A100), on one node
    unless ``devices`` says otherwise."""
    best = {}
    devices = devices or load_devices("dgx-a100:nodes=1")
    for p in plan(load_network(NET), devices, PlanRequest(global_batch=batch), gpt.parse(NET)):
        if (p.pp, p.tp) not in best or p.step_time_s < best[p.pp, p.tp].step_time_s:
            best[p.pp, p.tp] = p
    return best


def cell_centre(pg, cell, shape):
    """Pixel centre of heatmap cell (row, column): the chart's axes span [-0.5, n - 0.5], rows upwards."""
    chart = main(pg).locator("[data-testid='stPlotlyChart']").first
    box = chart.locator(".nsewdrag").first.bounding_box()
    (yi, xi), (ny, nx) = cell, shape
    return box["x"] + (xi + 0.5) / nx * box["width"], box["y"] + (1 - (yi + 0.5) / ny) * box["height"]


def search(pg, nodes: int, batch: int) -> None:
    """Build NET's GPT, then search its plans on ``nodes`` DGX A100 nodes with MAP-Elites: the exhaustive
    search's space (the schedule, ZeRO stage and recomputation not searched), a budget of 100 plans."""
    open_page(pg, "Network")
    pg.get_by_role("tab", name="A GPT by its shape").click()
    settle(pg)
    for label, value in (("Layers", 2), ("Hidden size", 64), ("Attention heads", 4), ("Sequence length", 32),
                         ("Vocabulary", 100), ("Sequences per batch", 8)):
        main(pg).get_by_role("spinbutton", name=label, exact=True).first.fill(str(value))
    main(pg).get_by_role("button", name="Build this GPT").click()
    settle(pg)
    open_page(pg, "Cluster plan")
    main(pg).get_by_role("spinbutton", name="Nodes (8 GPUs each)", exact=True).first.fill(str(nodes))
    main(pg).get_by_role("spinbutton", name="Global batch (sequences)", exact=True).first.fill(str(batch))
    main(pg).get_by_role("spinbutton", name="MAP-Elites budget", exact=True).first.fill("100")
    box = multiselect(pg, "Also search")
    for name in ("schedule", "ZeRO stage", "recomputation"):
        box.get_by_role("button", name=f"Remove {name}").click()
    main(pg).get_by_role("button", name="Search with MAP-Elites").click()


def test_search_the_plans_then_pick_a_niche_on_the_archive_map(page, tmp_path):
    pg = page
    search(pg, 1, 8)
    wait_text(pg, "26 of 26 plans simulated, 9 of 9 niches", timeout_s=120)  # the exhaustive search's 26 plans
    no_errors(pg)

    best = best_per_niche()
    ranked = sorted(best.values(), key=lambda p: p.step_time_s)
    target = best[2, 2]
    k = ranked.index(target) + 1
    assert k > 1  # not the elite the page shows first

    main(pg).get_by_role("link", name="Browse it on the Archive page").click()
    pg.get_by_role("heading", name="Archive", exact=True).first.wait_for()
    settle(pg)
    wait_text(pg, "Map of the archive")
    wait_text(pg, "Elite #1")
    no_errors(pg)
    assert selected(pg, "MAP-Elites run").startswith("plan archive")
    # columns: pipeline stages 1, 2, 4, 8; rows: tensor parallel 1, 2, 4
    x, y = cell_centre(pg, (1, 1), (3, 4))
    pg.mouse.move(x, y)
    hover = pg.locator(".hoverlayer .hovertext").first
    hover.wait_for()
    assert f"objective {fmt_seconds(target.step_time_s)}" in hover.text_content()
    pg.mouse.click(x, y)
    settle(pg)
    no_errors(pg)
    wait_text(pg, f"Elite #{k}")
    assert selected(pg, "Elite").startswith(f"#{k} · {fmt_seconds(target.step_time_s)}")
    step = main(pg).locator("[data-testid='stMetric']").filter(has=pg.get_by_text("Step", exact=True))
    assert step.locator("[data-testid='stMetricValue']").inner_text().strip() == fmt_seconds(target.step_time_s)
    text = main(pg).inner_text()
    assert f"tensor parallel 2, 2 stage(s) × {target.dp} replica(s), micro-batch {target.micro_batch}" in text

    main(pg).get_by_text("Show its trace", exact=True).click()
    settle(pg)
    wait_text(pg, "The step, GPU by GPU", timeout_s=60)
    no_errors(pg)
    path = browser_util.download(pg, main(pg).get_by_role("button", name="Trace (Chrome JSON)"),
                                 tmp_path / "plan-trace.json")
    events = json.loads(path.read_text())["traceEvents"]
    assert any(".tp_allreduce " in e.get("name", "") for e in events)  # tensor parallel 2's collectives
    shot(pg, "plan-archive")

    # leave and come back: the archive and the picked niche stay with the session
    open_page(pg, "Cluster plan")
    open_page(pg, "Archive")
    wait_text(pg, f"Elite #{k}")
    no_errors(pg)

    # reload the tab (a new session): the archive was stored as run 1, so it is still listed and browsable
    pg.reload()
    pg.get_by_role("heading", name="Archive", exact=True).first.wait_for()
    settle(pg)
    wait_text(pg, "Map of the archive", timeout_s=120)
    wait_text(pg, "Elite #1")
    no_errors(pg)
    assert selected(pg, "MAP-Elites run").startswith("run 1 · Plan archive")
    best_step = main(pg).locator("[data-testid='stMetric']").filter(has=pg.get_by_text("Best step", exact=True))
    assert best_step.locator("[data-testid='stMetricValue']").inner_text().strip() == fmt_seconds(ranked[0].step_time_s)
    settle(pg)
    x, y = cell_centre(pg, (1, 1), (3, 4))
    # the pointer still rests where it hovered before the reload: a move to the same point sends the new chart no
    # event, so it leaves the chart first (the full run's hover timed out here)
    pg.mouse.move(5, 5)
    pg.mouse.move(x, y)
    hover.wait_for()
    assert f"objective {fmt_seconds(target.step_time_s)}" in hover.text_content()
    pg.mouse.click(x, y)
    settle(pg)
    wait_text(pg, f"Elite #{k}")
    assert step.locator("[data-testid='stMetricValue']").inner_text().strip() == fmt_seconds(target.step_time_s)
    main(pg).get_by_text("Show its trace", exact=True).click()
    settle(pg)
    wait_text(pg, "The step, GPU by GPU", timeout_s=60)
    no_errors(pg)
    path = browser_util.download(pg, main(pg).get_by_role("button", name="Trace (Chrome JSON)"),
                                 tmp_path / "stored-plan-trace.json")
    assert any(".tp_allreduce " in e.get("name", "") for e in json.loads(path.read_text())["traceEvents"])
    open_page(pg, "Runs")
    assert selected(pg, "Run").startswith("run 1 · Plan archive")
    wait_text(pg, "Best step")
    no_errors(pg)


def test_an_archive_of_plans_on_128_nodes(page):
    """Above 32 nodes the search folds the data-parallel replicas as the Plan button does: 128 nodes (1,024 GPUs),
    the exhaustive search's 19 plans; on the Archive page the niche pipeline stages 4 × tensor parallel 2 holds the
    exhaustive search's best plan there, one replica of it shown."""
    pg = page
    search(pg, 128, 128)
    wait_text(pg, "19 of 19 plans simulated, 9 of 9 niches", timeout_s=120)
    no_errors(pg)
    best = best_per_niche(load_plan_cluster("dgx-a100:nodes=128"), 128)
    ranked = sorted(best.values(), key=lambda p: p.step_time_s)
    target = best[4, 2]
    k = ranked.index(target) + 1
    assert k > 1 and target.dp == 128
    main(pg).get_by_role("link", name="Browse it on the Archive page").click()
    pg.get_by_role("heading", name="Archive", exact=True).first.wait_for()
    settle(pg)
    wait_text(pg, "Elite #1")
    no_errors(pg)
    # columns: pipeline stages 2, 4, 8, 16; rows: tensor parallel 1, 2, 4
    x, y = cell_centre(pg, (1, 1), (3, 4))
    pg.mouse.click(x, y)
    settle(pg)
    no_errors(pg)
    wait_text(pg, f"Elite #{k}")
    assert selected(pg, "Elite").startswith(f"#{k} · {fmt_seconds(target.step_time_s)}")
    text = main(pg).inner_text()
    assert "tensor parallel 2, 4 stage(s) × 128 replica(s)" in text
    assert "One data-parallel replica is shown: its 4 simulated GPU(s)" in text
    shot(pg, "plan-archive-128-nodes")
