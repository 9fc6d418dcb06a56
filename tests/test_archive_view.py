"""The Archive page's pieces without Streamlit: reading a chart click, bin labels, the clipped colour scale,
empty niches, and the figure spec they make."""

import math

import numpy as np
import pytest
from helpers import devices, op, problem

from placement_core import Problem
from placement_core.model.devices import Channel, Device, DeviceGraph

from dashboard.archiveview import clicked_cell
from dashboard.charts.archive import heatmap_figure
from placement_core.analysis.archive_view import archive_heatmap, bin_labels, color_range
from placement_core.formats.catalog import load_devices, load_network
from placement_core.optimize.archive import THESIS_DESCRIPTORS, Archive, CrossDeviceEdges, make_descriptors

# -- reading a click ----------------------------------------------------------------------------------

CELLS = [(0, 3), (1, 0), (2, 5)]  # the clickable markers' cells, in trace order
SHAPE = (3, 6)


@pytest.mark.parametrize("point", [
    {"customdata": [2, 5]},                                       # a list (Plotly 5, plain JSON)
    {"customdata": (2, 5)},                                       # a tuple
    {"customdata": {"0": 2, "1": 5}},                             # Plotly 6 typed array row via Streamlit 1.67
    {"customdata": {0: 2, 1: 5}},                                 # int keys
    {"customdata": {"0": 2.0, "1": "5"}},                         # numbers as floats / strings
    {"point_index": 2, "curve_number": 1},                        # no customdata: the marker's index
    {"point_number": 2},                                          # older name for it
    {"x": 5, "y": 2, "curve_number": 0},                          # only the axes (columns, rows are indices)
    {"customdata": None, "point_index": 2, "x": 5, "y": 2},       # customdata missing
    {"customdata": {"a": 1}, "point_index": 2},                   # customdata unreadable: fall back
])
def test_a_click_is_read_from_every_shape_a_selection_takes(point):
    assert clicked_cell(point, CELLS, SHAPE) == (2, 5)


@pytest.mark.parametrize("point", [
    {}, None, "0,1", {"customdata": [9, 9]}, {"point_index": 7}, {"x": 6, "y": 0},
    {"point_index": 0, "curve_number": 3},  # an index into another trace says nothing about these cells
    {"customdata": [True, False]}, {"x": 1.5, "y": 0},
])
def test_a_point_that_names_no_cell_is_none(point):
    assert clicked_cell(point, CELLS, SHAPE) is None


# -- bin labels ---------------------------------------------------------------------------------------

def test_cross_device_edge_bins_are_labelled_with_the_counts_they_hold():
    p = Problem(load_network("resnet50"), load_devices("malvik-4gpu"))
    archive = Archive(p, make_descriptors(p, THESIS_DESCRIPTORS))
    edges = archive.descriptors[2]
    assert edges.max_edges == 191 and edges.size == 40
    labels = bin_labels(archive, edges)
    # bin = rint(v * 39 / 191): bin 0 holds v * 39 / 191 < 0.5, i.e. v <= 2; bin 1: 2.45 <= v < 7.35 -> 3..7;
    # bin 39: v >= 38.5 * 191 / 39 = 188.55 -> 189..191
    assert labels[:3] == ["0–2", "3–7", "8–12"] and labels[-1] == "189–191" and len(labels) == 40
    assert bin_labels(archive, archive.descriptors[0]) == ["cpu0", "gpu0", "gpu1", "gpu2", "gpu3"]
    assert bin_labels(archive, archive.descriptors[1]) == ["1", "2", "3", "4", "5"]
    # every placement's count lies in the range its own bin is labelled with (placements cut into runs of
    # random length on random devices reach every count from 0 up)
    rng = np.random.default_rng(0)
    rows = []
    for k in range(400):
        cuts = np.sort(rng.choice(np.arange(1, p.n_ops), size=k % 60, replace=False))
        devs = rng.integers(0, p.n_devices, size=len(cuts) + 1)
        rows.append(np.repeat(devs, np.diff(np.concatenate([[0], cuts, [p.n_ops]]))))
    placements = np.array(rows, dtype=np.int32)
    for v, b in zip(edges.values(p, placements), edges.bins(p, placements)):
        lo, _, hi = labels[b].partition("–")
        assert int(lo) <= v <= int(hi or lo), (v, b, labels[b])


