"""The Network page's still picture (dashboard/charts/picture.py): where each op lands, worked out by hand, and
the SVG read back as XML (what is drawn, what is dashed, names kept as text)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pytest

from dashboard.charts.picture import MARGIN, MIN_STEP, WIDTH, network_svg, snake
from placement_core import load_network
from placement_core.analysis import layered_layout
from placement_core.formats.network import network_from_dict

SVG = "{http://www.w3.org/2000/svg}"


def chain(n: int, kinds=("conv",)) -> dict:
    ops = [{"name": "x", "kind": "input", "inputs": [], "output_bytes": 1e6}]
    for k in range(1, n):
        ops.append({"name": f"op{k}", "kind": kinds[k % len(kinds)], "inputs": [ops[-1]["name"]],
                    "fwd_flops": 1e9 * k, "bwd_flops": 2e9 * k, "output_bytes": 1e6 * k})
    return {"format": "placement-network/1", "name": "chain", "batch_size": 1, "ops": ops}


def test_a_short_chain_is_one_centred_row():
    """10 layers: 952 usable pixels / 10 = 95.2 a layer, capped at 48; the row of 480 px is centred, so layer l
    sits at 24 + (952 - 480) / 2 + 48 (l + 0.5) = 284 + 48 l."""
    layout = layered_layout(network_from_dict(chain(10)))
    s = snake(layout)
    assert s.rows == 1 and s.per_row == 10
    assert np.allclose(s.px, 284 + 48 * np.arange(10))
    assert np.allclose(s.py, s.py[0])


def test_a_long_chain_snakes_so_a_row_ends_above_the_next_rows_start():
    """200 layers: 4.76 px a layer is under 12, so a row holds 952 // 12 = 79 layers at 952 / 79 px; three rows.
    Layer 78 ends row 0 at the right; layer 79 starts row 1 at the right, straight below it; layer 158 starts
    row 2 at the left, below layer 157 (the end of row 1)."""
    layout = layered_layout(network_from_dict(chain(200)))
    s = snake(layout)
    step = (WIDTH - 2 * MARGIN) / 79
    assert s.per_row == 79 and s.rows == 3 and step >= MIN_STEP
    assert s.px[0] == pytest.approx(MARGIN + 0.5 * step)
    assert s.px[78] == pytest.approx(MARGIN + 78.5 * step) == pytest.approx(s.px[79])
    assert s.px[80] == pytest.approx(MARGIN + 77.5 * step)  # row 1 runs right to left
    assert s.px[157] == pytest.approx(s.px[158]) == pytest.approx(MARGIN + 0.5 * step)
    assert s.py[79] - s.py[78] == pytest.approx(s.row_height + 18.0)
    assert s.height == pytest.approx(2 * MARGIN + 3 * s.row_height + 2 * 18.0)


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)


def test_every_op_is_a_circle_and_edges_crossing_devices_are_dashed():
    """A 3-op chain with the last op on the second device: one edge plain, one dashed red; the legend lists the
    two devices and the crossing style; names that look like markup stay text."""
    g = network_from_dict(chain(3))
    names = ["<gpu0>", "gpu & 1"]
    svg = network_svg(g, layered_layout(g), "device", np.array([0, 0, 1]), names)
    root = parse(svg)  # well-formed: every name escaped
    circles = root.findall(f"{SVG}circle")
    assert len(circles) == 3 + 3  # the ops, then one swatch per legend entry
    paths = root.findall(f"{SVG}path")
    dashed = [p for p in paths if p.get("stroke-dasharray")]
    assert len(dashed) == 1 and dashed[0].get("d").count("M") == 1
    assert sum(p.get("d").count("M") for p in paths) == 2  # both edges drawn once
    assert [t.text for t in root.findall(f"{SVG}text")] == ["<gpu0>", "gpu & 1", "tensor between devices"]
    assert "<gpu0>" not in svg  # escaped in the document


def test_colours_by_kind_and_the_largest_op_is_the_largest_circle():
    g = network_from_dict(chain(6, kinds=("conv", "norm")))
    root = parse(network_svg(g, layered_layout(g), "kind", np.zeros(6, dtype=int), ["gpu0"]))
    ops = root.findall(f"{SVG}circle")[:6]
    radii = [float(c.get("r")) for c in ops]
    assert radii[5] == max(radii) == pytest.approx(4.5) and radii[0] == pytest.approx(1.5)  # 9 and 3 px across
    assert [c.get("fill") for c in ops[:3]] == ["#9E9E9E", "#B279A2", "#4C78A8"]  # input, norm, conv
    assert not [p for p in root.findall(f"{SVG}path") if p.get("stroke-dasharray")]
    assert [t.text for t in root.findall(f"{SVG}text")] == ["input", "conv", "norm"]


def test_resnet50_fits_the_page_width_in_rows():
    g = load_network("resnet50")
    layout = layered_layout(g)
    s = snake(layout)
    assert s.rows == -(-layout.depth // s.per_row) >= 2
    assert s.px.min() >= MARGIN and s.px.max() <= WIDTH - MARGIN
    root = parse(network_svg(g, layout, "kind", np.zeros(len(g), dtype=int), ["gpu0"]))
    assert int(root.get("width")) == WIDTH and float(root.get("height")) < 700
    assert len(root.findall(f"{SVG}circle")) == len(g) + len({o.kind for o in g.ops})
