"""Network page (AppTest): built-ins, uploads (good and bad), batch size, graph and op table."""

import base64
import json

import pytest
from apptest_util import assert_clean, figures, metrics, show_tab, sidebar_text, start, text

from placement_core import load_devices, load_network
from placement_core.analysis import fmt_bytes
from placement_core.formats.network import network_to_dict


def test_default_network_is_resnet50_with_summary_graph_and_table():
    at = start()
    assert at.title[0].value == "Network"
    m = metrics(at)
    g = load_network("resnet50")
    assert m["Ops"] == "176"
    assert m["Forward compute"] == "1.05 TFLOP" and m["Parameters"] == "102 MB"
    assert at.dataframe[0].value.shape[0] == len(g) == 176
    assert list(at.dataframe[0].value.columns[:3]) == ["#", "op", "kind"]
    # a still picture first (no script to load: the first load's budget), every op a circle in it
    [image] = at.get("image")
    assert not figures(at) and not at.get("iframe")
    assert image.proto.imgs[0].caption == "The network as a picture (176 ops)"
    head, data = image.proto.imgs[0].url.split(",", 1)
    assert head == "data:image/svg+xml;base64"
    svg = base64.b64decode(data).decode()
    assert svg.count("<circle") == 176 + len({o.kind for o in g.ops})  # each op, then the legend's swatches
    at.segmented_control(key="net_view").set_value("explorable graph").run()
    assert not figures(at) and at.get("iframe") and not at.get("image")  # tests/test_app_nodelink.py
    at.segmented_control(key="net_view").set_value("layered chart").run()
    [fig] = figures(at)
    nodes = [t for t in fig["data"] if t["mode"] == "markers"]
    assert sum(len(t["hovertext"]) for t in nodes) == 176  # every op drawn once
    assert {t["name"] for t in nodes} >= {"conv", "norm", "activation"}  # coloured by op kind
    assert fig["layout"]["xaxis"]["title"]["text"].startswith("depth")
    assert "ResNet-50" in sidebar_text(at) and "176 ops" in sidebar_text(at)


def test_choosing_a_builtin_network_and_colouring_by_device():
    at = start()
    at.selectbox(key="net_builtin").set_value("alexnet").run()
    assert_clean(at)
    assert metrics(at)["Ops"] == str(len(load_network("alexnet")))
    assert "AlexNet" in sidebar_text(at)
    at.segmented_control(key="net_color").set_value("device").run()
    at.segmented_control(key="net_view").set_value("layered chart").run()
    nodes = [t for t in figures(at)[0]["data"] if t["mode"] == "markers"]
    assert [t["name"] for t in nodes] == ["gpu0"]  # the default placement: everything on gpu0


@pytest.mark.slow
def test_batch_size_scales_activations_not_parameters():
    at = start()
    before = metrics(at)
    at.number_input(key="net_batch").set_value(64).run()
    after = metrics(at)
    total = load_network("resnet50").totals()["activation_bytes"]  # at batch 128
    assert before["Activations"] == fmt_bytes(total) and after["Activations"] == fmt_bytes(total / 2)
    assert before["Parameters"] == after["Parameters"]
    assert "batch 64" in sidebar_text(at)


@pytest.mark.slow
@pytest.mark.parametrize("content, message", [
    (b"{not json", "bad.json"),
    (json.dumps({"format": "placement-network/1", "name": "n", "ops": [
        {"name": "a", "kind": "conv", "inputs": ["nope"]}]}).encode(), "not an op in this network"),
    (json.dumps({"format": "placement-network/9"}).encode(), "unknown format"),
])
def test_a_bad_upload_shows_what_to_fix_and_keeps_the_network(content, message):
    at = start()
    at.file_uploader(key="net_upload").upload("bad.json", content, "application/json").run()
    assert not at.exception
    [err] = at.error
    assert message in err.value and "ResNet-50" in err.value  # says the previous network is still loaded
    assert metrics(at)["Ops"] == "176" and at.session_state["graph"].name == "resnet50"


