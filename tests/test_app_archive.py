"""Archive page (AppTest): heatmap, picking an elite (list and chart), top-K, comparison, use."""

import math

import numpy as np
import pytest
from apptest_util import assert_clean, dashboard_run, decode, figures, frame, goto, start, text

from placement_core.analysis import fmt_seconds


@pytest.fixture(scope="module")
def with_archive():
    """An app whose session ran MAP-Elites (800 evaluations) on the default problem."""
    at = start()
    return at, dashboard_run(at, "map-elites", 800)


def archive_page(at, bins="all"):
    """The Archive page; ``bins="all"``: every bin of cross-device edges (the tests below count 40 columns),
    "quantile": the default of at most 8 quantile groups."""
    goto(at, "archive")
    assert_clean(at)
    if at.radio(key="arch_bins").value != bins:
        at.radio(key="arch_bins").set_value(bins).run()
        assert_clean(at)
    return at


@pytest.mark.slow
def test_without_a_run_the_page_says_what_to_do():
    at = start()
    goto(at, "archive")
    assert_clean(at)
    assert "run **MAP-Elites** on the Optimize page" in text(at)


def best_per_cell(archive, x_dim=2, y_dim=0):
    """Brute force: (row, column) -> the best elite projecting there."""
    best = {}
    for e in archive.elites.values():
        cell = (e.niche[y_dim], e.niche[x_dim])
        if cell not in best or e.objective < best[cell].objective:
            best[cell] = e
    return best


@pytest.mark.slow
def test_heatmap_shows_the_best_elite_of_every_projected_niche(with_archive):
    at, run = with_archive
    archive_page(at)
    archive = run.result.archive
    heat, cells, empty = figures(at)[0]["data"][:3]
    assert heat["type"] == "heatmap" and cells["type"] == "scatter" and empty["type"] == "heatmap"
    best = best_per_cell(archive)  # default: columns = cross-device edges, rows = most-used device
    marks = list(zip(decode(cells["y"]), decode(cells["x"])))
    assert marks == [(a, b) for a in range(5) for b in range(40)]  # one clickable marker per cell, row-major
    assert [list(c) for c in cells["customdata"]] == [list(c) for c in marks]  # plain [row, column] lists
    hover = dict(zip(marks, cells["hovertext"]))
    for cell in marks:  # each cell's true objective, whatever its colour, or "empty niche"
        if cell not in best:
            assert hover[cell].startswith("<b>empty niche</b>")
            continue
        assert hover[cell].split("<br>")[0] in (
            f"objective {fmt_seconds(best[cell].objective)}",
            f"objective {fmt_seconds(best[cell].objective)} (above the colour scale)")
    # colours: clipped at the 95th percentile of the cells whose elite fits in memory
    fitting = [e.objective * 1e3 for e in best.values() if run.problem.simulate(e.placement).feasible]
    high = float(np.percentile(fitting or [e.objective * 1e3 for e in best.values()], 95))
    z = np.array([[math.nan if v is None else v for v in row] for row in decode(heat["z"])], dtype=float)
    assert int(np.isfinite(z).sum()) == len(best)
    for (yi, xi), e in best.items():
        assert z[yi, xi] == pytest.approx(min(e.objective * 1e3, high))
        assert (decode(heat["text"])[yi][xi] == "▲") == (e.objective * 1e3 > high)
    assert heat["zmax"] == pytest.approx(high)
    # empty niches: grey cells with a dot wherever no elite projects
    ez = np.array([[math.nan if v is None else v for v in row] for row in decode(empty["z"])], dtype=float)
    assert {(a, b) for (a, b), v in np.ndenumerate(ez) if v == 0} == \
        {(a, b) for a in range(5) for b in range(40)} - set(best)
    assert all(t == "·" for (a, b), t in np.ndenumerate(np.array(empty["text"], dtype=object)) if (a, b) not in best)
    # per-cell elite counts add up to the archive size
    counts = [int(hover[c].split("<br>")[-1].split()[0]) for c in best]
    assert sum(counts) == len(archive)
    layout = figures(at)[0]["layout"]
    assert layout["yaxis"]["ticktext"] == ["cpu0", "gpu0", "gpu1", "gpu2", "gpu3"]
    # ResNet-50 has 191 edges in 40 bins, bin = rint(edges * 39 / 191): bin 0 holds 0-2, bin 1 3-7, bin 39 189-191
    assert layout["xaxis"]["ticktext"][:2] == ["0–2", "3–7"] and layout["xaxis"]["ticktext"][-1] == "189–191"
    assert layout["xaxis"]["title"]["text"] == "cross-device edges"
    assert heat["colorbar"]["title"]["text"].startswith("best objective (ms)")


