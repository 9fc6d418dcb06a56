"""Benchmark page (AppTest): the form, measured-vs-simulated statistics, errors, a real run, lazy torch."""

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
from apptest_util import ROOT, assert_clean, figures, frame, goto, metrics, start, text

import dashboard.benchview as benchview
from placement_core import InputError


def fake_result(median_s):
    r = SimpleNamespace(status="ok", median_step_s=median_s, quartiles_s=(median_s * 0.9, median_s * 1.1),
                        message="")
    r.to_dict = lambda: {"status": "ok", "median_step_s": median_s, "iqr_s": median_s * 0.2, "message": ""}
    return r


def bench_page():
    at = start()
    goto(at, "benchmark")
    assert_clean(at)
    return at


def run_jobs(at):
    at.button(key="bench_run").click().run()
    for j in benchview.jobs(at.session_state["session_key"]):
        j.thread.join(120)
    at.run()


def test_form_is_prefilled_for_a_builtin_network():
    at = bench_page()
    assert at.text_input(key="bench_source").value == "torchvision:resnet50"
    assert at.text_input(key="bench_shape").value == "3, 224, 224"
    assert at.multiselect(key="bench_chosen").value == ["current: all on gpu0"]
    assert [s.label for s in at.selectbox if s.key.startswith("bench_map_")] == ["gpu0"]
    assert at.selectbox(key="bench_map_gpu0").options == ["cpu0", "cpu1"]  # from "cpu:2"


def test_measured_against_simulated_with_a_fake_runner(monkeypatch):
    calls = []

    def fake(source, shape, placements, devices, runner, batch_size, settings, progress):
        calls.append((source, shape, devices, runner, batch_size, len(placements)))
        return [fake_result(t) for t in (0.050, 0.020, 0.080)]

    monkeypatch.setattr(benchview, "run_benchmark", fake)
    at = bench_page()
    options = at.multiselect(key="bench_chosen").options
    at.multiselect(key="bench_chosen").set_value([o for o in options if o.startswith("all on")][:3]).run()
    run_jobs(at)
    assert_clean(at)
    assert calls == [("torchvision:resnet50", (1, 3, 224, 224), "cpu:2", "ranks", 8, 3)]
    table = frame(at, "placement")
    assert list(table["measured median (ms)"]) == [50, 20, 80]
    sim = list(table["simulated (ms)"])
    m = metrics(at)
    assert m["Placements measured"] == "3"
    from placement_core.analysis import kendall_tau, pearson_r
    assert m["Pearson r"] == f"{pearson_r(sim, [50, 20, 80]):.3f}"
    assert m["Kendall τ"] == f"{kendall_tau(sim, [50, 20, 80]):.3f}"
    [fig] = figures(at)
    names = [t["name"] for t in fig["data"]]
    assert names[0] == "y = x" and names[1].startswith("fit: measured =") and names[2] == "benchmarked placements"
    assert fig["layout"]["xaxis"]["title"]["text"] == "simulated time per batch (ms)"
    at.button(key="bench_clear").click().run()
    assert "Measured against simulated" not in text(at)

    # every measurement went to the run store; another session sees them as earlier measurements
    from placement_core.store import RunStore
    with RunStore() as store:
        rows = store.benchmarks(network_name="resnet50")
    assert [r["measured_median_s"] for r in rows] == [0.050, 0.020, 0.080]
    assert [r["simulated_s"] * 1e3 for r in rows] == pytest.approx(sim)
    assert [r["label"] for r in rows] == list(table["placement"]) and {r["batch_size"] for r in rows} == {8}
    other = bench_page()
    assert "Measured against simulated" not in text(other)
    other.toggle(key="bench_earlier").set_value(True).run()
    assert_clean(other)
    again = frame(other, "placement")
    assert list(again["measured median (ms)"]) == [50, 20, 80]
    assert list(again["simulated (ms)"]) == pytest.approx(sim)
    assert metrics(other)["Placements measured"] == "3"


