"""The explorable node-link views (the network, the device graph), drawn with pyvis (vis.js) for ``st.iframe``.

``placement_core.analysis.graphview`` computes positions, sizes, widths and cards; this module only styles
them and renders ``nodelink.html`` through pyvis with vis.js inlined, so the page works offline and
opens fast (physics off: the layout is ours). The page's script (in the template) does the
interaction: click a node for its producers, consumers and card, search by name, expand a module, and
keeps the selection, the expanded modules, the search and the camera in the browser's session storage, so
leaving the page and coming back shows the view as it was.
"""

from __future__ import annotations

import base64
import hashlib
import math
from pathlib import Path

import numpy as np
import pyvis
import streamlit as st
from jinja2 import Environment, FileSystemLoader
from pyvis.network import Network

from placement_core.analysis.graphview import LAYER_DX, device_graph_view, network_view

from . import state
from .charts.style import KIND_COLORS, color

HEIGHT = 640  # pixels of the iframe
LABEL_PX, FONT_PX = 9, 12  # an op's name is drawn once its 12-pixel font would be 9 pixels tall (zoom 0.75)
OPEN_SCALE = LABEL_PX / FONT_PX  # a network that fits only below OPEN_BELOW opens at its input end, named
OPEN_BELOW = 0.2
DEVICE_FONT, DEVICE_LABEL_PX = 15, 12  # the device graph's type, and the least it is drawn at (pixels)


def _edge_colour(c: str, opacity: float) -> dict:
    return {"color": c, "highlight": c, "hover": c, "opacity": opacity}


CROSS = {"color": _edge_colour("#d62728", 0.95), "dashes": [8, 5]}  # a tensor between devices: a transfer
PLAIN = {"color": _edge_colour("#8a8fa3", 0.55), "dashes": False}
SEVERAL = "#9e9e9e"  # a module whose ops sit on several devices
SPLIT_LEGEND = "split op: one slice per device"


def pie(colours: list[str]) -> str:
    """A disc cut into equal slices, one per device of a split op, as an SVG data URI (vis.js's image shape;
    the colours are ours, so nothing from a file reaches the SVG)."""
    k = len(colours)
    parts = []
    for j, c in enumerate(colours):
        a0, a1 = 2 * math.pi * j / k - math.pi / 2, 2 * math.pi * (j + 1) / k - math.pi / 2
        x0, y0, x1, y1 = 50 + 48 * math.cos(a0), 50 + 48 * math.sin(a0), 50 + 48 * math.cos(a1), 50 + 48 * math.sin(a1)
        large = 1 if a1 - a0 > math.pi else 0
        parts.append(f'<path d="M50,50 L{x0:.2f},{y0:.2f} A48,48 0 {large} 1 {x1:.2f},{y1:.2f} Z" fill="{c}" '
                     'stroke="#ffffff" stroke-width="2"/>')
    svg = '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 100 100">' + "".join(parts) + "</svg>"
    return "data:image/svg+xml;base64," + base64.b64encode(svg.encode()).decode()

# One environment for every render: the template and the inlined vis.js are parsed once per process.
_ENV = Environment(loader=FileSystemLoader([str(Path(__file__).parent), str(Path(pyvis.__file__).parent / "templates")]),
                   autoescape=False)


def _options(n_edges: int, device_graph: bool) -> dict:
    """vis.js options: constants only (never a user string: the template writes them unescaped)."""
    big = n_edges > 1500
    return {
        "physics": {"enabled": False},
        "layout": {"improvedLayout": False},
        "interaction": {"hover": True, "tooltipDelay": 120, "dragNodes": False, "hideEdgesOnDrag": big,
                        "hideEdgesOnZoom": big, "navigationButtons": False, "keyboard": False,
                        "multiselect": False, "zoomSpeed": 0.7},
        "nodes": {"shape": "dot", "borderWidth": 1, "borderWidthSelected": 4,
                  "font": {"size": 16 if device_graph else FONT_PX, "face": "sans-serif", "color": "#1f2330",
                           "multi": False},
                  # labels appear once their text would be at least this many pixels tall: on zoom
                  "scaling": {"label": {"drawThreshold": 3 if device_graph else LABEL_PX}}},
        "edges": {"arrows": {"to": {"enabled": True, "scaleFactor": 0.55}}, "smooth": False,
                  "color": {"inherit": False}, "selectionWidth": 0, "hoverWidth": 0.5},
    }