def test_log_and_linear_colour_scales(with_archive):
    at, run = with_archive
    archive_page(at)
    best = best_per_cell(run.result.archive)
    for scale, f, title in (("log", math.log10, "log scale"), ("linear", lambda v: v, "best objective (ms)"),
                            ("clipped", None, "best objective (ms)")):
        at.radio(key="arch_scale").set_value(scale).run()
        assert_clean(at)
        heat = figures(at)[0]["data"][0]
        assert title in heat["colorbar"]["title"]["text"]
        if f is None:
            continue
        z = decode(heat["z"])
        for (yi, xi), e in best.items():
            assert z[yi][xi] == pytest.approx(f(e.objective * 1e3))
        assert "▲" not in [t for row in decode(heat["text"]) for t in row]


def test_other_dimensions_can_be_shown(with_archive):
    at, run = with_archive
    archive_page(at)
    at.selectbox(key=f"arch_y_live:{run.id}").set_value(1).run()  # rows: devices used
    assert_clean(at)
    z = np.array(decode(figures(at)[0]["data"][0]["z"]), dtype=float)
    projected = {(e.niche[1], e.niche[2]) for e in run.result.archive.elites.values()}
    assert int(np.isfinite(z).sum()) == len(projected)
    assert figures(at)[0]["layout"]["yaxis"]["title"]["text"] == "devices used"
    assert figures(at)[0]["layout"]["yaxis"]["ticktext"] == ["1", "2", "3", "4", "5"]
    at.selectbox(key=f"arch_y_live:{run.id}").set_value(0).run()


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["list", "dict", "index"])
def test_clicking_a_heatmap_cell_picks_its_elite(with_archive, shape):
    """Streamlit 1.67 with Plotly 6 hands a point's customdata back as {"0": row, "1": column} (a KeyError: 0
    before); other versions as a list, or only the marker's index."""
    at, run = with_archive
    archive_page(at)
    archive = run.result.archive
    ranked = archive.ranked()
    target = ranked[-1]  # the worst elite: never the default pick
    yi, xi = target.niche[0], target.niche[2]
    best_in_cell = best_per_cell(archive)[(yi, xi)]
    point = {"list": {"customdata": [yi, xi]}, "dict": {"customdata": {"0": yi, "1": xi}},
             "index": {"point_index": yi * 40 + xi, "curve_number": 1}}[shape]  # markers: every cell, row-major
    at.selectbox(key=f"arch_y_live:{run.id}").set_value(0).run()  # rows: most-used device
    at.selectbox(key=f"arch_pick_live:{run.id}").set_value(ranked[0].niche).run()
    at.session_state[f"arch_heat_live:{run.id}"] = {"selection": {"points": [point], "point_indices": [0],
                                                                  "box": [], "lasso": []}}
    at.run()
    assert_clean(at)
    assert at.session_state[f"arch_pick_live:{run.id}"] == best_in_cell.niche
    rank = ranked.index(best_in_cell) + 1
    assert f"**Elite #{rank}**" in text(at)
    assert {x.label: x.value for x in at.metric}["Objective"] == fmt_seconds(best_in_cell.objective)
    outline = figures(at)[0]["data"][3]
    assert (decode(outline["x"]), decode(outline["y"])) == ([xi], [yi])


@pytest.mark.slow
def test_clicking_an_empty_niche_changes_nothing(with_archive):
    at, run = with_archive
    archive_page(at)
    at.selectbox(key=f"arch_y_live:{run.id}").set_value(0).run()
    ranked = run.result.archive.ranked()
    at.selectbox(key=f"arch_pick_live:{run.id}").set_value(ranked[1].niche).run()
    yi, xi = next((a, b) for a in range(5) for b in range(40) if (a, b) not in best_per_cell(run.result.archive))
    at.session_state[f"arch_heat_live:{run.id}"] = {"selection": {"points": [{"customdata": {"0": yi, "1": xi}}],
                                                                  "point_indices": [0], "box": [], "lasso": []}}
    at.run()
    assert_clean(at)
    assert at.session_state[f"arch_pick_live:{run.id}"] == ranked[1].niche
    assert "**Elite #2**" in text(at)


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
    at.selectbox(key=f"cmp_a_live:{run.id}").set_value("elite #1").run()
    at.selectbox(key=f"cmp_b_live:{run.id}").set_value("elite #1").run()
    assert "**0 of 176 ops** run on a different device." in text(at)
    at.session_state[f"cmp_a_chosen_live:{run.id}"] = False  # A follows the inspected elite again