def test_a_single_cross_edge_bin_holds_every_count():
    p = problem([op("a"), op("b", ["a"]), op("c", ["b"])], devices(2))
    edges = CrossDeviceEdges(p, bins=1)
    assert bin_labels(Archive(p, [edges]), edges) == ["0–2"]


def test_a_bin_no_count_reaches_is_labelled_none():
    p = problem([op("a"), op("b", ["a"]), op("c", ["b"])], devices(2))
    edges = CrossDeviceEdges(p, bins=5)  # 2 edges over 5 bins: counts 0, 1, 2 -> bins 0, 2, 4
    archive = Archive(p, [edges])
    assert bin_labels(archive, edges) == ["0", "none", "1", "none", "2"]


# -- colour scale, empty niches, the figure -----------------------------------------------------------

def six_cell_archive():
    """Three ops, two devices; six elites in six cells of (most-used device) x (cross-edge bin of 40)."""
    p = problem([op("a"), op("b", ["a"]), op("c", ["b"])], devices(2))
    archive = Archive(p, make_descriptors(p, THESIS_DESCRIPTORS))
    # niches: [0,0,0]->(0,0,0) [1,1,1]->(1,0,0) [0,0,1]->(0,1,20) [1,1,0]->(1,1,20) [0,1,0]->(0,1,39) [1,0,1]->(1,1,39)
    archive.add(np.array([[0, 0, 0], [1, 1, 1], [0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 0, 1]], dtype=np.int32),
                np.array([1.0, 2.0, 3.0, 4.0, 5.0, 100.0]))
    return archive


def test_the_colour_scale_is_clipped_at_the_95th_percentile_of_elites_that_fit():
    archive = six_cell_archive()
    h = archive_heatmap(archive, 2, 0, fits=lambda n: n != (1, 1, 39))  # the 100 s elite is over memory
    r = color_range(h)
    # fitting cells 1..5 s: 95th percentile (linear) = 1 + 0.95 * (5 - 1) = 4.8 s
    assert (r.low, r.high, r.clipped) == (1.0, pytest.approx(4.8), True)
    assert "fit" in r.basis
    assert "over memory" in h.hover[1][39] and "fits in memory" in h.hover[0][0]
    # without knowing what fits: the 95th percentile of all six cells, 5 + 0.75 * 95 = 76.25 s
    assert color_range(archive_heatmap(archive, 2, 0)).high == pytest.approx(76.25)


