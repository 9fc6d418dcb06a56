"""``placement experiment e3`` on the thesis' own files (small stand-ins written here in Exprimo's formats and
folder layout), algorithm variants such as ``ga[min_mutation_rate=0.01]``, and the two tables of one file."""

import json

import pytest

from placement_core.cli import main
from placement_core.experiments.e3 import parse_variant, problem_for, splice, split_algorithms
from placement_core.optimize import run

NET = {"layers": {
    "data": {"type": "Input", "tensor": [1, 16, 16, 3]},
    "conv1": {"type": "Convolution", "parents": ["data"], "filter": [3, 3, -1, 32], "padding": "SAME"},
    "conv2": {"type": "Convolution", "parents": ["conv1"], "filter": [3, 3, -1, 32], "padding": "SAME"},
    "conv3": {"type": "Convolution", "parents": ["conv1"], "filter": [1, 1, -1, 32], "padding": "SAME"},
    "add": {"type": "Elementwise", "parents": ["conv2", "conv3"]},
    "pool": {"type": "Pooling", "parents": ["add"], "ksize": [1, 2, 2, 1], "strides": [1, 2, 2, 1],
             "padding": "VALID"},
    "fc": {"type": "InnerProduct", "parents": ["pool"], "num_outputs": 10},
    "prob": {"type": "Softmax", "parents": ["fc"]}}}


def device_file(gpus: int, memory_gb: float) -> dict:
    devices = [{"type": "cpu", "clock": 2600, "peak_gflops": 1800, "memory": 395, "mem_bandwidth": 50}]
    devices += [{"type": "gpu", "clock": 1530, "peak_gflops": 14000, "memory": memory_gb, "mem_bandwidth": 900}
                for _ in range(gpus)]
    n = len(devices)
    for i, d in enumerate(devices):
        d["neighbours"] = [{"comm_channel": 0, "device": j} for j in range(n) if j != i]
    return {"comm_channels": [{"type": "pcie3", "bandwidth": 128}], "devices": devices}


@pytest.fixture()
def exprimo(tmp_path):
    """Exprimo's layout: nets/{alex_v2,resnet50,inception_v3}.json and the device graphs of E3's versions."""
    root = tmp_path / "exprimo"
    (root / "nets").mkdir(parents=True)
    (root / "device_graphs").mkdir()
    for name in ("alex_v2", "resnet50", "inception_v3"):
        (root / "nets" / f"{name}.json").write_text(json.dumps({"name": name, **NET}))
    (root / "device_graphs" / "malvik.json").write_text(json.dumps(device_file(2, 32)))
    (root / "device_graphs" / "malvik-4gpu.json").write_text(json.dumps(device_file(4, 32)))
    for name in ("alexnet", "resnet", "inception"):
        (root / "device_graphs" / f"malvik-4gpu-reduced-{name}.json").write_text(json.dumps(device_file(4, 0.05)))
    return root


def test_variants_are_read_with_their_parameters():
    assert split_algorithms("ga,ga[min_mutation_rate=0.01;population=20],heft") == \
        ["ga", "ga[min_mutation_rate=0.01;population=20]", "heft"]
    assert parse_variant("ga[min_mutation_rate=0.01;population=20]") == \
        ("ga", {"min_mutation_rate": "0.01", "population": "20"})
    assert parse_variant("map-elites") == ("map-elites", {})


