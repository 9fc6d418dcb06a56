"""Figures built without Plotly's validation (dashboard.charts.style.fast_figure) and the Gantt's bar outlines.

A figure built unvalidated must be exactly what validation would have built: every such figure is compared
with ``go.Figure(its dict)`` (validated). The outline's geometry is checked against hand-worked vertices and
by counting, on a grid, which points it encloses.
"""

import json

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pytest
from apptest_util import decode

from dashboard.charts import curves, gantt, memory, trace_overlay
from dashboard.charts.gantt import _bar_outline
from placement_core import Problem, load_devices, load_network, random_placement
from placement_core.analysis import critical_path, gantt_rows, gantt_segments, memory_series


def _same_as_validated(fig: go.Figure) -> None:
    fast = json.loads(pio.to_json(fig, validate=False))
    checked = json.loads(pio.to_json(go.Figure(fig.to_dict()), validate=False))  # raises on an unknown property
    assert fast == checked


def _traced(batches=3, in_flight=2, seed=2):
    g, d = load_network("resnet50"), load_devices("malvik-4gpu")
    from placement_core import SimSettings
    p = Problem(g, d, settings=SimSettings(units=batches, units_in_flight=in_flight))
    res = p.simulate(random_placement(g, d, seed), trace=True).result
    rows = gantt_rows(d.names, [c.name for c in d.channels])
    return p, res, rows


@pytest.mark.slow
def test_gantt_and_memory_figures_are_what_validation_builds():
    p, res, rows = _traced()
    segs = gantt_segments(res.trace, rows)
    crit = critical_path(res.trace, p.graph)
    for critical in (None, crit):
        _same_as_validated(gantt.gantt_figure(segs, rows, len(p.devices), res.makespan, critical, res.trace))
    mem, off = memory.memory_figure(memory_series(res, len(p.devices)), p.devices.names,
                                    [d.memory_bytes for d in p.devices.devices])
    _same_as_validated(mem)


@pytest.mark.parametrize("clickable", [6000, 10])
def test_the_gantt_with_what_the_trace_page_draws_over_it_is_what_validation_builds(clickable, monkeypatch):
    """Followed op, its flows, ops found, a picked event, a window; clickable bars, or fixed names on a step too
    large to click (trace_overlay.CLICKABLE_EVENTS)."""
    from placement_core.analysis.trace_follow import op_events, op_flows

    monkeypatch.setattr(trace_overlay, "CLICKABLE_EVENTS", clickable)
    p, res, rows = _traced(batches=1, in_flight=1)
    segs = gantt_segments(res.trace, rows)
    producer = next(e.op for e in res.trace if e.kind == "transfer")
    extra = trace_overlay.gantt_extra(res.trace, rows, res.makespan, follow=op_events(res.trace, producer),
                                   flows=op_flows(res.trace, p.graph, producer), found=[0, 1, 2], picked=3,
                                   window=(0.1 * res.makespan, 0.2 * res.makespan))
    fig = gantt.gantt_figure(segs, rows, len(p.devices), res.makespan, None, res.trace, extra=extra)
    _same_as_validated(fig)
    assert fig.layout.dragmode is None  # panning stays the default (Streamlit's): a click selects a bar
    assert {"followed op", "found", "picked"} <= {t.name for t in fig.data}
    assert {t.type for t in fig.data if t.legendgroup == "b0-fwd"} == {"bar" if clickable == 6000 else "scatter"}


def test_progress_and_history_figures_are_what_validation_builds():
    views = [{"id": 1, "name": "GA #1", "curve": [(50.0, 0.9), (100.0, 0.5), (400.0, 0.5)]},
             {"id": 2, "name": "MAP-Elites #2", "curve": []}]
    fig = curves.progress_figure(views)
    _same_as_validated(fig)
    [trace] = fig.to_dict()["data"]
    assert decode(trace["x"]) == [50, 100, 400] and decode(trace["y"]) == pytest.approx([900, 500, 500])
    history = np.array([[50, 0.9, 0.9], [100, 0.5, 0.7], [150, 0.5, np.inf]])
    fig = curves.history_figure(history, "run <1> · GA")
    _same_as_validated(fig)
    assert fig.layout.title.text == "run &lt;1&gt; · GA: objective over the run"  # a user's label is escaped


def test_bar_outline_vertices_worked_by_hand():
    # row 0: bars [3, 4] and [0, 2] (given out of order); row 1: [1, 5]; half height 0.5
    x, y, order, at = _bar_outline(np.array([3.0, 0.0, 1.0]), np.array([4.0, 2.0, 5.0]), np.array([0, 0, 1]), 0.5)
    assert list(zip(x.tolist(), y.tolist())) == [
        (0, .5), (1, .5), (2, .5), (2, -.5), (0, -.5), (0, .5),      # [0, 2] on row 0 (y = 0 ± 0.5)
        (3, .5), (3.5, .5), (4, .5), (4, -.5), (3, -.5), (3, .5),    # [3, 4], joined along the top edge
        (0, .5),                                                      # back to the row's first bar
        (1, -.5), (3, -.5), (5, -.5), (5, -1.5), (1, -1.5), (1, -.5),  # [1, 5] on row 1 (y = -1 ± 0.5)
        (1, -.5),                                                     # back to the row's first bar
        (1, -.5), (0, .5)]                                            # the join between rows, walked back
    assert order.tolist() == [1, 0, 2] and at.tolist() == [1, 7, 14]  # each bar's top-middle vertex


def _winding(px, py, qx, qy) -> int:
    """Winding number of the closed polygon (px, py) around the point (qx, qy)."""
    w = 0
    for x0, y0, x1, y1 in zip(px, py, np.roll(px, -1), np.roll(py, -1)):
        cross = (x1 - x0) * (qy - y0) - (qx - x0) * (y1 - y0)
        if y0 <= qy < y1 and cross > 0:
            w += 1
        elif y1 <= qy < y0 and cross < 0:
            w -= 1
    return w


def test_bar_outline_encloses_exactly_the_bars():
    rng = np.random.default_rng(3)
    starts, ends, rows = [], [], []
    for r in range(3):  # non-overlapping bars per row, as ops on a device or transfers on a channel
        t = np.cumsum(rng.uniform(0.5, 2.0, 12))
        starts += t[0::2].tolist()
        ends += t[1::2].tolist()
        rows += [r] * 6
    s, e, r = np.array(starts), np.array(ends), np.array(rows)
    x, y, _, _ = _bar_outline(s, e, r, 0.3)
    area = 0.5 * np.sum(x * np.roll(y, -1) - np.roll(x, -1) * y)
    assert abs(area) == pytest.approx(np.sum(e - s) * 0.6, rel=1e-5)  # the joins add no area
    for qx in np.linspace(0, max(ends) + 1, 157):
        for qy in (-2.2, -2.0, -1.5, -1.1, -0.9, -0.5, 0.0, 0.25, 0.35):
            inside = any(a < qx < b and abs(qy + row) < 0.3 for a, b, row in zip(s, e, r))
            on_edge = any(abs(qx - v) < 1e-4 for v in np.r_[s, e])
            if not on_edge:
                assert (_winding(x, y, qx, qy) != 0) == inside, (qx, qy)