def test_a_good_upload_replaces_the_network():
    at = start()
    data = network_to_dict(load_network("alexnet"))
    data["name"] = "my-alexnet"
    at.file_uploader(key="net_upload").upload("mine.json", json.dumps(data).encode(), "application/json").run()
    assert_clean(at)
    assert at.success[0].value.startswith("Loaded mine.json")
    assert metrics(at)["Ops"] == str(len(data["ops"])) and "my-alexnet" in sidebar_text(at)


@pytest.mark.slow
def test_pytorch_import_errors_are_messages():
    at = start()
    show_tab(at, "net_tab", "Import a PyTorch model")  # the form is drawn while its tab is open
    at.text_input(key="torch_name").set_value("")
    at.button(key="FormSubmitter:torch_import-Import").click().run()
    assert not at.exception
    assert "no model name given" in text(at)


@pytest.mark.workers
def test_pytorch_import_of_an_uploaded_file(tmp_path):
    pytest.importorskip("torch")
    at = start()
    code = (b"import torch.nn as nn\n"
            b"def build():\n    return nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 2))\n")
    show_tab(at, "net_tab", "Import a PyTorch model")  # the form is drawn while its tab is open
    at.radio(key="torch_source").set_value("Python file")
    at.file_uploader(key="torch_file").upload("mlp.py", code, "text/x-python")
    at.text_input(key="torch_attr").set_value("build")
    at.text_input(key="torch_shape").set_value("3, 2, 2")
    at.number_input(key="torch_batch").set_value(16)
    at.button(key="FormSubmitter:torch_import-Import").click().run()
    at.checkbox(key="torch_confirm_ok").check().run()  # the file runs only once the user confirms
    at.button(key="torch_confirm_run").click().run(timeout=120)
    assert_clean(at)
    assert "Imported build: 5 ops at batch size 16" in text(at)
    assert metrics(at)["Ops"] == "5" and "batch 16" in sidebar_text(at)


def test_network_figure_is_svg_and_escapes_op_names():
    """Up to 3,000 ops the graph is SVG (WebGL draws slowly in software-rendered browsers); op names from a
    file are text in the hover, not markup."""
    from helpers import op

    from dashboard.charts import topology
    from placement_core.analysis import layered_layout
    from placement_core.model.graph import Graph

    g = Graph("t", [op("x", kind="input"), op("<img src=x>", inputs=["x"])])
    fig = topology.network_figure(g, layered_layout(g), "device", [0, 1], ["gpu0", "<b>gpu1</b>"])
    assert {t.type for t in fig.data} == {"scatter"}
    hovers = [h for t in fig.data if t.hovertext for h in t.hovertext]
    assert any("&lt;img src=x&gt;" in h and "on &lt;b&gt;gpu1&lt;/b&gt;" in h for h in hovers), hovers
    assert not any("<img" in h for h in hovers)


def test_first_load_sends_no_raw_html_and_the_sidebar_numbers_in_small_type():
    """The landing page (Network, with the sidebar) asks for no raw HTML in any markdown: raw HTML makes every
    new session's browser load and run an HTML parser before the page is complete (docs/dashboard.md "Speed";
    the sidebar's <small> lines were the page's only raw HTML). Its small type is Streamlit's :small[]."""
    at = start()
    texts = list(at.markdown) + list(at.caption) + list(at.sidebar.markdown) + list(at.sidebar.caption)
    assert texts and not [t.value for t in texts if t.proto.allow_html]
    d = load_devices("malvik-4gpu")  # the default device graph: 4 GPUs and the CPU, their channels
    sidebar = sidebar_text(at)
    assert "**Network** · ResNet-50  \n:small[176 ops · batch 128]" in sidebar
    assert f"**Devices** · malvik-4gpu  \n:small[{len(d)} devices · {len(d.channels)} channels]" in sidebar
    assert ":small[Simulator: thesis scheme, 1 batch(es), 1 in flight," in sidebar