@pytest.mark.slow
def test_thesis_files_under_exprimo_2020_go_in_their_own_section(exprimo, tmp_path, capsys):
    md = tmp_path / "e3.md"
    md.write_text("# Experiment E3: optimizer comparison\n\n<!-- e3:own -->\nour table\n<!-- /e3:own -->\n\n"
                  "## Discussion\n\nby hand\n")
    argv = ["experiment", "e3", "--exprimo", str(exprimo), "--budget", "300", "--seeds", "2", "--versions",
            "normal,limited", "--networks", "alexnet", "--algorithms", "ga,ga[min_mutation_rate=0.01],heft",
            "--workers", "1", "--out", str(tmp_path / "out"), "--markdown", str(md)]
    assert main(argv) == 0, capsys.readouterr().err
    text = md.read_text()
    # our table and the discussion untouched; the thesis-files section between them
    assert text.index("our table") < text.index("<!-- e3:exprimo -->") < text.index("## Discussion\n\nby hand")
    assert "--exprimo EXPRIMO_DIR" in text and str(exprimo) not in text
    assert "### normal" in text and "### limited" in text
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ga")}
    assert set(rows) == {"ga", "ga[min_mutation_rate=0.01]"}
    # each cell is what the optimizer gives on the thesis' file under exprimo-2020
    problem = problem_for("limited", "alexnet", exprimo=str(exprimo))
    assert problem.spec.profile == "exprimo-2020" and problem.devices.devices[1].memory_bytes == 0.05e9
    with open(tmp_path / "out" / "results.csv") as f:
        results = f.read()
    for seed in (0, 1):
        a = run(problem, "ga", evaluations=300, seed=seed).best_objective
        b = run(problem, "ga", evaluations=300, seed=seed, params={"min_mutation_rate": 0.01}).best_objective
        assert f"limited,alexnet,ga,thesis,{seed},{a!r}" in results
        assert f"limited,alexnet,ga[min_mutation_rate=0.01],thesis,{seed},{b!r}" in results
    heft = run(problem_for("normal", "alexnet", exprimo=str(exprimo)), "heft", evaluations=300).best_objective
    assert f"normal,alexnet,heft,thesis,0,{heft!r}" in results
    # run again: the section is replaced, not added twice
    assert main(argv) == 0
    assert md.read_text().count("<!-- e3:exprimo -->") == 1


@pytest.mark.parametrize("extra, message", [
    (["--algorithms", "ga[min_mutation=0.01]"], "ga has no parameter 'min_mutation'"),
    (["--algorithms", "ga[min_mutation_rate=2]"], "min_mutation_rate must be in [0"),
    (["--networks", "vgg"], "unknown network 'vgg'"),
])
def test_bad_requests_stop_before_any_run(exprimo, tmp_path, capsys, extra, message):
    code = main(["experiment", "e3", "--exprimo", str(exprimo), "--out", str(tmp_path / "o"),
                 "--markdown", str(tmp_path / "m.md"), *extra])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "m.md").exists()


def test_a_missing_thesis_file_is_named(exprimo, tmp_path, capsys):
    (exprimo / "device_graphs" / "malvik-4gpu-reduced-resnet.json").unlink()
    code = main(["experiment", "e3", "--exprimo", str(exprimo), "--networks", "resnet50", "--versions", "limited",
                 "--out", str(tmp_path / "o"), "--markdown", str(tmp_path / "m.md")])
    err = capsys.readouterr().err
    assert code == 2 and "malvik-4gpu-reduced-resnet.json does not exist" in err and "--exprimo" in err


def test_splice_replaces_one_block_and_inserts_a_new_one_before_the_discussion():
    text = "# T\n\n<!-- e3:own -->\nA\n<!-- /e3:own -->\n\n## Discussion\nD\n"
    once = splice(text, "own", "B")
    assert once == "# T\n\n<!-- e3:own -->\nB\n<!-- /e3:own -->\n\n## Discussion\nD\n"
    both = splice(once, "exprimo", "X")
    assert both == "# T\n\n<!-- e3:own -->\nB\n<!-- /e3:own -->\n\n<!-- e3:exprimo -->\nX\n<!-- /e3:exprimo -->\n" \
                   "\n## Discussion\nD\n"
    assert splice("# T\n", "own", "B") == "# T\n\n<!-- e3:own -->\nB\n<!-- /e3:own -->\n"


def test_without_matplotlib_e3_writes_its_results_and_names_the_figure_it_left_out(exprimo, tmp_path, capsys,
                                                                                     monkeypatch):
    """matplotlib comes with the torch or plots extra only: E3 needs neither torch nor a figure to be useful."""
    import sys
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    out = tmp_path / "out"
    argv = ["experiment", "e3", "--exprimo", str(exprimo), "--budget", "60", "--seeds", "1", "--versions", "normal",
            "--networks", "alexnet", "--algorithms", "heft", "--workers", "1", "--out", str(out),
            "--markdown", str(tmp_path / "e3.md")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert (out / "results.csv").read_text().count("normal,alexnet,heft") == 1
    assert not (out / "e3.png").exists()
    assert f"note: {out / 'e3.png'} was not drawn: matplotlib is not installed" in err and '".[plots]"' in err
