"""Archive page (AppTest): heatmap, picking an elite (list and chart), top-K, comparison, use."""

import math

import numpy as np
import pytest
from apptest_util import assert_clean, decode, figures, frame, goto, start, text, wait_for_runs

from dashboard.runs import REGISTRY
from placement_core.analysis import fmt_seconds


@pytest.fixture(scope="module")
def with_archive():
    """An app whose session ran MAP-Elites (800 evaluations) on the default problem."""
    at = start()
    goto(at, "optimize")
    at.number_input(key="opt_evaluations").set_value(800)
    at.multiselect(key="opt_algorithms").set_value(["map-elites"])
    at.button(key="opt_start").click().run()
    wait_for_runs(at)
    [run] = REGISTRY.runs(at.session_state["session_key"])
    return at, run


def archive_page(at):
    goto(at, "archive")
    assert_clean(at)
    return at


def test_without_a_run_the_page_says_what_to_do():
    at = start()
    goto(at, "archive")
    assert_clean(at)
    assert "run **MAP-Elites** on the Optimize page" in text(at)


def test_heatmap_shows_the_best_elite_of_every_projected_niche(with_archive):
    at, run = with_archive
    archive_page(at)
    archive = run.result.archive
    heat, cells = figures(at)[0]["data"][:2]
    assert heat["type"] == "heatmap" and cells["type"] == "scatter"
    z = np.array([[math.nan if v is None else v for v in row] for row in decode(heat["z"])], dtype=float)
    x_dim, y_dim = 2, 0  # default: columns = cross-device edges, rows = most-used device
    projected = {(e.niche[y_dim], e.niche[x_dim]) for e in archive.elites.values()}
    assert int(np.isfinite(z).sum()) == len(projected) == len(decode(cells["x"]))
    for (yi, xi) in projected:  # each cell: the best objective over the third dimension, in ms
        best = min(e.objective for e in archive.elites.values() if (e.niche[y_dim], e.niche[x_dim]) == (yi, xi))
        assert z[yi, xi] == pytest.approx(best * 1e3)
    # per-cell elite counts add up to the archive size
    counts = [int(h.split("<br>")[-1].split()[0]) for h in cells["hovertext"]]
    assert sum(counts) == len(archive)
    layout = figures(at)[0]["layout"]
    assert layout["yaxis"]["ticktext"] == ["cpu0", "gpu0", "gpu1", "gpu2", "gpu3"]
    assert layout["xaxis"]["title"]["text"] == "cross-device edges"
    assert figures(at)[0]["data"][0]["colorbar"]["title"]["text"] == "best objective (ms)"


def test_other_dimensions_can_be_shown(with_archive):
    at, run = with_archive
    archive_page(at)
    at.selectbox(key=f"arch_y_live:{run.id}").set_value(1).run()  # rows: devices used
    assert_clean(at)
    z = np.array(decode(figures(at)[0]["data"][0]["z"]), dtype=float)
    projected = {(e.niche[1], e.niche[2]) for e in run.result.archive.elites.values()}
    assert int(np.isfinite(z).sum()) == len(projected)
    assert figures(at)[0]["layout"]["yaxis"]["title"]["text"] == "devices used"


def test_picking_an_elite_from_the_list_shows_it(with_archive):
    at, run = with_archive
    archive_page(at)
    ranked = run.result.archive.ranked()
    at.selectbox(key=f"arch_pick_live:{run.id}").set_value(ranked[2].niche).run()
    assert_clean(at)
    assert "**Elite #3**" in text(at)
    m = {x.label: x.value for x in at.metric}
    assert m["Objective"] == fmt_seconds(ranked[2].objective)
    load = figures(at)[1]
    assert [a["text"] for a in load["layout"]["annotations"]] == [
        "Busy time per device", "Peak memory vs capacity", "Bytes per channel"]
    assert load["layout"]["yaxis2"]["title"]["text"] == "memory (GB)"


def test_clicking_a_heatmap_cell_picks_its_elite(with_archive):
    at, run = with_archive
    archive_page(at)
    target = run.result.archive.ranked()[-1]  # the worst elite: never the default pick
    yi, xi = target.niche[0], target.niche[2]
    best_in_cell = min((e for e in run.result.archive.elites.values() if (e.niche[0], e.niche[2]) == (yi, xi)),
                       key=lambda e: e.objective)
    at.session_state[f"arch_heat_live:{run.id}"] = {"selection": {"points": [{"customdata": [yi, xi]}],
                                                             "point_indices": [0], "box": [], "lasso": []}}
    at.run()
    assert_clean(at)
    assert at.session_state[f"arch_pick_live:{run.id}"] == best_in_cell.niche


def test_top_elites_and_comparison(with_archive):
    at, run = with_archive
    archive_page(at)
    top = frame(at, "rank")
    assert len(top) == min(10, len(run.result.archive))
    assert list(top["rank"]) == list(range(1, len(top) + 1))
    assert list(top["objective (ms)"]) == sorted(top["objective (ms)"])
    table = frame(at, "")
    assert table.iloc[0, 0] == "objective" and {"A", "B", "B − A"} <= set(table.columns)
    strip = figures(at)[-1]["data"][0]
    z = decode(strip["z"])
    assert strip["type"] == "heatmap" and len(z) == 2 and len(z[0]) == 176
    at.selectbox(key="cmp_b").set_value("elite #1").run()
    assert "**0 of 176 ops** run on a different device." in text(at)


def test_use_an_elite_and_open_its_trace(with_archive):
    at, run = with_archive
    archive_page(at)
    ranked = run.result.archive.ranked()
    at.selectbox(key=f"arch_pick_live:{run.id}").set_value(ranked[1].niche).run()
    at.button(key="arch_trace").click().run()
    assert_clean(at)
    assert at.title[0].value == "Trace"
    assert at.session_state["placement_label"] == f"elite #2 of {run.name}"
    assert (at.session_state["placement"] == ranked[1].placement).all()
