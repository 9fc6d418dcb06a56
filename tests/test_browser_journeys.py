"""User journeys through Chromium: what a person types stays when they visit other pages and come back.

Each test is a fresh browser session against one dashboard server (tests/conftest.py). They act as a person
does: click the sidebar, double-click a table cell and type, press Enter, press buttons. The expected numbers
come from placement_core directly (the same simulation the sidebar reports).
"""

from __future__ import annotations

import re
import time

import pytest
from helpers import calibrated_devices_doc
from browser_util import (choose, download, main, no_errors, number, open_page, selected, settle, sidebar_text, type_number,
                          wait_text)

from placement_core import Problem, load_devices, load_network, single_device
from placement_core.analysis import fmt_seconds
from placement_core.analysis.device_tables import add_device, devices_from_tables, devices_to_tables

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]


def edit_cell(pg, grid_index: int, row: int, col: int, value) -> None:
    """Edit a cell of the ``grid_index``-th table as a keyboard user does: focus the table (its first cell),
    arrow to column ``col`` (0 = the first) of row ``row``, Enter opens the editor, replace the text, Enter
    commits."""
    grid = pg.locator("[data-testid='stDataFrame']").nth(grid_index)
    grid.scroll_into_view_if_needed()
    grid.locator("#glide-cell-1-0").focus()
    for key in ["ArrowRight"] * col + ["ArrowDown"] * row:
        pg.keyboard.press(key)
    pg.keyboard.press("Enter")
    time.sleep(0.2)
    pg.keyboard.press("Control+a")
    pg.keyboard.type(str(value))
    time.sleep(0.3)  # the editor takes the text before Enter commits it
    pg.keyboard.press("Enter")
    settle(pg)


def _time_on(devices) -> str:
    g = load_network("resnet50")
    p = Problem(g, devices)
    return fmt_seconds(p.simulate(single_device(g, devices, "gpu0")).result.batch_time)


def _edited_malvik(gpu0_tflops: float, pcie0_gbs: float):
    dev_rows, chan_rows = devices_to_tables(load_devices("malvik"))
    dev_rows[1]["peak TFLOP/s"] = gpu0_tflops
    chan_rows[0]["bandwidth GB/s"] = pcie0_gbs
    return devices_from_tables("malvik", dev_rows, chan_rows)


def test_device_edits_survive_navigation(page):
    pg = page
    open_page(pg, "Devices")
    choose(pg, "Start from a preset", "malvik")
    before = _time_on(load_devices("malvik"))
    assert f"{before} per batch" in sidebar_text(pg)
    edit_cell(pg, 0, 1, 3, 28)   # gpu0's peak TFLOP/s 14 -> 28
    edit_cell(pg, 1, 0, 1, 64)   # pcie0's bandwidth 16 -> 64 GB/s
    after = _time_on(_edited_malvik(28, 64))
    assert after != before
    wait_text(pg, f"{after} per batch", scope=pg.locator("[data-testid='stSidebar']"))
    assert "malvik (edited)" in sidebar_text(pg)

    open_page(pg, "Network")
    open_page(pg, "Devices")
    open_page(pg, "Optimize")
    open_page(pg, "Devices")
    no_errors(pg)
    text = sidebar_text(pg)
    assert f"{after} per batch" in text and "malvik (edited)" in text, text
    assert "Changes applied" not in main(pg).inner_text()
    # the tables still show the edits: edit the same cells' neighbours and check nothing reverts
    edit_cell(pg, 1, 0, 2, 20)   # pcie0 latency 10 -> 20 µs
    text = sidebar_text(pg)
    dev_rows, chan_rows = devices_to_tables(_edited_malvik(28, 64))
    chan_rows[0]["latency µs"] = 20
    expected = fmt_seconds(Problem(load_network("resnet50"), devices_from_tables("malvik", dev_rows, chan_rows))
                           .simulate(single_device(load_network("resnet50"),
                                                   devices_from_tables("malvik", dev_rows, chan_rows), "gpu0"))
                           .result.batch_time)
    assert f"{expected} per batch" in text


