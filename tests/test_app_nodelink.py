"""The explorable node-link views (AppTest): the Network and Devices pages' pyvis pages, read back from the
iframe's document: what is drawn, what a click shows, modules for a large network, nothing fetched from
outside, and hostile names that stay text. The browser side (clicks, highlights) is
tests/test_browser_views.py."""

from __future__ import annotations

import json
import re

import pytest
from apptest_util import assert_clean, goto, start

from placement_core import load_devices, load_network, random_placement
from placement_core.base.units import fmt_bytes
from placement_core.model.devices import devices_to_dict
from placement_core.formats.network import network_to_dict
from placement_core.problem import ProblemSpec

HOSTILE = ['<img src=x onerror="window.pwned=1">', "</script><script>window.pwned=2</script>", "it's & <b>"]


def explore(at):
    """The Network page opens on the picture; its explorable graph is one choice away."""
    at.segmented_control(key="net_view").set_value("explorable graph").run()
    assert_clean(at)
    return at


def view(at, index=0):
    """The view's document and the data its script starts from."""
    html = at.get("iframe")[index].proto.srcdoc

    def grab(name):
        m = re.search(rf"^const {name} = (.*);$", html, re.M)
        return json.loads(m.group(1))

    return html, grab("META"), grab("NODES"), grab("EDGES"), grab("OPTIONS")


@pytest.mark.slow
def test_the_network_page_draws_the_explorable_graph_of_the_current_network():
    at = explore(start())
    html, meta, nodes, edges, options = view(at)
    g = load_network("resnet50")
    assert [n["name"] for n in nodes] == [o.name for o in g.ops]
    assert sorted((e["from"], e["to"]) for e in edges) == sorted((a, b) for a, b, _ in g.edges())
    assert all(e["arrows"] == "to" for e in edges)  # arrows in the direction data flows
    assert options["physics"] == {"enabled": False} and options["layout"] == {"improvedLayout": False}
    conv1 = next(n for n in nodes if n["name"] == "conv1")
    card = dict(map(tuple, conv1["card"]))
    assert card["kind"] == "conv" and card["device"] == "gpu0" and "on gpu0 (per batch)" in card
    assert not any(e["cross"] for e in edges)  # everything on gpu0
    assert meta["legend"][0] == ["input", "#9E9E9E"] and ["conv", "#4C78A8"] in meta["legend"]
    # vis.js is inlined: the document loads nothing (no script or style source, no link)
    assert "vis.Network" in html and len(html) > 400_000
    assert not re.search(r"<script[^>]+src=|<link|@import|url\(\s*['\"]?https?:", html, re.I)  # (the
    # browser test watches the requests themselves: tests/test_browser_views.py)


@pytest.mark.slow
def test_colour_by_device_and_cross_device_edges_drawn_dashed():
    at = start()
    g, d = load_network("resnet50"), load_devices("malvik-4gpu")
    placement = random_placement(g, d, 4)
    at.session_state["placement"] = placement
    at.segmented_control(key="net_color").set_value("device").run()
    explore(at)
    _, meta, nodes, edges, _ = view(at)
    dev_colour = dict(meta["legend"])
    for i, n in enumerate(nodes):
        assert n["color"] == dev_colour[d.names[placement[i]]]
    for e in edges:
        crossing = placement[e["from"]] != placement[e["to"]]
        assert e["cross"] == crossing and (e["dashes"] == [8, 5]) == crossing
        assert e["color"]["color"] == ("#d62728" if crossing else "#8a8fa3")


@pytest.mark.slow
def test_the_layered_chart_is_still_one_click_away():
    at = start()
    at.segmented_control(key="net_view").set_value("layered chart").run()
    assert_clean(at)
    assert not at.get("iframe") and at.get("plotly_chart")


def upload(at, data, name="net.json"):
    at.file_uploader(key="net_upload").upload(name, json.dumps(data).encode(), "application/json").run()
    assert_clean(at)


@pytest.mark.slow
def test_hostile_op_names_stay_text_inside_the_generated_page():
    at = start()
    data = network_to_dict(load_network("alexnet"))
    renamed = {o["name"]: HOSTILE[k % 3] + str(k) for k, o in enumerate(data["ops"])}
    for o in data["ops"]:
        o["inputs"] = [renamed[i] for i in o["inputs"]]
        o["name"] = renamed[o["name"]]
        o.pop("input_bytes", None)
    upload(at, data)
    html, meta, nodes, _, _ = view(explore(at))
    assert [n["name"] for n in nodes][:3] == [HOSTILE[0] + "0", HOSTILE[1] + "1", HOSTILE[2] + "2"]  # round trip
    ours = html.split("</script>", 1)[1]  # after the inlined vis.js (whose own source mentions <b> tags)
    assert "<img" not in ours and "<b>" not in ours and "it's" not in ours
    assert html.count("</script>") == 2  # vis.js's and ours: a name cannot close a script
    assert "\\u003cimg src=x onerror=" in html
    assert dict(map(tuple, nodes[0]["card"]))["op"] == HOSTILE[0] + "0"


