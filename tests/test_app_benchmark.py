"""Benchmark page (AppTest): the form, measured-vs-simulated statistics, errors, a real run, lazy torch."""

import subprocess
import sys
import textwrap
import time
from types import SimpleNamespace

import pytest
from apptest_util import ROOT, assert_clean, decode, figures, frame, goto, metrics, show_tab, start, text

import dashboard.benchjob as benchjob
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
    for j in benchjob.jobs(at.session_state["session_key"]):
        j.thread.join(120)
    at.run()


def test_form_is_prefilled_for_a_builtin_network():
    at = bench_page()
    assert at.text_input(key="bench_source").value == "torchvision:resnet50"
    assert at.text_input(key="bench_shape").value == "3, 224, 224"
    assert at.multiselect(key="bench_chosen").value == ["current: all on gpu0"]
    assert [s.label for s in at.selectbox if s.key.startswith("bench_map_")] == ["gpu0"]
    assert at.selectbox(key="bench_map_gpu0").options == ["cpu0", "cpu1"]  # from "cpu:2"


@pytest.mark.slow
@pytest.mark.parametrize("section,module,name", [
    ("what to measure", "benchchoice", "candidates"),
    ("the device mapping", "benchview", "default_mapping"),
    ("the measurements", "benchresults", "earlier_points"),
])
def test_a_failing_section_leaves_the_others_drawn(monkeypatch, section, module, name):
    """Each section of the page is guarded on its own: a bug planted in one shows its message there, and the
    form, the Run button and the calibration below still draw (the whole page used to go blank)."""
    import importlib

    def broken(*args, **kwargs):
        raise RuntimeError("planted")

    monkeypatch.setattr(importlib.import_module(f"dashboard.{module}"), name, broken)
    at = start()
    goto(at, "benchmark")
    assert not at.exception
    [err] = at.error
    assert err.value.startswith(f"Something went wrong while drawing {section}: RuntimeError: planted")
    assert at.text_input(key="bench_source").value == "torchvision:resnet50"  # the form
    assert at.button(key="bench_run")  # the run (disabled when what to measure failed)
    assert at.button(key="bench_run").disabled == (section != "the measurements")
    assert at.button(key="cal_start")  # the calibration, the last section
    if section != "what to measure":
        assert at.multiselect(key="bench_chosen").value == ["current: all on gpu0"]


@pytest.mark.workers
def test_measured_against_simulated_with_a_fake_runner(monkeypatch):
    calls = []

    def fake(source, shape, placements, devices, runner, batch_size, settings, progress):
        calls.append((source, shape, devices, runner, batch_size, len(placements)))
        return [fake_result(t) for t in (0.050, 0.020, 0.080)]

    monkeypatch.setattr(benchjob, "run_benchmark", fake)
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


@pytest.mark.slow
def test_a_failing_benchmark_shows_its_message(monkeypatch):
    def fake(*args, **kw):
        raise InputError("cuda:0 was asked for, but this machine has no usable CUDA GPU", field="--devices",
                         fix="Use cpu:N here")

    monkeypatch.setattr(benchjob, "run_benchmark", fake)
    at = bench_page()
    run_jobs(at)
    assert not at.exception
    [err] = at.error
    assert "no usable CUDA GPU" in err.value


def test_without_pytorch_the_page_says_so(monkeypatch):
    monkeypatch.setattr(benchjob, "benchmark_backend", lambda: None)
    at = bench_page()
    assert "Real benchmarking is not available here" in text(at)


