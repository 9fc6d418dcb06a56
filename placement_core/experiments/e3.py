"""Experiment E3 of the thesis (§4.3.3): every algorithm on three versions of the placement problem.

Versions: ``normal`` (Malvik: CPU + 2 V100), ``limited`` (4 V100 with memory
capped so that all GPUs must be used: 200 MB for AlexNet, 2.5 GB for ResNet-50
and Inception-V3) and ``pipelined`` (malvik-4gpu, 10 batches, 4 in flight).
Each algorithm gets the same evaluation budget (20,000 in the thesis);
stochastic ones run with several seeds, deterministic ones once. Results go
to a CSV, a markdown table with mean +- 95 % confidence intervals, and plots.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..problem import ProblemSpec

NETWORKS = ("alexnet", "resnet50", "inception_v3")
VERSIONS = ("normal", "limited", "pipelined")
LIMITED = {"alexnet": "malvik-4gpu-limited-alexnet", "resnet50": "malvik-4gpu-limited-resnet50",
           "inception_v3": "malvik-4gpu-limited-inception"}
FIELDS = ["version", "network", "algorithm", "schedule", "seed", "objective_s", "batch_time_s", "feasible",
          "evaluations", "wall_s"]


@dataclass(frozen=True)
class Job:
    version: str
    network: str
    algorithm: str
    seed: int
    budget: int
    schedule: str = "thesis"


def spec_for(version: str, schedule: str = "thesis") -> ProblemSpec:
    """E3's recipe: one batch (normal, limited), or the pipelined case: ten batches, four in flight under the
    thesis scheme, or the same parallelism as one batch split into four micro-batches under GPipe / 1F1B."""
    if version in ("normal", "limited"):
        return ProblemSpec()
    if version == "pipelined":
        return ProblemSpec(batches=10, in_flight=4) if schedule == "thesis" else \
            ProblemSpec(schedule=schedule, micro_batches=4)
    raise ValueError(f"unknown E3 version {version!r}")


def devices_for(version: str, network: str) -> str:
    """The device preset of each E3 version (the limited one caps the GPUs' memory per network)."""
    if version == "limited":
        return LIMITED[network]
    return "malvik" if version == "normal" else "malvik-4gpu"


def problem_for(version: str, network: str, schedule: str = "thesis"):
    from .. import load_devices, load_network
    spec = spec_for(version, schedule)
    return spec.build(load_network(network), load_devices(devices_for(version, network)))


def run_job(job: Job) -> dict:
    from ..optimize import run
    problem = problem_for(job.version, job.network, job.schedule)
    t = time.perf_counter()
    r = run(problem, job.algorithm, evaluations=job.budget, seed=job.seed)
    return {"version": job.version, "network": job.network, "algorithm": job.algorithm, "schedule": job.schedule,
            "seed": job.seed, "objective_s": r.best_objective, "batch_time_s": r.best.result.batch_time,
            "feasible": int(r.best.feasible), "evaluations": r.evaluations,
            "wall_s": round(time.perf_counter() - t, 3), "_history": r.history.tolist()}


def jobs(versions, networks, algorithms, seeds: int, budget: int, schedules=("thesis",)) -> list[Job]:
    from ..optimize import ALGORITHMS
    out = []
    for v in versions:
        for net in networks:
            for sched in (schedules if v == "pipelined" else ("thesis",)):
                for alg in algorithms:
                    n = 1 if ALGORITHMS[alg].deterministic else seeds
                    out.extend(Job(v, net, alg, s, budget, sched) for s in range(n))
    return out


def mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95 % confidence interval (Student's t)."""
    m = statistics.fmean(values)
    if len(values) < 2:
        return m, 0.0
    t95 = {2: 12.706, 3: 4.303, 4: 3.182, 5: 2.776, 6: 2.571, 7: 2.447, 8: 2.365, 9: 2.306, 10: 2.262}
    t = t95.get(len(values), 1.96)
    return m, t * statistics.stdev(values) / math.sqrt(len(values))


def summarize(rows: list[dict]) -> dict:
    cells: dict[tuple, list[float]] = {}
    feasible: dict[tuple, list[int]] = {}
    for r in rows:
        key = (r["version"], r["network"], r["schedule"], r["algorithm"])
        cells.setdefault(key, []).append(float(r["objective_s"]))
        feasible.setdefault(key, []).append(int(r["feasible"]))
    return {k: (*mean_ci(v), len(v), sum(feasible[k])) for k, v in cells.items()}


def markdown(rows: list[dict], command: str) -> str:
    from ..optimize import ALGORITHMS
    summary = summarize(rows)
    algorithms = [a for a in ALGORITHMS if any(k[3] == a for k in summary)]
    lines = ["# Experiment E3: optimizer comparison", "",
             "Reproduce with:", "", f"```bash\n{command}\n```", "",
             "Objective = simulated time per batch in seconds plus the thesis memory penalty (1 ms per MB over "
             "capacity); lower is better. Cells: mean ± half-width of the 95 % confidence interval over seeds "
             "(Student's t), or the single value of a deterministic algorithm. † marks cells where some runs "
             "ended with a placement that overflows memory. **Bold** = best mean in its column.", ""]
    columns = sorted({(k[0], k[1], k[2]) for k in summary},
                     key=lambda c: (VERSIONS.index(c[0]), NETWORKS.index(c[1]) if c[1] in NETWORKS else 9, c[2]))
    for version in VERSIONS:
        cols = [c for c in columns if c[0] == version]
        if not cols:
            continue
        lines += [f"## {version}", ""]
        header = [" algorithm "] + [f" {c[1]}{'' if c[2] == 'thesis' else ' / ' + c[2]} " for c in cols]
        lines.append("|" + "|".join(header) + "|")
        lines.append("|" + "|".join(["---"] * len(header)) + "|")
        best = {c: min((summary[(*c, a)][0] for a in algorithms if (*c, a) in summary), default=None)
                for c in cols}
        for a in algorithms:
            cells = []
            for c in cols:
                if (*c, a) not in summary:
                    cells.append(" – ")
                    continue
                m, h, n, feas = summary[(*c, a)]
                text = f"{m:.4f}" + (f" ± {h:.4f}" if n > 1 else "")
                if feas < n:
                    text += " †"
                if m == best[c]:
                    text = f"**{text}**"
                cells.append(f" {text} ")
            lines.append(f"| {a} |" + "|".join(cells) + "|")
        lines.append("")
    return "\n".join(lines)


def plot(rows: list[dict], histories: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from ..optimize import ALGORITHMS
    panels = sorted({(r["version"], r["network"], r["schedule"]) for r in rows},
                    key=lambda c: (VERSIONS.index(c[0]), NETWORKS.index(c[1]) if c[1] in NETWORKS else 9, c[2]))
    cols = 3
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.8 * nrows), squeeze=False)
    colors = plt.get_cmap("tab20").colors
    algos = list(ALGORITHMS)
    for ax, panel in zip(axes.flat, panels):
        for a in algos:
            curves = histories.get((*panel, a))
            if not curves:
                continue
            color = colors[algos.index(a) % len(colors)]
            if ALGORITHMS[a].deterministic:
                ax.axhline(min(c[-1][1] for c in curves), color=color, ls="--", lw=1, label=a)
                continue
            grid = np.linspace(1, max(c[-1][0] for c in curves), 200)
            ys = [np.interp(grid, [h[0] for h in c], [h[1] for h in c]) for c in curves]
            ax.plot(grid, np.median(ys, axis=0), color=color, lw=1.6, label=a)
        ax.set_yscale("log")
        ax.set_title(" / ".join(p for p in panel if p != "thesis"))
        ax.set_xlabel("evaluations")
        ax.set_ylabel("best objective (s, log)")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(8, len(labels)), frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


DISCUSSION = "\n## Discussion"


def kept_discussion(path: Path) -> str:
    """The hand-written discussion at the end of an earlier table, kept when the tables are regenerated."""
    if not path.exists():
        return ""
    text = path.read_text()
    i = text.find(DISCUSSION)
    return "" if i < 0 else text[i:]


def main(argv: list[str] | None = None) -> int:
    from ..optimize import ALGORITHMS
    ap = argparse.ArgumentParser(prog="placement experiment e3", description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=20000, help="evaluations per run (thesis: 20000)")
    ap.add_argument("--seeds", type=int, default=5, help="seeds per stochastic algorithm (default 5)")
    ap.add_argument("--versions", default=",".join(VERSIONS))
    ap.add_argument("--networks", default=",".join(NETWORKS))
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    ap.add_argument("--schedules", default="thesis", help="pipelined version: thesis,gpipe,1f1b")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="parallel runs")
    ap.add_argument("--out", default="docs/e3", help="folder for results.csv and the plot")
    ap.add_argument("--markdown", default="docs/e3.md", help="the table")
    args = ap.parse_args(argv)
    algorithms = [a for a in args.algorithms.split(",") if a]
    unknown = [a for a in algorithms if a not in ALGORITHMS]
    if unknown:
        ap.error(f"unknown algorithm(s): {', '.join(unknown)}")
    todo = jobs(args.versions.split(","), args.networks.split(","), algorithms, args.seeds, args.budget,
                tuple(args.schedules.split(",")))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"E3: {len(todo)} runs of {args.budget} evaluations on {args.workers} worker(s)", flush=True)
    rows, histories = [], {}
    start = time.perf_counter()
    with ProcessPoolExecutor(max(1, args.workers)) as pool:
        for i, row in enumerate(pool.map(run_job, todo), 1):
            history = row.pop("_history")
            rows.append(row)
            histories.setdefault((row["version"], row["network"], row["schedule"], row["algorithm"]), []).append(history)
            print(f"[{i}/{len(todo)}] {row['version']:9s} {row['network']:12s} {row['algorithm']:13s} "
                  f"{row['schedule']:6s} seed {row['seed']}: {row['objective_s']:.4f} s "
                  f"({time.perf_counter() - start:.0f} s elapsed)", flush=True)
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    command = "python benchmarks/e3.py " + " ".join(argv or [])
    Path(args.markdown).write_text(markdown(rows, command.strip()) + "\n" + kept_discussion(Path(args.markdown)))
    plot(rows, histories, out / "e3.png")
    print(f"wrote {out / 'results.csv'}, {out / 'e3.png'} and {args.markdown}")
    return 0