def chain_of_blocks(blocks: int) -> dict:
    ops = [{"name": "x", "kind": "input", "inputs": [], "output_bytes": 1e6}]
    prev = "x"
    for k in range(blocks):
        for kind, suffix, src in (("conv", "conv", None), ("norm", "bn", "conv"), ("activation", "relu", "bn")):
            name = f"b{k}.{suffix}"
            ops.append({"name": name, "kind": kind, "inputs": [prev if src is None else f"b{k}.{src}"],
                        "fwd_flops": 1e9 if kind == "conv" else 0, "bwd_flops": 2e9 if kind == "conv" else 0,
                        "output_bytes": 1e6})
        ops.append({"name": f"b{k}.add", "kind": "elementwise", "inputs": [f"b{k}.relu", prev], "output_bytes": 1e6})
        prev = f"b{k}.add"
    return {"format": "placement-network/1", "name": "blocks", "batch_size": 1, "ops": ops}


@pytest.mark.slow
def test_a_network_over_a_thousand_ops_opens_as_modules():
    at = start(timeout=60)
    upload(at, chain_of_blocks(300))  # 1,201 ops
    _, meta, nodes, edges, options = view(explore(at))
    mods = [n for n in nodes if n["role"] == "module"]
    ops = [n for n in nodes if n["role"] == "op"]
    assert len(ops) == 1201 and 50 <= len(mods) <= 120
    members = {}
    for n in ops:
        if n["module"] is not None:
            members.setdefault(n["module"], []).append(n["id"])
    assert set(members) == {m["id"] for m in mods} and all(len(v) > 1 for v in members.values())
    assert all(m["shape"] == "hexagon" for m in mods)
    first, name = sorted(members[mods[0]["id"]]), {n["id"]: n["name"] for n in ops}
    assert dict(map(tuple, mods[0]["card"]))["ops"] == f"{len(first)}: {name[first[0]]} … {name[first[-1]]}"
    assert meta["maxBytes"] == 1e6 and len(edges) == 1500  # op-level edges: the page merges them per module
    assert options["interaction"]["hideEdgesOnDrag"] is False  # 1,500 edges: still drawn while dragging


@pytest.mark.slow
def test_the_devices_page_draws_devices_and_channels_with_what_each_carries():
    at = start()
    g, d = load_network("resnet50"), load_devices("malvik-4gpu")
    placement = random_placement(g, d, 2)
    at.session_state["placement"] = placement
    goto(at, "devices")
    assert_clean(at)
    _, meta, nodes, edges, _ = view(at)
    assert [n["name"] for n in nodes] == d.names + [c.name for c in d.channels]
    assert [n["shape"] for n in nodes] == ["box"] * 9  # every label inside its box: no edge crosses one
    assert {n["font"]["size"] for n in nodes} == {15} and meta["minLabelPx"] == 12
    res = ProblemSpec().build(g, d).simulate(placement).result  # the shared default settings
    for c, ch in enumerate(d.channels):
        node = nodes[5 + c]
        assert f"carries {fmt_bytes(res.channel_bytes[c])}" in node["label"]
        assert dict(map(tuple, node["card"]))["carries"] == fmt_bytes(res.channel_bytes[c])
    # every route a -> b over channel c: an edge a -> c and one c -> b, width ∝ bandwidth (all 16 GB/s: widest)
    expected = {(f"d{d.index[a]}", f"c{c}") for c, ch in enumerate(d.channels) for a, _ in ch.routes}
    expected |= {(f"c{c}", f"d{d.index[b]}") for c, ch in enumerate(d.channels) for _, b in ch.routes}
    assert {(e["from"], e["to"]) for e in edges} == expected and {e["width"] for e in edges} == {9.0}
    assert meta["mode"] == "devices"
    at.segmented_control(key="dev_view").set_value("charts").run()
    assert not at.get("iframe") and len(at.get("plotly_chart")) == 2


def test_hostile_device_names_stay_text():
    at = start()
    goto(at, "devices")
    data = devices_to_dict(load_devices("malvik"))
    text = json.dumps(data)
    # no ">" or ",": the device tables read those as route separators; "</script" + a tab would still end a
    # script element if it were written into the page as it is
    hostile = {"gpu1": "</script\t<img src=x onerror=window.pwned=2 //", "pcie0": "<img src=x onerror=window.pwned=1 "}
    for old, new in hostile.items():
        text = text.replace(f'"{old}"', json.dumps(new))
    at.file_uploader(key="dev_upload").upload("d.json", text.encode(), "application/json").run()
    assert_clean(at)
    html, _, nodes, _, _ = view(at)
    assert set(hostile.values()) <= {n["name"] for n in nodes}
    ours = html.split("</script>", 1)[1]
    assert "<img" not in ours and "</script\t" not in ours and html.count("</script>") == 2