def test_add_a_device_creates_its_routes_and_stays(page):
    pg = page
    open_page(pg, "Devices")
    choose(pg, "Start from a preset", "malvik")
    pg.get_by_text("Add a device, connected to every other device").click()
    name = pg.get_by_role("textbox", name="Name", exact=True)
    name.fill("gpu2")
    choose(pg, "Connect it over", "pcie1")
    pg.get_by_role("button", name="Add the device").click()
    settle(pg)
    wait_text(pg, "Added gpu2 with 6 routes.")
    text = sidebar_text(pg)
    assert "4 devices · 2 channels" in text, text
    open_page(pg, "Trace")
    open_page(pg, "Devices")
    no_errors(pg)
    assert "4 devices · 2 channels" in sidebar_text(pg)
    expected = add_device(load_devices("malvik"), {"name": "gpu2", "kind": "gpu", "model": "", "peak TFLOP/s": 15.7,
                                                   "memory GB": 16.0, "memory bandwidth GB/s": 900.0},
                          channel="pcie1")
    assert sorted(expected.channels[1].routes) == sorted(
        [("cpu0", "gpu1"), ("gpu1", "cpu0"), ("gpu1", "gpu0"), ("gpu2", "cpu0"), ("gpu2", "gpu0"), ("gpu2", "gpu1"),
         ("cpu0", "gpu2"), ("gpu0", "gpu2"), ("gpu1", "gpu2")])
    # the routes table shows the new routes after coming back
    routes = pg.locator("[data-testid='stDataFrame']").nth(1).locator("#glide-cell-4-1").text_content()
    assert "gpu2→cpu0" in routes and "cpu0→gpu2" in routes, routes


def _multiselect_values(pg, label: str) -> list[str]:
    box = pg.locator("[data-testid='stMultiSelect']").filter(has=pg.get_by_text(label, exact=True)).first
    tags = box.locator(".react-aria-ComboBox [data-tag]")
    return [tags.nth(i).get_attribute("aria-label") for i in range(tags.count())]


def test_optimize_form_survives_navigation(page):
    pg = page
    open_page(pg, "Optimize")
    assert _multiselect_values(pg, "Algorithms") == ["Genetic algorithm", "MAP-Elites"]
    box = pg.locator("[data-testid='stMultiSelect']").filter(has=pg.get_by_text("Algorithms", exact=True)).first
    box.click()
    pg.get_by_role("option", name="Simulated annealing").click()
    pg.keyboard.press("Escape")
    settle(pg)
    type_number(pg, "Evaluations per algorithm", 3500)
    type_number(pg, "Seed", 7)
    pg.get_by_text("Genetic algorithm parameters (thesis defaults)").click()
    choose(pg, "crossover", "uniform")
    pg.get_by_text("MAP-Elites parameters (thesis defaults)").click()
    dims = pg.locator("[data-testid='stMultiSelect']").filter(has=pg.get_by_text("dimensions", exact=True)).first
    remove = dims.locator(".react-aria-ComboBox").get_by_role("button", name="Remove devices used")
    for _ in range(3):  # a click during a rerun can be redrawn away (seen once in a fresh-clone run): again
        if remove.count():
            remove.click()
        settle(pg)
        if _multiselect_values(pg, "dimensions") == ["most used device", "cross device edges"]:
            break
    assert _multiselect_values(pg, "dimensions") == ["most used device", "cross device edges"]

    open_page(pg, "Trace")
    open_page(pg, "Pipeline")
    open_page(pg, "Optimize")
    no_errors(pg)
    assert _multiselect_values(pg, "Algorithms") == ["Genetic algorithm", "MAP-Elites", "Simulated annealing"]
    assert number(pg, "Evaluations per algorithm") == "3500"
    assert number(pg, "Seed") == "7"
    pg.get_by_text("Genetic algorithm parameters (thesis defaults)").click()
    assert selected(pg, "crossover") == "uniform"
    pg.get_by_text("MAP-Elites parameters (thesis defaults)").click()
    assert _multiselect_values(pg, "dimensions") == ["most used device", "cross device edges"]