@pytest.mark.workers
def test_a_real_benchmark_of_a_tiny_model():
    pytest.importorskip("torch")
    at = start()
    code = (b"import torch.nn as nn\n"
            b"def build():\n    return nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 2))\n")
    show_tab(at, "net_tab", "Import a PyTorch model")  # the form is drawn while its tab is open
    at.radio(key="torch_source").set_value("Python file")
    at.file_uploader(key="torch_file").upload("mlp.py", code, "text/x-python")
    at.text_input(key="torch_attr").set_value("build")
    at.text_input(key="torch_shape").set_value("3, 2, 2")
    at.button(key="FormSubmitter:torch_import-Import").click().run()
    at.checkbox(key="torch_confirm_ok").check().run()  # the file runs only once the user confirms
    at.button(key="torch_confirm_run").click().run(timeout=120)
    goto(at, "benchmark")
    assert at.text_input(key="bench_source").value.endswith("mlp.py:build")
    at.multiselect(key="bench_chosen").set_value(["all on cpu0", "all on gpu0"])
    at.number_input(key="bench_steps").set_value(2)
    at.number_input(key="bench_warmup").set_value(1)
    run_jobs(at)
    assert_clean(at)
    table = frame(at, "placement")
    assert list(table["status"]) == ["ok", "ok"] and (table["measured median (ms)"] > 0).all()


@pytest.mark.workers
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


