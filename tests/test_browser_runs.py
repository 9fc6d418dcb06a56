"""The Runs page in a real browser: runs made on the command line, overlaid, compared, exported.

The module's dashboard serves a PLACEMENT_HOME in which ``placement optimize`` has already stored two short
runs (random search seed 1, the GA seed 2, AlexNet on malvik), as a user who ran the CLI and then opened the
dashboard would have. The expected numbers are read from the store directly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from browser_util import main, no_errors, open_page, settle, shot

from placement_core import load_devices, load_network
from placement_core.store import RunStore

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

RUNS = [("random", 1, 200), ("ga", 2, 300)]  # algorithm, seed, evaluations


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = tmp_path_factory.mktemp("runs_home")
    for algorithm, seed, budget in RUNS:
        subprocess.run([str(Path(sys.executable).with_name("placement")), "optimize", "--network", "alexnet", "--devices",
                        "malvik", "--algorithm", algorithm, "--budget", str(budget), "--seed", str(seed), "--json"],
                       check=True, capture_output=True, env={**os.environ, "PLACEMENT_HOME": str(home)})
    return home


def overlay_traces(pg) -> list[str]:
    """The names of the curves the browser drew in the chart titled 'Best objective so far'."""
    chart = pg.locator("[data-testid='stPlotlyChart']").filter(has_text="Best objective so far").first
    chart.locator(".js-plotly-plot").wait_for()
    return chart.locator(".js-plotly-plot").evaluate("el => el.data.map(t => t.name)")


def add_option(pg, label: str, option: str) -> None:
    """Open the multiselect labelled ``label`` with its chevron and pick ``option``."""
    box = pg.locator("[data-testid='stMultiSelect']").filter(has=pg.get_by_text(label, exact=True)).first
    item = pg.get_by_role("option", name=option, exact=True).first
    for _ in range(3):  # a click during a rerun may open the list just before it is redrawn closed
        box.get_by_role("button", name="Open").click()
        try:
            item.wait_for(timeout=3000)
            break
        except Exception:
            settle(pg)
    item.click()
    pg.keyboard.press("Escape")
    settle(pg)


def test_overlay_diff_and_export_of_command_line_runs(page, home, tmp_path):
    pg = page
    with RunStore(home=home) as store:
        rnd, ga = sorted(store.runs(), key=lambda r: r.id)
        histories = {r.id: store.history(r.id) for r in (rnd, ga)}
    open_page(pg, "Runs")
    no_errors(pg)

    # the overlay starts with the selected run (the newest: the GA); add the random search as a person does
    assert overlay_traces(pg) == [f"run {ga.id} · Genetic algorithm · alexnet"]
    add_option(pg, "Runs on the chart", f"run {rnd.id} · Random search · alexnet")
    assert overlay_traces(pg) == [f"run {ga.id} · Genetic algorithm · alexnet", f"run {rnd.id} · Random search · alexnet"]
    chart = pg.locator("[data-testid='stPlotlyChart']").filter(has_text="Best objective so far").first
    assert chart.locator(".scatterlayer .trace").count() == 2  # two curves drawn
    assert "objective (ms per batch + memory penalty)" in chart.inner_text()
    last = chart.locator(".js-plotly-plot").evaluate(  # the decoded arrays Plotly drew
        "el => el._fullData.map(t => t.y[t.y.length - 1])")
    assert last == pytest.approx([histories[ga.id][-1, 1] * 1e3, histories[rnd.id][-1, 1] * 1e3])
    pg.get_by_text("Log scale for evaluations", exact=True).click()
    settle(pg)
    assert chart.locator(".js-plotly-plot").evaluate("el => el.layout.xaxis.type") == "log"

    # the settings diff of the two runs (A: the selected GA run, B: the other): algorithm, seed, budget differ
    grid = pg.locator("[data-testid='stDataFrame']").filter(has_text="setting").last
    grid.scroll_into_view_if_needed()
    settle(pg)
    cells = grid.locator("td, [role='gridcell']").all_inner_texts()
    text = " | ".join(cells)
    for expected in ("algorithm", "Genetic algorithm (ga)", "Random search (random)", "seed", "budget (evaluations)",
                     "300", "200"):
        assert expected in cells, text
    assert "network" not in cells, text  # both ran AlexNet on malvik with the same simulator settings
    headers = grid.locator("th, [role='columnheader']").all_inner_texts()
    assert [h.strip() for h in headers] == ["setting", f"A: run {ga.id}", f"B: run {rnd.id}"], headers

    # export the selected run's best placement and read the file
    with pg.expect_download() as d:
        main(pg).get_by_role("button", name="Download", exact=True).click()
    path = tmp_path / d.value.suggested_filename
    d.value.save_as(path)
    assert path.name == f"run{ga.id}-placement.json"
    data = json.loads(path.read_text())
    g, devices = load_network("alexnet"), load_devices("malvik")
    assert data["format"] == "placement/1"
    assert data["assignment"] == {op.name: devices.names[int(k)] for op, k in zip(g.ops, ga.best_placement)}
    no_errors(pg)
    shot(pg, "runs-compare")

    # the choices stay after visiting another page
    open_page(pg, "Network")
    open_page(pg, "Runs")
    assert overlay_traces(pg) == [f"run {ga.id} · Genetic algorithm · alexnet", f"run {rnd.id} · Random search · alexnet"]
    chart = pg.locator("[data-testid='stPlotlyChart']").filter(has_text="Best objective so far").first
    assert chart.locator(".js-plotly-plot").evaluate("el => el.layout.xaxis.type") == "log"
    no_errors(pg)