def _render(net: Network, meta: dict) -> str:
    net.heading = meta  # the template reads it, HTML-safe, as the page's META
    net.templateEnv = _ENV
    net.path = "nodelink.html"
    return net.generate_html()


def _storage_key(kind: str, identity: str) -> str:
    return f"placement-{kind}-" + hashlib.sha256(identity.encode()).hexdigest()[:16]


def network_html(graph, layout, colour_by: str, placement, device_names, costs, unit: str, identity: str,
                 splits=()) -> str:
    """The network's page. ``colour_by``: "kind" or "device"; ``identity`` names the network for the view's
    remembered state (selection, expanded modules). Coloured by device, an op split over several devices
    (``splits``) is a disc with a slice in each device's colour."""
    view = network_view(graph, layout, placement, device_names, costs, unit, splits=splits)
    by_device = colour_by == "device" and placement is not None
    dev_colour = {name: color(d) for d, name in enumerate(device_names or [])}

    def colour(kind, device):
        if by_device:
            return dev_colour.get(device, SEVERAL) if device is not None else SEVERAL
        return KIND_COLORS.get(kind, KIND_COLORS["other"])

    net = Network(height=f"{HEIGHT}px", directed=True, cdn_resources="in_line")
    for k, m in enumerate(view["modules"]):
        net.add_node(f"m{k}", label=m["name"], x=m["x"], y=m["y"], size=m["size"], shape="hexagon",
                     color=colour(m["kind"], m["device"]), title=f"module {m['name']} ({len(m['members'])} ops)",
                     role="module", name=m["name"], card=m["card"], borderWidth=2)
    for i, n in enumerate(view["nodes"]):
        extra = {}
        if by_device and len(n["devices"]) > 1:
            extra = {"shape": "image", "image": pie([dev_colour[d] for d in n["devices"]]),
                     "shapeProperties": {"useBorderWithImage": False}}
        net.add_node(i, label=n["name"], x=n["x"], y=n["y"], size=n["size"], color=colour(n["kind"], n["device"]),
                     title=n["name"], role="op", name=n["name"], card=n["card"],
                     module=None if n["module"] is None else f"m{n['module']}", **extra)
    for e in view["edges"]:
        net.add_edge(e["from"], e["to"], width=e["width"], bytes=e["bytes"], cross=e["cross"],
                     **(CROSS if e["cross"] else PLAIN))
    if by_device:
        used = sorted({d for n in view["nodes"] for d in n["devices"]}, key=list(device_names).index)
        legend = [[d, dev_colour[d]] for d in used] + ([["several devices", SEVERAL]] if view["modules"] else [])
        if any(len(n["devices"]) > 1 for n in view["nodes"]):
            legend.append([SPLIT_LEGEND, SEVERAL])
    else:
        kinds = sorted({n["kind"] for n in view["nodes"]},
                       key=lambda k: (list(KIND_COLORS).index(k) if k in KIND_COLORS else 99, k))
        legend = [[k, KIND_COLORS.get(k, KIND_COLORS["other"])] for k in kinds]
    net.options = _options(len(view["edges"]), device_graph=False)
    meta = {"mode": "network", "storageKey": _storage_key("net", identity), "legend": legend,
            "crossLabel": "tensor between devices" if placement is not None else "",
            "crossStyle": CROSS, "plainStyle": PLAIN, "maxBytes": view["max_bytes"],
            "curveAbove": 1.5 * LAYER_DX, "focusScale": 1.1, "searchHint": "Find an op by name",
            "openBelow": OPEN_BELOW, "openScale": OPEN_SCALE,
            "inWord": "Producers", "outWord": "Consumers"}
    return _render(net, meta)


