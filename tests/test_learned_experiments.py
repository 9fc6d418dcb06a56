"""The learned placers' experiments (placement experiment generalization | traversal | post) on tiny budgets.

The full runs take tens of minutes (docs/learned.md); these check each path end to end: the files written, the
ratios against an independent run of the same placer, --keep, and the tables' arithmetic.
"""

from __future__ import annotations

import csv
import json
import statistics

import numpy as np
import pytest

pytest.importorskip("torch")

from placement_core.formats.catalog import assets_dir  # noqa: E402
from placement_core.cli import main  # noqa: E402

PTB = str(assets_dir() / "policies" / "placeto-ptb-malvik-4gpu.json")


def read(path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.training
def test_generalization_rows_ratios_and_keep(tmp_path, capsys):
    from placement_core.families import family_graph
    argv = ["experiment", "generalization", "--families", "ptb", "--count", "2", "--budget", "120",
            "--finetune", "40", "--out", str(tmp_path)]
    assert main(argv) == 0
    rows = read(tmp_path / "generalization.csv")
    assert [r["scheme"] for r in rows] == ["zero-shot", "fine-tuned", "map-elites", "ga", "single", "m-etf", "heft",
                                           "heft-memory", "random"]
    assert {r["graph"] for r in rows} == {"ptb-s0-001"}  # the only test graph of 2
    by = {r["scheme"]: r for r in rows}
    me = float(by["map-elites"]["objective_s"])
    for r in rows:
        assert float(r["ratio"]) == pytest.approx(float(r["objective_s"]) / me)
    assert int(by["zero-shot"]["evaluations"]) == 1 and int(by["random"]["evaluations"]) == 100
    assert int(by["fine-tuned"]["evaluations"]) <= 40
    # fine-tuning starts from the zero-shot placement and keeps the best it saw
    assert float(by["fine-tuned"]["objective_s"]) <= float(by["zero-shot"]["objective_s"])
    # zero-shot is what `placement optimize --budget 0` gives on the same graph
    assert main(["graphs", "generate", "--family", "ptb", "--count", "2", "--out", str(tmp_path / "g")]) == 0
    net = tmp_path / "g" / "ptb-s0-001.json"
    capsys.readouterr()
    assert main(["optimize", "--algorithm", "placeto", "--policy", PTB, "--network", str(net), "--devices",
                 "malvik-4gpu", "--budget", "0", "--json"]) == 0
    zero = json.loads(capsys.readouterr().out)
    assert zero["best_objective_s"] == pytest.approx(float(by["zero-shot"]["objective_s"]), rel=1e-9)
    assert len(family_graph("ptb", 0, 1).graph) == len(zero["best_assignment"])
    md = (tmp_path / "generalization.md").read_text()
    assert "placement experiment generalization --families ptb --count 2" in md
    assert f"| zero-shot | {float(by['zero-shot']['ratio']):.3f} |" in md
    assert (tmp_path / "generalization.png").stat().st_size > 1000
    # --keep: another family's rows stay, a graph already measured is not measured again
    other = dict(rows[0], family="nmt", graph="nmt-s0-001")
    with open(tmp_path / "generalization.csv", "a", newline="") as f:
        csv.DictWriter(f, list(rows[0])).writerow(other)
    assert main(argv + ["--keep"]) == 0
    out = capsys.readouterr().out
    assert "[1/" not in out  # nothing left to measure
    kept = read(tmp_path / "generalization.csv")
    assert kept == rows + [other]
    assert "**nmt**" in (tmp_path / "generalization.md").read_text()
    # a scheme a kept graph lacks (one added since it was measured) is measured alone, against the kept MAP-Elites
    without = [r for r in kept if not (r["graph"] == "ptb-s0-001" and r["scheme"] == "heft-memory")]
    with open(tmp_path / "generalization.csv", "w", newline="") as f:
        w = csv.DictWriter(f, list(rows[0]))
        w.writeheader()
        w.writerows(without)
    assert main(argv + ["--keep"]) == 0
    assert "[1/1] ptb-s0-001: heft-memory" in capsys.readouterr().out
    again = read(tmp_path / "generalization.csv")
    assert again[:-1] == without
    added = again[-1]
    assert (added["graph"], added["scheme"]) == ("ptb-s0-001", "heft-memory")
    assert float(added["objective_s"]) == pytest.approx(float(by["heft-memory"]["objective_s"]), rel=1e-12)
    assert float(added["ratio"]) == pytest.approx(float(added["objective_s"]) / me)


@pytest.mark.slow
def test_traversal_places_under_every_order_and_reports_the_spread(tmp_path, capsys):
    argv = ["experiment", "traversal", "--network", "alexnet", "--batch-size", "128", "--train-orders", "2",
            "--test-orders", "3", "--episodes", "8", "--rollouts", "2", "--budget", "100", "--out", str(tmp_path),
            "--policy-out", str(tmp_path / "kept-policy.json")]
    assert main(argv) == 0
    assert (tmp_path / "kept-policy.json").exists()
    assert "--policy-out" not in (tmp_path / "traversal.md").read_text().splitlines()[0]  # not part of the recipe
    rows = read(tmp_path / "traversal.csv")
    assert [r["orders"] for r in rows] == ["train"] * 2 + ["test"] * 3 + ["topological"]
    assert "| 2 of the training orders |" in (tmp_path / "traversal.md").read_text()
    ratios = [float(r["ratio"]) for r in rows]
    # the reference is the better of MAP-Elites and training's best: no greedy placement beats it by much,
    # and each ratio is its objective over that one reference
    refs = {float(r["objective_s"]) / float(r["ratio"]) for r in rows}
    assert max(refs) == pytest.approx(min(refs))
    test = [float(r["ratio"]) for r in rows if r["orders"] == "test"]
    md = (tmp_path / "traversal.md").read_text()
    # the reference is the best of MAP-Elites, training's best, m-ETF and HEFT: no better than m-ETF's plan
    from placement_core import load_devices, load_network
    from placement_core.optimize import run
    from placement_core.problem import ProblemSpec
    problem = ProblemSpec().build(load_network("alexnet", batch_size=128), load_devices("malvik-4gpu"))
    reference = max(refs)
    assert reference <= run(problem, "m-etf", evaluations=1).best_objective + 1e-12
    assert reference <= run(problem, "heft", evaluations=1).best_objective + 1e-12
    assert f"reference (optimized placement) {reference:.4f} s" in md
    assert (f"| 3 unseen random orders | {statistics.fmean(test):.3f} | {min(test):.3f} | {max(test):.3f} | "
            f"{max(test) - min(test):.3f} |") in md
    assert all(np.isfinite(ratios))


def test_post_comparison_table_is_the_mean_over_seeds(tmp_path):
    assert main(["experiment", "post", "--networks", "alexnet", "--devices", "malvik-4gpu", "--algorithms",
                 "pg,post", "--budget", "240", "--seeds", "2", "--out", str(tmp_path)]) == 0
    rows = read(tmp_path / "post.csv")
    assert sorted((r["algorithm"], r["seed"]) for r in rows) == [("pg", "0"), ("pg", "1"), ("post", "0"),
                                                                  ("post", "1")]
    assert all(int(r["evaluations"]) == 240 for r in rows)
    md = (tmp_path / "post.md").read_text()
    for algorithm in ("pg", "post"):
        mean = statistics.fmean(float(r["objective_s"]) for r in rows if r["algorithm"] == algorithm)
        assert f"{mean:.4f} ±" in md
    assert (tmp_path / "post.png").stat().st_size > 1000


@pytest.mark.slow
def test_post_comparison_on_two_workers_gives_the_same_rows_in_job_order(tmp_path):
    argv = ["experiment", "post", "--networks", "alexnet", "--algorithms", "pg,cem", "--budget", "120", "--seeds",
            "2"]
    assert main(argv + ["--out", str(tmp_path / "one")]) == 0
    assert main(argv + ["--workers", "2", "--out", str(tmp_path / "two")]) == 0

    def strip(rows):
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]
    assert strip(read(tmp_path / "two" / "post.csv")) == strip(read(tmp_path / "one" / "post.csv"))