def test_pipeline_lecture_survives_navigation(page):
    pg = page
    open_page(pg, "Pipeline")
    type_number(pg, "Micro-batches m", 8)
    pg.get_by_text("Ideal pipeline", exact=True).click()
    settle(pg)
    wait_text(pg, "8 micro-batches of 16 · ideal pipeline")
    pg.get_by_role("tab", name="Choosing m").click()  # the section the user reads stays chosen too
    settle(pg)
    wait_text(pg, "Fastest m that fits in memory")
    open_page(pg, "Trace")
    open_page(pg, "Pipeline")
    no_errors(pg)
    assert number(pg, "Micro-batches m") == "8"
    assert pg.get_by_role("switch", name="Ideal pipeline").is_checked()
    wait_text(pg, "8 micro-batches of 16 · ideal pipeline")
    assert pg.get_by_role("tab", name="Choosing m").get_attribute("aria-selected") == "true"
    wait_text(pg, "Fastest m that fits in memory")


def test_pytorch_import_keeps_its_batch_size(page):
    pytest.importorskip("torch")
    pg = page
    pg.get_by_role("tab", name="Import a PyTorch model").click()
    form = pg.locator("[data-testid='stForm']")
    form.get_by_role("textbox", name="torchvision name").fill("resnet18")
    box = form.get_by_role("spinbutton", name="Batch size")
    box.fill("32")
    pg.get_by_role("button", name="Import").click()
    wait_text(pg, "Imported resnet18", timeout_s=90)
    settle(pg)
    assert "batch 32" in sidebar_text(pg)
    assert number(pg, "Batch size", scope=main(pg).locator("[data-testid='stHorizontalBlock']").filter(
        has=pg.get_by_role("heading", name="resnet18")).first) == "32"
    # any next interaction keeps batch 32
    pg.get_by_text("device", exact=True).first.click()
    settle(pg)
    open_page(pg, "Devices")
    open_page(pg, "Network")
    assert "batch 32" in sidebar_text(pg), sidebar_text(pg)
    # a failed import says why and changes nothing
    pg.get_by_role("tab", name="Import a PyTorch model").click()
    form.get_by_role("textbox", name="torchvision name").fill("no_such_model")
    pg.get_by_role("button", name="Import").click()
    settle(pg)
    pg.get_by_role("tab", name="Built-in networks").click()
    settle(pg)
    pg.get_by_text("op kind", exact=True).first.click()
    settle(pg)
    assert "resnet18" in sidebar_text(pg) and "batch 32" in sidebar_text(pg), sidebar_text(pg)
    assert selected(pg, "Network") == ""  # the built-in chooser no longer claims ResNet-50


def test_trace_downloads_deliver_files(page, tmp_path):
    import json
    pg = page
    open_page(pg, "Trace")
    path = download(pg, pg.get_by_role("button", name="Download the trace (Chrome trace JSON)"),
                    tmp_path / "trace.json")
    trace = json.loads(path.read_text())
    g, devices = load_network("resnet50"), load_devices("malvik-4gpu")
    res = Problem(g, devices).simulate(single_device(g, devices, "gpu0"), trace=True).result
    slices = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    assert len(slices) == len(res.trace) == 459  # 176 forward, 176 backward, 107 weight updates
    assert sum(1 for e in slices if e["cat"] == "op,fwd") == len(g) == 176
    path = download(pg, pg.get_by_role("button", name="Download the placement (JSON)"), tmp_path / "placement.json")
    placement = json.loads(path.read_text())
    assert placement["format"] == "placement/1" and set(placement["assignment"].values()) == {"gpu0"}
    assert len(placement["assignment"]) == 176
    no_errors(pg)


def test_trace_settings_are_a_local_what_if(page):
    pg = page
    open_page(pg, "Trace")
    pg.get_by_text("— change").first.click()
    type_number(pg, "Batches", 10)
    type_number(pg, "In flight", 4)
    wait_text(pg, "What-if on this page: thesis scheme, 10 batch(es), 4 in flight")
    assert "1 batch(es), 1 in flight" in sidebar_text(pg)   # the shared settings did not move
    open_page(pg, "Optimize")
    wait_text(pg, "Simulator settings — thesis scheme, 1 batch(es), 1 in flight")
    open_page(pg, "Trace")
    wait_text(pg, "What-if on this page: thesis scheme, 10 batch(es), 4 in flight")  # and the what-if stays
    pg.get_by_role("button", name="Apply to every page").click()
    settle(pg)
    assert "10 batch(es), 4 in flight" in sidebar_text(pg)
    assert "What-if on this page" not in main(pg).inner_text()
    open_page(pg, "Optimize")
    wait_text(pg, "Simulator settings — thesis scheme, 10 batch(es), 4 in flight")
    no_errors(pg)