def devices_html(devices, result, placement, graph, identity: str) -> str:
    """The device graph's page: devices (boxes) and channels (diamond hubs)."""
    from .charts.gantt import ink

    view = device_graph_view(devices, result, placement, graph)
    net = Network(height=f"{HEIGHT}px", directed=True, cdn_resources="in_line")
    # every label inside its own opaque box (channels too): edges end at a box's border and pass under the
    # others, so none crosses a label; the type grows with the layout (its radius grows past 5 devices), and
    # the page never opens it below DEVICE_LABEL_PX (nodelink.html's openView)
    font = DEVICE_FONT
    for n in view["nodes"]:
        d = n["role"] == "device"
        dev = devices.devices[int(n["id"][1:])] if d else None
        fill = ("#37474F" if dev.kind == "gpu" else "#90A4AE") if d else color(int(n["id"][1:]))
        net.add_node(n["id"], label=n["label"], x=n["x"], y=n["y"], shape="box", size=25 if d else 14,
                     title=n["name"], role=n["role"], name=n["name"], card=n["card"], color=fill,
                     font={"color": "#ffffff" if d else ink(fill), "size": font},
                     shapeProperties={"borderRadius": 2 if d else 12})
    for e in view["edges"]:
        c = int((e["to"] if e["to"].startswith("c") else e["from"])[1:])
        net.add_edge(e["from"], e["to"], width=e["width"], color=_edge_colour(color(c), 0.8),
                     title=f"{e['bandwidth'] / 1e9:.4g} GB/s")
    net.options = _options(len(view["edges"]), device_graph=True)
    meta = {"mode": "devices", "storageKey": _storage_key("dev", identity),
            "legend": [["GPU", "#37474F"], ["CPU", "#90A4AE"], ["channel (hub)", color(0)]],
            "crossLabel": "", "crossStyle": {}, "plainStyle": {}, "maxBytes": 0, "curveAbove": 0,
            "focusScale": 1.0, "searchHint": "Find a device or channel", "inWord": "Connected", "outWord": "",
            "openBelow": 0, "openScale": 0, "minLabelPx": DEVICE_LABEL_PX}
    return _render(net, meta)


@st.cache_resource(max_entries=12, show_spinner="Drawing the graph…")
def _network_page(key: tuple, _graph, _layout, colour_by, _placement, _names, _costs, unit, identity,
                  _splits=()) -> str:
    return network_html(_graph, _layout, colour_by, _placement, _names, _costs, unit, identity, _splits)


def current_network_html(colour_by: str) -> str:
    """The current network, placement and cost settings as a page (cached per network, placement and colouring)."""
    g, placement, problem = state.graph(), state.current_placement(), state.problem()
    pipelined = problem.settings.micro_batches > 1
    key = (state.graph_key(), state.devices_key(), state.cost_key(), state.sim_tuple(),
           np.asarray(placement).tobytes(), colour_by, problem.splits)
    costs = problem.costs if len(problem.graph) == len(g) else None
    return _network_page(key, g, state.layout(), colour_by, placement, state.devices().names, costs,
                         "per micro-batch" if pipelined else "per batch", state.graph_key(), problem.splits)


@st.cache_resource(max_entries=12, show_spinner=False)
def _devices_page(key: tuple, _devices, _result, _placement, _graph, identity) -> str:
    return devices_html(_devices, _result, _placement, _graph, identity)


def current_devices_html() -> str:
    """The current device graph with the bytes each channel carries under the current placement."""
    problem, placement = state.problem(), state.current_placement()
    result = state.simulate(problem, placement).result
    key = (state.graph_key(), state.devices_key(), state.cost_key(), state.sim_tuple(),
           np.asarray(placement).tobytes())
    return _devices_page(key, state.devices(), result, placement, state.graph(), state.devices_key())