@pytest.mark.slow
def test_compare_offers_every_elite_and_a_follows_the_inspected_one(with_archive):
    at, run = with_archive
    archive_page(at)
    ranked = run.result.archive.ranked()
    n = len(ranked)
    assert n > 50  # more than the old list of #1-#50
    a = at.selectbox(key=f"cmp_a_live:{run.id}")
    expected = [f"elite #{k}" for k in range(1, n + 1)] + [f"best of {run.name}".split(" · ")[0],
                                                           f"current: {at.session_state['placement_label']}"]
    assert [o.split(" · ")[0] for o in a.options] == expected
    # A follows the inspected elite ...
    at.selectbox(key=f"arch_pick_live:{run.id}").set_value(ranked[n - 1].niche).run()
    assert at.selectbox(key=f"cmp_a_live:{run.id}").value == f"elite #{n}"
    at.selectbox(key=f"cmp_b_live:{run.id}").set_value("elite #2").run()
    rows = frame(at, "")
    assert rows.iloc[0]["A"] == fmt_seconds(ranked[n - 1].objective)
    assert rows.iloc[0]["B"] == fmt_seconds(ranked[1].objective)
    moved = int((ranked[n - 1].placement != ranked[1].placement).sum())
    assert f"**{moved} of 176 ops** run on a different device." in text(at)
    # ... until the user chooses A
    at.selectbox(key=f"cmp_a_live:{run.id}").set_value("elite #3").run()
    at.selectbox(key=f"arch_pick_live:{run.id}").set_value(ranked[4].niche).run()
    assert_clean(at)
    assert at.selectbox(key=f"cmp_a_live:{run.id}").value == "elite #3"
    assert "**Elite #5**" in text(at)
    at.session_state[f"cmp_a_chosen_live:{run.id}"] = False


@pytest.mark.slow
def test_choices_survive_leaving_the_page(with_archive):
    at, run = with_archive
    archive_page(at)
    ranked = run.result.archive.ranked()
    at.radio(key="arch_scale").set_value("log").run()
    at.selectbox(key=f"arch_y_live:{run.id}").set_value(1).run()
    at.selectbox(key=f"arch_pick_live:{run.id}").set_value(ranked[6].niche).run()
    at.selectbox(key=f"cmp_b_live:{run.id}").set_value("elite #4").run()
    at.slider(key="arch_k").set_value(5).run()
    goto(at, "trace")
    goto(at, "network")
    archive_page(at)
    assert at.radio(key="arch_scale").value == "log"
    assert at.selectbox(key=f"arch_y_live:{run.id}").value == 1
    assert at.selectbox(key=f"arch_pick_live:{run.id}").value == ranked[6].niche
    assert "**Elite #7**" in text(at)
    assert at.selectbox(key=f"cmp_a_live:{run.id}").value == "elite #7"
    assert at.selectbox(key=f"cmp_b_live:{run.id}").value == "elite #4"
    assert len(frame(at, "rank")) == 5
    at.radio(key="arch_scale").set_value("clipped").run()
    at.selectbox(key=f"arch_y_live:{run.id}").set_value(0).run()
    at.slider(key="arch_k").set_value(10).run()


@pytest.mark.slow
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



@pytest.mark.slow
def test_one_bin_of_cross_device_edges_draws():
    """cross_edge_bins = 1 (allowed): the old axis labels divided by bins - 1."""
    from placement_core import Problem, load_devices, load_network
    from placement_core.store.recording import start_run
    from placement_core.store import RunStore

    problem = Problem(load_network("resnet50"), load_devices("malvik-4gpu"))
    with RunStore() as store:
        run_id, result = start_run(store, problem, "map-elites", evaluations=300, seed=2,
                                   params={"cross_edge_bins": 1})
    at = start()
    goto(at, "archive")
    assert_clean(at)
    layout = figures(at)[0]["layout"]
    assert layout["xaxis"]["ticktext"] == ["0–191"]  # every count of ResNet-50's 191 edges in one bin
    ranked = result.archive.ranked()
    at.selectbox(key=f"arch_pick_stored:{run_id}").set_value(ranked[-1].niche).run()
    assert_clean(at)
    assert f"**Elite #{len(ranked)}**" in text(at)
    assert at.selectbox(key=f"cmp_a_stored:{run_id}").value == f"elite #{len(ranked)}"