def test_a_failing_benchmark_shows_its_message(monkeypatch):
    def fake(*args, **kw):
        raise InputError("cuda:0 was asked for, but this machine has no usable CUDA GPU", field="--devices",
                         fix="Use cpu:N here")

    monkeypatch.setattr(benchview, "run_benchmark", fake)
    at = bench_page()
    run_jobs(at)
    assert not at.exception
    [err] = at.error
    assert "no usable CUDA GPU" in err.value


def test_without_pytorch_the_page_says_so(monkeypatch):
    monkeypatch.setattr(benchview, "benchmark_backend", lambda: None)
    at = bench_page()
    assert "Real benchmarking is not available here" in text(at)


def test_a_real_benchmark_of_a_tiny_model():
    pytest.importorskip("torch")
    at = start()
    code = (b"import torch.nn as nn\n"
            b"def build():\n    return nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 2))\n")
    at.radio(key="torch_source").set_value("Python file")
    at.file_uploader(key="torch_file").upload("mlp.py", code, "text/x-python")
    at.text_input(key="torch_attr").set_value("build")
    at.text_input(key="torch_shape").set_value("3, 2, 2")
    at.button(key="FormSubmitter:torch_import-Import").click().run(timeout=120)
    goto(at, "benchmark")
    assert at.text_input(key="bench_source").value.endswith("mlp.py:build")
    at.multiselect(key="bench_chosen").set_value(["all on cpu0", "all on gpu0"])
    at.number_input(key="bench_steps").set_value(2)
    at.number_input(key="bench_warmup").set_value(1)
    run_jobs(at)
    assert_clean(at)
    table = frame(at, "placement")
    assert list(table["status"]) == ["ok", "ok"] and (table["measured median (ms)"] > 0).all()


def test_drawing_the_pages_does_not_import_torch():
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        from apptest_util import start, goto
        at = start()
        for page in ("devices", "optimize", "archive", "trace", "benchmark", "network"):
            goto(at, page)
            assert not at.exception
        print("torch imported:", "torch" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert "torch imported: False" in out.stdout, out.stdout + out.stderr


def test_the_benchmarked_placements_download_as_csv(monkeypatch):
    """A "Download as CSV" button under the table carries its rows (times in seconds) for comparing elsewhere."""
    import csv
    import io

    import streamlit as st

    monkeypatch.setattr(benchview, "run_benchmark",
                        lambda *a, **kw: [fake_result(t) for t in (0.050, 0.020)])
    offered = []
    original = st.download_button

    def spy(label, data, *args, **kwargs):
        offered.append((label, data, kwargs.get("file_name"), kwargs.get("mime")))
        return original(label, data, *args, **kwargs)

    at = bench_page()
    assert not at.get("download_button")  # nothing measured yet, nothing to download
    monkeypatch.setattr(st, "download_button", spy)
    options = at.multiselect(key="bench_chosen").options
    chosen = [o for o in options if o.startswith("all on")][:2]
    at.multiselect(key="bench_chosen").set_value(chosen).run()
    run_jobs(at)
    assert_clean(at)
    assert [b.proto.label for b in at.get("download_button")] == ["Download as CSV"]
    label, data, file_name, mime = offered[-1]
    assert (label, file_name, mime) == ("Download as CSV", "benchmarks-resnet50.csv", "text/csv")
    rows = list(csv.DictReader(io.StringIO(data.decode())))
    table = frame(at, "placement")
    assert [r["placement"] for r in rows] == list(table["placement"]) == chosen
    assert [float(r["measured_median_s"]) for r in rows] == [0.050, 0.020]
    assert [float(r["iqr_s"]) for r in rows] == pytest.approx([0.050 * 0.2, 0.020 * 0.2])
    assert [float(r["simulated_s"]) * 1e3 for r in rows] == pytest.approx(list(table["simulated (ms)"]))
    assert {(r["status"], r["devices"], r["runner"], r["batch_size"]) for r in rows} == {("ok", "cpu:2", "ranks", "8")}
    # the rows name the measurements kept in the run store
    from placement_core.store import RunStore
    with RunStore() as store:
        assert [str(b["id"]) for b in store.benchmarks(network_name="resnet50")] == \
            [r["stored_benchmark"] for r in rows]
