"""The Benchmark page in a real browser: import a tiny PyTorch model, measure two placements on two CPU ranks,
read the agreement chart on its three kinds of axes, download the measurements as CSV, leave and come back."""

import csv
import time

import pytest
from browser_util import (choose_python_file, download, main, no_errors, open_page, settle, shot, type_number,
                          wait_text)

pytestmark = pytest.mark.browser

MODEL = ("import torch.nn as nn\n\n"
         "def build():\n    return nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 2))\n")


def _pick(pg, label: str, option: str) -> None:
    """Open the multiselect labelled ``label`` and pick ``option``, as a person does."""
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


def _axes(pg) -> dict:
    """The agreement chart's axis types and ranges as Plotly drew them."""
    plot = pg.locator("[data-testid='stPlotlyChart'] .js-plotly-plot").first
    plot.wait_for()
    return plot.evaluate("el => ({x: el._fullLayout.xaxis.type, y: el._fullLayout.yaxis.type, "
                         "xr: el._fullLayout.xaxis.range, yr: el._fullLayout.yaxis.range})")


def test_benchmark_a_tiny_model_and_download_the_measurements(page, tmp_path):
    pytest.importorskip("torch")
    pg = page
    t0 = time.time()
    model = tmp_path / "mlp.py"
    model.write_text(MODEL)
    pg.get_by_role("tab", name="Import a PyTorch model").click()
    choose_python_file(pg)
    uploader = pg.locator("[data-testid='stFileUploader']").filter(has_text="Python file").first
    uploader.locator("[data-testid='stFileUploaderDropzoneInput']").set_input_files(str(model))
    uploader.get_by_text("mlp.py").wait_for()
    pg.get_by_role("textbox", name="Model in the file").fill("build")
    pg.get_by_role("textbox", name="Input shape of one sample").fill("3, 2, 2")
    pg.get_by_role("button", name="Import", exact=True).click()
    pg.get_by_text("I have read this file and want to run it as").click()  # it runs only once confirmed
    pg.get_by_role("button", name="Run it and import").click()
    wait_text(pg, "Imported build: 5 ops at batch size 32", timeout_s=60)

    open_page(pg, "Benchmark")
    assert pg.get_by_role("textbox", name="PyTorch model").input_value().endswith("mlp.py:build")
    _pick(pg, "Placements", "all on cpu0")
    assert "both run on" not in main(pg).inner_text()  # gpu0 on cpu1, cpu0 on cpu0: no shared device
    type_number(pg, "Timed steps", 2)
    type_number(pg, "Warm-up steps (dropped)", 1)
    pg.get_by_role("button", name="Run the benchmark").click()
    wait_text(pg, "Measured against simulated", timeout_s=90)
    settle(pg)
    no_errors(pg)

    # independent axes by default: each spans its own values (simulated V100 µs against measured CPU ms)
    a = _axes(pg)
    assert a["x"] == a["y"] == "linear" and a["xr"] != a["yr"]
    main(pg).get_by_text("log-log", exact=True).click()
    settle(pg)
    assert _axes(pg)["x"] == _axes(pg)["y"] == "log"
    main(pg).get_by_text("equal axes (y = x diagonal)", exact=True).click()
    settle(pg)
    a = _axes(pg)
    assert a["xr"] == a["yr"] and a["xr"][0] == 0
    for label in ("Pearson r", "Kendall τ", "MAPE"):
        assert main(pg).locator("[data-testid='stMetric']").filter(has_text=label).count() == 1
    shot(pg, "benchmark")

    path = download(pg, pg.locator("[data-testid='stDownloadButton']").get_by_role("button", name="Download as CSV"),
                    tmp_path / "benchmarks.csv")
    rows = list(csv.DictReader(path.open()))
    assert [r["placement"] for r in rows] == ["current: all on gpu0", "all on cpu0"]
    assert all(r["status"] == "ok" and float(r["measured_median_s"]) > 0 and float(r["simulated_s"]) > 0
               for r in rows)
    assert {(r["devices"], r["runner"], r["batch_size"]) for r in rows} == {("cpu:2", "ranks", "8")}

    # leave and come back: the axes, the steps and the measurements are as they were
    open_page(pg, "Trace")
    open_page(pg, "Benchmark")
    wait_text(pg, "Measured against simulated")
    assert _axes(pg)["xr"] == a["xr"]
    assert pg.get_by_role("spinbutton", name="Timed steps").input_value() == "2"
    no_errors(pg)
    assert time.time() - t0 < 120  # about 35 s on an idle 2-core machine