@pytest.mark.slow
def test_the_benchmarked_placements_download_as_csv(monkeypatch):
    """A "Download as CSV" button under the table carries its rows (times in seconds) for comparing elsewhere."""
    import csv
    import io

    import streamlit as st

    monkeypatch.setattr(benchjob, "run_benchmark",
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


def measured_three(monkeypatch, times=(0.050, 0.020, 0.080)):
    """The page after measuring three single-device placements with a fake runner."""
    monkeypatch.setattr(benchjob, "run_benchmark", lambda *a, **kw: [fake_result(t) for t in times])
    at = bench_page()
    options = at.multiselect(key="bench_chosen").options
    at.multiselect(key="bench_chosen").set_value([o for o in options if o.startswith("all on")][:3]).run()
    run_jobs(at)
    assert_clean(at)
    return at


@pytest.mark.slow
def test_the_agreement_chart_has_independent_log_or_equal_axes_and_mape(monkeypatch):
    """Simulated V100 times (ms) against CPU measurements (tens of ms): on equal axes every point sat against the
    y axis; independent axes span each variable's own values, log-log axes are logarithmic."""
    import math

    at = measured_three(monkeypatch)
    table = frame(at, "placement")
    sim, mea = list(table["simulated (ms)"]), [50, 20, 80]
    assert at.radio(key="bench_axes").value == "independent"
    [fig] = figures(at)
    xr, yr = fig["layout"]["xaxis"]["range"], fig["layout"]["yaxis"]["range"]
    # each axis: its own values with an 8 % margin of their spread
    for (lo, hi), values in ((xr, sim), (yr, mea)):
        spread = max(values) - min(values)
        assert lo == pytest.approx(min(values) - 0.08 * spread) and hi == pytest.approx(max(values) + 0.08 * spread)
    assert xr != yr
    # MAPE beside r and tau: mean |sim - measured| / measured, by hand
    by_hand = sum(abs(s - m) / m for s, m in zip(sim, mea)) / 3 * 100
    assert metrics(at)["MAPE"] == f"{by_hand:.3g} %"

    at.radio(key="bench_axes").set_value("log-log").run()
    [fig] = figures(at)
    assert fig["layout"]["xaxis"]["type"] == fig["layout"]["yaxis"]["type"] == "log"
    assert fig["layout"]["yaxis"]["range"] == pytest.approx([math.log10(20) - 0.25, math.log10(80) + 0.25])
    line = fig["data"][0]
    assert line["name"] == "y = x" and decode(line["x"]) == decode(line["y"])

    at.radio(key="bench_axes").set_value("equal").run()
    [fig] = figures(at)
    assert fig["layout"]["xaxis"]["range"] == fig["layout"]["yaxis"]["range"] == \
        pytest.approx([0, max(sim + mea) * 1.1])
    assert fig["layout"]["xaxis"]["type"] == "linear"


@pytest.mark.slow
def test_a_warning_names_devices_that_share_a_local_device():
    at = bench_page()
    assert at.selectbox(key="bench_map_gpu0").value == "cpu0"
    # adding a placement on cpu0: cpu0 takes the local cpu0 (same name), so gpu0 moves to the free cpu1
    at.multiselect(key="bench_chosen").set_value(["current: all on gpu0", "all on cpu0"]).run()
    assert [at.selectbox(key=f"bench_map_{n}").value for n in ("cpu0", "gpu0")] == ["cpu0", "cpu1"]
    assert not at.warning
    at.multiselect(key="bench_chosen").set_value(["all on gpu0", "all on gpu1"]).run()
    assert [at.selectbox(key=f"bench_map_{n}").value for n in ("gpu0", "gpu1")] == ["cpu0", "cpu1"]
    assert not at.warning
    at.selectbox(key="bench_map_gpu1").set_value("cpu0").run()
    [w] = at.warning
    assert w.value.startswith("gpu0 and gpu1 both run on cpu0 (cpu): the measured times then serialise work "
                              "that the simulator runs in parallel")
    # one process runs every device of the in-process runner: cpu0 and cpu1 are one CPU there
    at.selectbox(key="bench_map_gpu1").set_value("cpu1")
    at.selectbox(key="bench_runner").set_value("inprocess").run()
    [w] = at.warning
    assert w.value.startswith("gpu0 and gpu1 both run on cpu (in one process)")


@pytest.mark.slow
def test_the_forms_choices_survive_another_page():
    at = bench_page()
    at.text_input(key="bench_devices").set_value("cpu:3")
    at.number_input(key="bench_steps").set_value(7)
    at.selectbox(key="bench_runner").set_value("inprocess")
    at.multiselect(key="bench_chosen").set_value(["all on gpu1"])
    at.number_input(key="cal_rounds").set_value(2)
    at.run()
    at.selectbox(key="bench_map_gpu1").set_value("cpu2").run()
    goto(at, "trace")
    goto(at, "benchmark")
    assert_clean(at)
    assert at.text_input(key="bench_devices").value == "cpu:3"
    assert at.number_input(key="bench_steps").value == 7
    assert at.selectbox(key="bench_runner").value == "inprocess"
    assert at.multiselect(key="bench_chosen").value == ["all on gpu1"]
    assert at.selectbox(key="bench_map_gpu1").value == "cpu2"
    assert at.number_input(key="cal_rounds").value == 2
    assert not at.warning  # no "default value but also set via the Session State API" complaint


@pytest.mark.slow
def test_the_top_k_of_a_stored_run(monkeypatch):
    """The K best distinct placements of a stored MAP-Elites run of the current setup, measured: simulated and
    measured rank side by side with Kendall tau, stored with the run."""
    from placement_core import Problem, load_devices, load_network
    from placement_core.store.recording import start_run
    from placement_core.store import RunStore

    problem = Problem(load_network("resnet50"), load_devices("malvik-4gpu"))  # the page's default setup
    with RunStore() as store:
        run_id, _ = start_run(store, problem, "map-elites", evaluations=400, seed=3)
        kept = [store.get(run_id).best_placement] + [r["placement"] for r in store.archive_rows(run_id)]
    objectives = sorted(problem.evaluate(x) for x in {tuple(map(int, x)) for x in kept})  # distinct, best first
    measured = (0.030, 0.010, 0.020)
    monkeypatch.setattr(benchjob, "run_benchmark", lambda *a, **kw: [fake_result(t) for t in measured])
    at = bench_page()
    at.radio(key="bench_mode").set_value("The K best placements of a run").run()
    [label] = at.selectbox(key="bench_top_run").options
    assert label.startswith(f"run {run_id} · MAP-Elites (stored")
    at.number_input(key="bench_top_k").set_value(3).run()
    assert_clean(at)
    preview = frame(at, "simulated rank")
    assert list(preview["simulated objective (ms)"]) == pytest.approx([o * 1e3 for o in objectives[:3]])
    assert preview["placement"][0] == f"best of run {run_id}" and preview["placement"].is_unique
    run_jobs(at)
    assert_clean(at)
    ranking = [df.value for df in at.dataframe if "measured rank" in df.value.columns][0]
    assert list(ranking["measured rank"]) == [3, 1, 2]
    # tau by hand: the simulated order 1 < 2 < 3 (no ties among these three) against 30, 10, 20 ms:
    # pairs (1,2) discordant, (1,3) discordant, (2,3) concordant -> (1 - 2) / 3
    assert len(set(objectives[:3])) == 3
    assert f"**{-1 / 3:.3f}**" in text(at)
    with RunStore() as store:
        rows = store.benchmarks(run_id=run_id)
    assert [r["label"] for r in rows] == list(preview["placement"])
    assert [r["measured_median_s"] for r in rows] == list(measured)


def import_tiny_model(at):
    """The Network page's PyTorch import of a 3-op MLP (input 3x2x2, batch 32), as a person does it."""
    code = (b"import torch.nn as nn\n"
            b"def build():\n    return nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 2))\n")
    show_tab(at, "net_tab", "Import a PyTorch model")  # the form is drawn while its tab is open
    at.radio(key="torch_source").set_value("Python file")
    at.file_uploader(key="torch_file").upload("mlp.py", code, "text/x-python")
    at.text_input(key="torch_attr").set_value("build")
    at.text_input(key="torch_shape").set_value("3, 2, 2")
    at.button(key="FormSubmitter:torch_import-Import").click().run()
    at.checkbox(key="torch_confirm_ok").check().run()  # the file runs only once the user confirms
    at.button(key="torch_confirm_run").click().run(timeout=120)
    assert_clean(at)


@pytest.mark.workers
def test_calibrate_from_the_page_then_use_it():
    """Calibrate runs `placement calibrate` in the background (it keeps going on another page); then the
    calibrated 'local' devices and this network's measured op times become the current setup."""
    pytest.importorskip("torch")
    from dashboard import calibview
    from placement_core.formats.catalog import user_dir

    at = start()
    import_tiny_model(at)
    goto(at, "benchmark")
    at.number_input(key="cal_steps").set_value(1)
    at.selectbox(key="cal_max").set_value("1 MB (fast)")
    at.button(key="cal_start").click().run()
    job = calibview.job(at.session_state["session_key"])
    assert job.status == "running" and job.argv[3:5] == ["calibrate", "--model"]
    assert job.argv[job.argv.index("--batch-size") + 1] == "32"  # the network's batch: its op times match it
    [bar] = at.get("progress")
    assert bar.proto.text.startswith("Calibrating build (batch 32) on cpu:2 for ")
    goto(at, "network")  # the calibration goes on while the user is elsewhere
    job.thread.join(240)
    assert job.status == "done", (job.error, job.lines)
    assert sum("(round 1/1)" in line for line in job.lines) == 2 and job.fraction == 0.99
    goto(at, "benchmark")
    assert_clean(at)
    assert "Calibrated build (batch 32) on cpu:2" in text(at)
    assert "cpu0-cpu1" in at.code[0].value
    assert (user_dir() / "timings" / "local" / "build-3x2x2-b32.json").is_file()
    at.button(key="cal_use").click().run()
    assert_clean(at)
    assert at.session_state["devices"].names == ["cpu0", "cpu1"]
    assert at.session_state["sim"].timings == "local"
    assert "measured op times ('local')" in "\n".join(str(m.value) for m in at.sidebar.markdown)
    assert "the simulator uses the op times measured for build at batch 32" in text(at)


@pytest.mark.workers
def test_a_failing_calibration_says_why():
    at = bench_page()
    at.text_input(key="bench_source").set_value("torchvision:no_such_model").run()
    at.button(key="cal_start").click().run()
    from dashboard import calibview
    job = calibview.job(at.session_state["session_key"])
    job.thread.join(120)
    at.run()
    [err] = at.error
    assert err.value.startswith("The calibration failed: ") and "no\\_such\\_model" in err.value
    assert "Traceback" not in err.value


@pytest.mark.slow
def test_the_top_k_of_a_live_run(monkeypatch):
    """A run of this session (Optimize page) offers its K best: the best, then the archive's elites by objective,
    each placement once; a GA run keeps only its best and says so."""
    from apptest_util import wait_for_runs

    from dashboard.background_runs import REGISTRY

    monkeypatch.setattr(benchjob, "run_benchmark", lambda *a, **kw: [fake_result(t) for t in (0.01, 0.02, 0.03, 0.04)])
    at = start()
    goto(at, "optimize")
    at.number_input(key="opt_evaluations").set_value(300)
    at.button(key="opt_start").click().run()
    wait_for_runs(at)
    ga, me = sorted(REGISTRY.runs(at.session_state["session_key"]), key=lambda r: r.id)
    goto(at, "benchmark")
    at.radio(key="bench_mode").set_value("The K best placements of a run").run()
    assert at.selectbox(key="bench_top_run").options == [ga.name, me.name]  # not again as stored runs
    at.selectbox(key="bench_top_run").set_value(me.name)
    at.number_input(key="bench_top_k").set_value(4).run()
    assert_clean(at)
    preview = frame(at, "simulated rank")
    distinct = {tuple(map(int, x)) for x in [me.result.best_placement] +
                [e.placement for e in me.result.archive.elites.values()]}
    expected = sorted(me.problem.evaluate(x) for x in distinct)[:4]
    assert list(preview["simulated objective (ms)"]) == pytest.approx([o * 1e3 for o in expected])
    assert preview["placement"][0] == f"best of {me.name}" and preview["placement"].is_unique
    run_jobs(at)
    assert_clean(at)
    ranking = [df.value for df in at.dataframe if "measured rank" in df.value.columns][0]
    assert list(ranking["measured rank"]) == [1, 2, 3, 4]
    from placement_core.store import RunStore
    with RunStore() as store:
        assert [b["run_id"] for b in store.benchmarks()] == [me.store_id] * 4
    # a finished GA run offers its best distinct evaluated placements too (it used to offer only its best)
    at.selectbox(key="bench_top_run").set_value(ga.name).run()
    ga_rows = frame(at, "simulated rank")
    assert list(ga_rows["placement"])[0] == f"best of {ga.name}" and len(ga_rows) == 4
    assert list(ga_rows["simulated objective (ms)"]) == pytest.approx(
        [f * 1e3 for f, _ in ga.result.kept[:4]])
    assert f"{ga.name} keeps" not in text(at)  # no note that the run has fewer than K to offer


@pytest.mark.workers
def test_stop_ends_a_calibration_and_its_workers():
    pytest.importorskip("torch")
    import psutil

    from dashboard import calibview

    at = start()
    import_tiny_model(at)
    goto(at, "benchmark")
    at.button(key="cal_start").click().run()
    job = calibview.job(at.session_state["session_key"])
    deadline = time.time() + 120
    while not job.lines and job.status == "running" and time.time() < deadline:  # the workers are measuring
        time.sleep(0.2)
    workers = psutil.Process(job.proc.pid).children(recursive=True)
    assert workers, "the calibration's worker processes"
    at.button(key="cal_stop").click().run()
    job.thread.join(30)
    assert job.status == "stopped" and job.proc.poll() is not None
    gone, alive = psutil.wait_procs(workers, timeout=20)
    assert not alive, f"workers left running: {alive}"
    at.run()
    assert "The calibration was stopped; nothing was saved." in text(at)
    assert not at.button(key="cal_start").disabled


@pytest.mark.workers
def test_the_model_source_follows_the_network():
    """What was typed for one network does not carry over to the next: after importing another model, the
    source, sample shape and batch are that model's (while other choices, like the devices, stay)."""
    pytest.importorskip("torch")
    at = bench_page()
    at.text_input(key="bench_source").set_value("torchvision:resnet50(weights=None)")
    at.text_input(key="bench_devices").set_value("cpu:3").run()
    goto(at, "network")
    import_tiny_model(at)
    goto(at, "benchmark")
    assert at.text_input(key="bench_source").value.endswith("mlp.py:build")
    assert at.text_input(key="bench_shape").value == "3, 2, 2"
    assert at.number_input(key="bench_batch").value == 8
    assert at.text_input(key="bench_devices").value == "cpu:3"


@pytest.mark.parametrize("allowed,blocked", [("0", True), ("1", False)])
def test_model_code_from_a_file_is_refused_when_code_upload_is_off(monkeypatch, tmp_path, allowed, blocked):
    """PLACEMENT_ALLOW_CODE_UPLOAD=0 covered the Network page only: the Benchmark page and its calibration
    still ran FILE.py:NAME (a worker process imports the file)."""
    monkeypatch.setenv("PLACEMENT_ALLOW_CODE_UPLOAD", allowed)
    started = []
    monkeypatch.setattr(benchjob, "run_benchmark", lambda *a, **k: started.append(a) or [])
    at = bench_page()
    at.text_input(key="bench_source").set_value(str(tmp_path / "model.py") + ":Net").run()
    refused = [e.value for e in at.error if "turned off" in e.value]
    assert bool(refused) == blocked
    assert at.button(key="bench_run").disabled == blocked
    assert at.button(key="cal_start").disabled == blocked
    at.text_input(key="bench_source").set_value("torchvision:resnet50").run()  # a torchvision name always runs
    assert not [e for e in at.error if "turned off" in e.value]
    assert not at.button(key="cal_start").disabled


@pytest.mark.slow
def test_simulated_times_carry_the_calibrations_interval(monkeypatch):
    """Issue 29 (5): with a calibration whose op times record their spread (5 % each, keyed by device kind), each
    simulated time gets its 90 % interval in the table and as a bar in the chart, and two GPUs measured as one
    kind are said to be indistinguishable. A single GPU runs the ops in turn, so the step's spread is the
    quadrature sum of the ops': 5 % x sqrt(sum of squares) / sum, worked out below."""
    import json
    import math
    from dataclasses import replace

    from placement_core.cost.timings import user_timings_path

    from placement_core import load_network

    at = bench_page()
    g = load_network("resnet50")  # the page's default network
    t = 1e-4
    ops = {op.name: {"gpu": {"fwd": t, "bwd": 2 * t, "update": 0.0, "fwd_spread": 0.05, "bwd_spread": 0.05},
                     "cpu": {"fwd": 10 * t, "bwd": 20 * t, "update": 0.0}} for op in g.ops}
    path = user_timings_path(g.name, (1, 3, 224, 224), g.batch_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": "placement-timings/1", "network": g.name, "input_shape": [1, 3, 224, 224],
                                "batch_size": g.batch_size, "ops": ops}))
    at.session_state["sim"] = replace(at.session_state["sim"], timings="local")
    at.run()
    monkeypatch.setattr(benchjob, "run_benchmark", lambda *a, **kw: [fake_result(x) for x in (0.02, 0.021, 0.2)])
    at.number_input(key="bench_batch").set_value(g.batch_size)
    at.multiselect(key="bench_chosen").set_value(["current: all on gpu0", "all on gpu1", "all on cpu0"]).run()
    run_jobs(at)
    assert_clean(at)
    table = frame(at, "placement")
    n = len(g.ops)
    rel_sd = 0.05 * math.sqrt(n * (t ** 2 + (2 * t) ** 2)) / (n * 3 * t)
    for k in (0, 1):  # the GPUs: an interval around the simulated time, about 2 x 1.645 sd wide
        sim = table["simulated (ms)"][k]
        lo, hi = (float(x) for x in table["simulated, 90 % (ms)"][k].split(" – "))
        assert lo < sim < hi
        assert 0.6 * 3.29 * rel_sd < (hi - lo) / sim < 1.5 * 3.29 * rel_sd
    assert table["simulated, 90 % (ms)"][2] != ""  # the CPU's times carry no spread: its step does not move
    lo, hi = (float(x) for x in table["simulated, 90 % (ms)"][2].split(" – "))
    assert lo == pytest.approx(hi, rel=1e-9)
    [fig] = figures(at)
    [points] = [tr for tr in fig["data"] if tr.get("name") == "benchmarked placements"]
    assert len(points["error_x"]["array"]) == 3 and points["error_x"]["array"][0] > 0
    assert "cannot tell apart current: all on gpu0 and all on gpu1" in text(at)
    assert "all on cpu0" not in text(at).split("cannot tell apart")[1].split(":")[0]