def test_every_page_works_offline(page, app_url):
    """No request leaves this machine (the dashboard must work offline: no web fonts, icons or CDNs)."""
    pg = page
    outside = []
    pg.on("request", lambda r: outside.append(r.url) if not r.url.startswith((app_url, "data:", "blob:")) else None)
    pg.reload()
    pg.get_by_role("heading", name="Network", exact=True).first.wait_for()
    settle(pg)
    for title in ("Devices", "Optimize", "Archive", "Trace", "Pipeline", "Benchmark", "Runs", "Network"):
        open_page(pg, title)
        no_errors(pg)
    assert outside == []



def _only_algorithm(pg, keep: str, drop: str) -> None:
    box = pg.locator("[data-testid='stMultiSelect']").filter(has=pg.get_by_text("Algorithms", exact=True)).first
    box.locator(".react-aria-ComboBox").get_by_role("button", name=f"Remove {drop}").click()
    settle(pg)
    assert _multiselect_values(pg, "Algorithms") == [keep]


def test_each_result_shows_as_its_run_finishes_and_stop_clears_the_count(page):
    pg = page
    open_page(pg, "Optimize")
    # a long MAP-Elites run ...
    _only_algorithm(pg, "MAP-Elites", "Genetic algorithm")
    type_number(pg, "Evaluations per algorithm", 5_000_000)
    pg.get_by_role("button", name="Start").click()
    wait_text(pg, "1 optimization run(s) in progress", scope=pg.locator("[data-testid='stSidebar']"))
    # ... and a short GA run beside it
    box = pg.locator("[data-testid='stMultiSelect']").filter(has=pg.get_by_text("Algorithms", exact=True)).first
    box.click()
    pg.get_by_role("option", name="Genetic algorithm").click()
    pg.keyboard.press("Escape")
    _only_algorithm(pg, "Genetic algorithm", "MAP-Elites")
    type_number(pg, "Evaluations per algorithm", 1000)
    pg.get_by_role("button", name="Start").click()
    # the GA's result appears while MAP-Elites is still running
    pg.get_by_role("button", name="Use this placement").first.wait_for(timeout=60_000)
    wait_text(pg, "Genetic algorithm · done")  # the card's status line may follow its button by a rerun
    results = main(pg).inner_text()
    assert re.search(r"run \d+ · Genetic algorithm · done", results)  # its run store id
    assert "1 optimization run(s) in progress" in sidebar_text(pg)
    # stop MAP-Elites: the sidebar's count goes away on this page and the run's result shows
    pg.get_by_role("button", name="Stop", exact=True).first.click()
    pg.get_by_role("button", name="Use this placement").nth(1).wait_for(timeout=60_000)
    settle(pg)
    assert "optimization run(s) in progress" not in sidebar_text(pg)
    assert "· stopped" in main(pg).inner_text()
    no_errors(pg)


def test_a_hostile_network_name_stays_text(page, tmp_path):
    """A name from an uploaded file can neither inject HTML nor markdown (an image would fetch a URL)."""
    import json
    pg = page
    name = '<img src=x onerror="window.pwned=1"> ![x](http://127.0.0.1:9/leak.png) *bold*'
    net = {"format": "placement-network/1", "name": name, "batch_size": 8,
           "ops": [{"name": "x", "kind": "input", "inputs": [], "fwd_flops": 0, "bwd_flops": 0, "output_bytes": 1000,
                    "param_bytes": 0},
                   {"name": "fc", "kind": "linear", "inputs": ["x"], "fwd_flops": 2e6, "bwd_flops": 4e6,
                    "output_bytes": 1000, "param_bytes": 4000}]}
    path = tmp_path / "net.json"
    path.write_text(json.dumps(net))
    pg.get_by_role("tab", name="Upload a file").click()
    pg.locator("[data-testid='stFileUploaderDropzoneInput']").first.set_input_files(str(path))
    wait_text(pg, "2 ops at batch size 8")
    settle(pg)
    for where in (pg.locator("[data-testid='stSidebar']"), main(pg)):
        # the only image is the network's picture (st.image, a data: URL drawn on the server), not the name's
        assert where.locator("img").count() == where.locator("[data-testid='stImage'] img").count()
        assert where.locator("img[src='x'], img[src*='leak']").count() == 0
        assert where.locator("em").filter(has_text="bold").count() == 0
    assert "<img src=x" in sidebar_text(pg)  # shown literally
    assert pg.evaluate("() => window.pwned === undefined")
    open_page(pg, "Optimize")
    assert main(pg).locator("img").count() == 0
    assert "<img src=x" in main(pg).inner_text()