def test_the_figure_clips_colours_marks_outliers_and_keeps_their_true_value_in_the_hover():
    archive = six_cell_archive()
    h = archive_heatmap(archive, 2, 0, fits=lambda n: n != (1, 1, 39))
    fig = heatmap_figure(h, (1, 39))
    heat, marks, empty, over, outline = [t.to_plotly_json() for t in fig.data]
    z = np.array(heat["z"], dtype=float)
    expected = {(0, 0): 1000, (1, 0): 2000, (0, 20): 3000, (1, 20): 4000, (0, 39): 4800, (1, 39): 4800}
    assert {(int(a), int(b)): v for (a, b), v in np.ndenumerate(z) if np.isfinite(v)} == pytest.approx(expected)
    assert (heat["zmin"], heat["zmax"]) == (pytest.approx(1000), pytest.approx(4800))
    above = {(int(a), int(b)) for (a, b), t in np.ndenumerate(np.array(heat["text"])) if t == "▲"}
    assert above == {(0, 39)}  # 5 s lies above 4.8 s; 100 s too, but it is over memory: a red cross instead
    assert (list(over["x"]), list(over["y"]), over["marker"]["symbol"]) == ([39], [1], "x-thin-open")
    assert over["name"].startswith("✕ over memory") and over["showlegend"]
    bar = heat["colorbar"]
    assert "clipped" in bar["title"]["text"] and bar["ticktext"] == ["1,000", "2,000", "3,000", "4,000", "≥ 4,800"]
    # the clickable markers: one per cell, row-major, customdata [row, column] as plain lists; the hover holds
    # the true objective, or says the niche is empty; hovering anywhere picks the nearest marker
    cells = list(zip(marks["y"], marks["x"]))
    assert cells == [(a, b) for a in range(2) for b in range(40)]
    assert [list(c) for c in marks["customdata"]] == [[a, b] for a, b in cells]
    hover = dict(zip(cells, marks["hovertext"]))
    assert hover[(1, 39)].startswith("objective 100 s<br>") and "over memory" in hover[(1, 39)]
    assert hover[(0, 0)].startswith("objective 1 s<br>")
    assert hover[(1, 7)].startswith("<b>empty niche</b>") and "cross-device edges none" in hover[(1, 7)]
    assert "cross-device edges 1" in hover[(1, 20)]  # the bin's label, not its index 20
    assert fig.layout.hoverdistance == -1 and heat["hoverinfo"] == "skip" and empty["hoverinfo"] == "skip"
    # empty niches: grey cells with a dot, everywhere nothing was found
    ez = np.array(empty["z"], dtype=float)
    assert {(int(a), int(b)) for (a, b), v in np.ndenumerate(ez) if v == 0} == \
        {(a, b) for a in range(2) for b in range(40)} - set(expected)
    assert np.array(empty["text"])[0, 1] == "·" and np.array(empty["text"])[0, 0] == ""
    # the selected cell is outlined; axes are the bins, labelled, with fixed ranges a click can rely on
    assert (list(outline["x"]), list(outline["y"])) == ([39], [1])
    lay = fig.layout
    assert tuple(lay.xaxis.range) == (-0.5, 39.5) and tuple(lay.yaxis.range) == (-0.5, 1.5)
    assert list(lay.yaxis.ticktext) == ["d0", "d1"]
    assert lay.xaxis.ticktext[0] == "0" and lay.xaxis.ticktext[20] == "1" and lay.xaxis.ticktext[39] == "2"


def test_a_log_scale_spans_every_cell():
    archive = six_cell_archive()
    heat = heatmap_figure(archive_heatmap(archive, 2, 0), None, "log").data[0].to_plotly_json()
    z = np.array(heat["z"], dtype=float)
    assert z[1, 39] == pytest.approx(5.0) and z[0, 0] == pytest.approx(3.0)  # log10 of 100,000 and 1,000 ms
    bar = heat["colorbar"]
    assert "log" in bar["title"]["text"]
    assert bar["ticktext"] == ["1,000", "2,000", "5,000", "10,000", "20,000", "50,000", "100,000"]
    assert bar["tickvals"] == pytest.approx([math.log10(v) for v in (1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5)])
    assert "▲" not in np.array(heat["text"]).ravel().tolist()


def test_device_names_in_hover_and_ticks_are_escaped():
    devs = [Device("<b>x</b>", "cpu", 1e9, 1e12, 1e9), Device("d1", "cpu", 1e9, 1e12, 1e9)]
    p = problem([op("a"), op("b", ["a"])], DeviceGraph("test", devs, [
        Channel("bus", 100.0, 0.0, (("<b>x</b>", "d1"), ("d1", "<b>x</b>")))]))
    archive = Archive(p, make_descriptors(p, THESIS_DESCRIPTORS))
    archive.add(np.array([[0, 0]], dtype=np.int32), np.array([1.0]))
    h = archive_heatmap(archive, 2, 0)
    fig = heatmap_figure(h)
    hover = fig.data[1].hovertext[0]  # cell (0, 0): the elite
    assert "<b>x</b>" not in hover and "&lt;b&gt;x&lt;/b&gt;" in hover
    assert fig.layout.yaxis.ticktext[0] == "&lt;b&gt;x&lt;/b&gt;"