def test_post_table_orders_worst_to_best_with_ties_shown_as_equal():
    """Hand-made rows: on n, ppo and cem tie (median ratio 1.0 and mean 1.0 s; cem's 2 ulps above, float noise), so the
    order reads "ppo = cem"; on m, pg and ppo share the median 1.1 but pg's mean (1.2) is worse than ppo's (1.1)."""
    from placement_core.experiments.post_compare import markdown

    def rows(network, algorithm, objectives):
        return [{"network": network, "algorithm": algorithm, "seed": s, "objective_s": o, "single_gpu_s": 1.0,
                 "ratio": o} for s, o in enumerate(objectives)]
    table = (rows("n", "pg", [1.2, 1.4]) + rows("n", "ppo", [1.0, 1.0]) + rows("n", "cem", [1.0 + 2**-51] * 2)
             + rows("n", "post", [0.9, 0.9]) + rows("m", "pg", [1.0, 1.1, 1.5]) + rows("m", "ppo", [1.1, 1.1, 1.1])
             + rows("m", "cem", [0.8, 0.8, 0.8]) + rows("m", "post", [0.8, 0.8, 0.8]))
    md = markdown(table, "placement experiment post")
    assert md.splitlines()[-1] == ("Worst to best (median ratio, then mean): n: pg < ppo = cem < post; "
                                   "m: pg < ppo < cem = post.")
    assert "| pg | 1.3000 | 1.3000 ± " in md and "| post | **0.9000** | **0.9000 ± 0.0000** |" in md