def test_forms_survive_navigation_while_a_run_is_live(page):
    """A live run reruns the sidebar's count every second (a fragment): the form still survives page switches."""
    pg = page
    open_page(pg, "Optimize")
    _only_algorithm(pg, "MAP-Elites", "Genetic algorithm")
    type_number(pg, "Evaluations per algorithm", 3_000_000)
    pg.get_by_role("button", name="Start").click()
    wait_text(pg, "1 optimization run(s) in progress", scope=pg.locator("[data-testid='stSidebar']"))
    for title in ("Devices", "Trace"):
        open_page(pg, title)
        time.sleep(2.5)  # a few of the sidebar's reruns on the other page
        open_page(pg, "Optimize")
        assert _multiselect_values(pg, "Algorithms") == ["MAP-Elites"]
        assert number(pg, "Evaluations per algorithm") == "3000000"
    pg.get_by_role("button", name="Stop all").click()
    settle(pg)
    no_errors(pg)


def _upload_edit_and_return(pg, tmp_path, doc: dict, shown: str, memory_gb: float) -> dict:
    """Upload ``doc`` on the Devices page (``shown`` appears once it is read), set the second device's memory to
    ``memory_gb``, leave for the Network page and come back: the device graph the download delivers."""
    import json
    open_page(pg, "Devices")
    path = tmp_path / "upload.json"
    path.write_text(json.dumps(doc))
    pg.locator("[data-testid='stFileUploaderDropzoneInput']").first.set_input_files(str(path))
    wait_text(pg, shown)
    settle(pg)
    edit_cell(pg, 0, 1, 4, memory_gb)   # the second device's memory GB
    wait_text(pg, "Changes applied")
    open_page(pg, "Network")
    open_page(pg, "Devices")
    no_errors(pg)
    wait_text(pg, shown)
    return json.loads(download(pg, pg.get_by_role("button", name="Download as JSON"), tmp_path / "got.json")
                      .read_text())


def test_a_calibrated_graph_keeps_its_measurements_through_an_edit(page, tmp_path):
    """Upload a calibrated device file (an all-reduce curve, shared cores), change one memory size, leave
    and come back: the measurements are still listed, still in the graph the download delivers."""
    doc = calibrated_devices_doc()
    got = _upload_edit_and_return(page, tmp_path, doc, "Shared resources (1) and measured collectives (1)", 4)
    assert [d["memory_bytes"] for d in got["devices"]] == [8e9, 4e9]
    assert got["collectives"] == doc["collectives"] and got["shared"] == doc["shared"]


def test_a_dgx_graph_keeps_its_tensor_core_rates_through_an_edit(page, tmp_path):
    """Upload a DGX A100 node, change one GPU's memory, leave and come back: the download still carries every
    GPU's bf16 peak, SMs and measured matmul rate and every link's measured bandwidth (the tables once
    dropped them: bf16 ops at the fp32 peak, links at 25 %)."""
    from placement_core.model.devices import devices_to_dict
    doc = devices_to_dict(load_devices("dgx-a100:nodes=1"))
    got = _upload_edit_and_return(page, tmp_path, doc, "dgx-a100:nodes=1", 40)
    assert [d["memory_bytes"] for d in got["devices"]] == [80e9, 40e9] + [80e9] * 6
    for d, want in zip(got["devices"], doc["devices"]):
        assert (d["peak_flops_by_precision"], d["achieved_flops_by_precision"], d["sms"]) == (
            want["peak_flops_by_precision"], want["achieved_flops_by_precision"], 108)
    assert [c["achieved_bandwidth"] for c in got["channels"]] == pytest.approx([300e9 * 370 / 450] * 8)