def test_post_reference_bounds_and_searches_on_a_diamond(tmp_path, capsys):
    """benchmarks/post_reference.py on a hand-made diamond x -> a, b -> c (times per device kind, below) on a CPU
    and two GPUs. By hand: one GPU runs every phase in turn, 3 + 6 + 2 + a's update 1 = 12 s; the critical path
    with free transfers is the fastest fwd + bwd along x, b, c = 0 + 6 + 2 = 8 s; the work spread over the two
    GPUs is (4 + 6 + 2) / 2 = 6 s. Every search starts at or includes one GPU and cannot pass the critical path."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(
        "post_reference", Path(__file__).resolve().parent.parent / "benchmarks" / "post_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def times(gpu, cpu):
        return {"gpu": dict(zip(("fwd", "bwd", "update"), gpu)), "cpu": dict(zip(("fwd", "bwd", "update"), cpu))}
    linear = {"kind": "linear", "output_bytes": 40, "param_bytes": 400, "shape": [4, 10]}
    net = {"format": "placement-network/1", "name": "diamond", "batch_size": 4, "ops": [
        {"name": "x", "kind": "input", "output_bytes": 400, "shape": [4, 100], "times": times((0, 0, 0), (0, 0, 0))},
        {"name": "a", "inputs": ["x"], **linear, "times": times((1, 2, 1), (3, 6, 3))},
        {"name": "b", "inputs": ["x"], **linear, "times": times((2, 4, 0), (10, 20, 0))},
        {"name": "c", "inputs": ["a", "b"], **linear, "times": times((1, 1, 0), (5, 5, 0))}]}
    names = ("cpu0", "gpu0", "gpu1")
    devices = {"format": "placement-devices/1", "name": "d", "devices": [
        {"name": n, "kind": n[:3], "peak_flops": 1e13, "memory_bytes": 1e9, "mem_bandwidth": 9e11} for n in names],
        "channels": [{"name": "pcie", "bandwidth": 16e9, "latency": 1e-5,
                      "routes": [[a, b] for a in names for b in names if a != b]}]}
    (tmp_path / "net.json").write_text(json.dumps(net))
    (tmp_path / "devs.json").write_text(json.dumps(devices))
    argv = ["--networks", str(tmp_path / "net.json"), "--devices", str(tmp_path / "devs.json"), "--budget", "40"]
    module.main(argv + ["--json"])
    rows = json.loads(capsys.readouterr().out)["networks"][str(tmp_path / "net.json")]
    assert rows["single GPU"]["objective_s"] == pytest.approx(12.0)
    assert rows["bound: critical path, free transfers"]["ratio"] == pytest.approx(8 / 12)
    assert rows["bound: work spread over the GPUs"]["ratio"] == pytest.approx(6 / 12)
    searches = {"annealing": 40, "hill-climbing": 40, "ga": 20, "map-elites": 20}
    for name, evaluations in searches.items():
        assert rows[name]["evaluations"] == evaluations
        assert 8 / 12 - 1e-9 <= rows[name]["ratio"] <= 1.0
    module.main(argv)
    text = capsys.readouterr().out
    assert "| bound: critical path, free transfers | 0 | 8.0000 | 0.6667 |" in text
    assert f"| annealing | 40 | {rows['annealing']['objective_s']:.4f} | {rows['annealing']['ratio']:.4f} |" in text


@pytest.mark.slow
def test_generalization_measures_only_the_schemes_asked_for(tmp_path):
    argv = ["experiment", "generalization", "--families", "ptb", "--count", "2", "--budget", "60",
            "--graph-seed", "1", "--schemes", "map-elites,single,heft", "--out", str(tmp_path)]
    assert main(argv) == 0
    rows = read(tmp_path / "generalization.csv")
    assert [(r["graph"], r["scheme"]) for r in rows] == [("ptb-s1-001", s) for s in ("map-elites", "single", "heft")]
    # every ratio divides by MAP-Elites'
    assert main(["experiment", "generalization", "--families", "ptb", "--schemes", "single", "--out",
                 str(tmp_path)]) == 2
