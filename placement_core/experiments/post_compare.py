"""Post's comparison (Post §4, Fig. 2 and Table 1): the policy gradient, PPO, the cross-entropy method and Post.

Every algorithm learns softmax distributions over the same search space
(``optimize/search_space.py``: ``--groups`` Merge-and-Colocate groups, the
devices ``--allowed`` names, starting concentrated on ``--start``'s placement;
``--groups 0 --allowed all --start uniform`` is Post's own per-op space) from the
same budget of simulator evaluations, with several seeds, on each network.
Writes ``post.csv`` (one row per run, with the objective as a multiple of the
best single GPU's, Table 1's "Single GPU"), ``post.md`` (per network and
algorithm: the median of that ratio over seeds, and the best objective's mean ±
95 % confidence half-width; **bold** = best) and ``post.png`` (the median over
seeds of the best objective so far against evaluations). The paper's ordering,
from worst to best: PG, PPO, CE, Post.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

import numpy as np

from ..base.args import MAX_BUDGET, Parser, int_in
from ..base.outputs import check_output_dir
from ..optimize.search_space import DEVICE_CHOICES, STARTS
from .e3 import mean_ci
from .plotting import pyplot, skipped

ALGORITHMS = ("pg", "ppo", "cem", "post")
FIELDS = ["network", "devices", "algorithm", "seed", "objective_s", "single_gpu_s", "ratio", "feasible",
          "evaluations", "memory_checks", "wall_s"]


def single_gpu(problem) -> float:
    """Table 1's "Single GPU": the best objective of every op on one GPU (on one device when there is no GPU)."""
    import numpy as np
    gpus = [i for i, d in enumerate(problem.devices.devices) if d.kind == "gpu"] or list(range(problem.n_devices))
    x = np.repeat(np.array(gpus, dtype=np.int32)[:, None], problem.n_ops, axis=1)
    return float(problem.evaluate_many(x).min())


def run_job(job: tuple) -> dict:
    from ..formats.catalog import load_devices, load_network
    from ..optimize import make_optimizer
    from ..optimize.driver import drive
    from ..problem import ProblemSpec
    network, devices, algorithm, seed, budget, space = job
    problem = ProblemSpec().build(load_network(network), load_devices(devices))
    t = time.perf_counter()
    optimizer = make_optimizer(problem, algorithm, seed=seed, params=dict(space), evaluations=budget)
    r = drive(optimizer, evaluations=budget)
    single = single_gpu(problem)
    return {"network": network, "devices": devices, "algorithm": algorithm, "seed": seed,
            "objective_s": r.best_objective, "single_gpu_s": single, "ratio": r.best_objective / single,
            "feasible": int(r.best.feasible), "evaluations": r.evaluations,
            "memory_checks": optimizer.snapshot().get("memory_checks", 0),
            "wall_s": round(time.perf_counter() - t, 3), "_history": r.history[:, :2].tolist()}


def markdown(rows: list[dict], command: str) -> str:
    networks = list(dict.fromkeys(r["network"] for r in rows))
    algorithms = [a for a in ALGORITHMS if any(r["algorithm"] == a for r in rows)]
    import statistics
    cells = {(n, a): mean_ci([float(r["objective_s"]) for r in rows if r["network"] == n and r["algorithm"] == a])
             for n in networks for a in algorithms}
    ratios = {(n, a): statistics.median(float(r["ratio"]) for r in rows if r["network"] == n and r["algorithm"] == a)
              for n in networks for a in algorithms}
    single = {n: float(next(r["single_gpu_s"] for r in rows if r["network"] == n)) for n in networks}
    seeds = sorted({int(r["seed"]) for r in rows})
    lines = [f"Reproduce with `{command}`.", "",
             f"Best objective found as a multiple of the best single GPU's (median over seeds "
             f"{', '.join(map(str, seeds))}), and in s per batch (mean ± 95 % half-width); **bold** = best.", "",
             "| algorithm | " + " | ".join(f"{n} (× single GPU) | {n} (s)" for n in networks) + " |",
             "|---|" + "---|---|" * len(networks),
             "| single GPU | " + " | ".join(f"1.0000 | {single[n]:.4f}" for n in networks) + " |"]
    for a in algorithms:
        row = []
        for n in networks:
            m, h = cells[(n, a)]
            ratio, text = f"{ratios[(n, a)]:.4f}", f"{m:.4f} ± {h:.4f}"
            best = ratios[(n, a)] == min(ratios[(n, b)] for b in algorithms)
            row += [f"**{ratio}**" if best else ratio, f"**{text}**" if m == min(cells[(n, b)][0] for b in algorithms)
                    else text]
        lines.append(f"| {a} | " + " | ".join(row) + " |")
    def ordered(n: str) -> str:  # worst first; "=" between algorithms with the same median ratio and mean
        keys = {a: (round(-ratios[(n, a)], 12), round(-cells[(n, a)][0], 12)) for a in algorithms}
        ranked = sorted(algorithms, key=keys.__getitem__)
        return ranked[0] + "".join((" = " if keys[b] == keys[a] else " < ") + b for a, b in zip(ranked, ranked[1:]))
    lines += ["", "Worst to best (median ratio, then mean): " + "; ".join(f"{n}: {ordered(n)}" for n in networks)
              + "."]
    return "\n".join(lines)


def plot(rows: list[dict], histories: dict, path: Path) -> None:
    plt = pyplot()
    if plt is None:
        skipped(path)
        return

    networks = list(dict.fromkeys(r["network"] for r in rows))
    fig, axes = plt.subplots(1, len(networks), figsize=(5.4 * len(networks), 3.8), squeeze=False)
    colors = plt.get_cmap("tab10").colors
    for ax, net in zip(axes.flat, networks):
        for k, a in enumerate(ALGORITHMS):
            curves = histories.get((net, a))
            if not curves:
                continue
            grid = np.linspace(1, max(c[-1][0] for c in curves), 300)
            ys = [np.interp(grid, [h[0] for h in c], [h[1] for h in c]) for c in curves]
            ax.plot(grid, np.median(ys, axis=0), color=colors[k], lw=1.8, label=a)
        ax.set_yscale("log")
        ax.set_title(net)
        ax.set_xlabel("evaluations")
        ax.set_ylabel("best objective so far (s, log)")
        ax.grid(alpha=0.3)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = Parser(prog="placement experiment post", description=__doc__.splitlines()[0])
    ap.add_argument("--networks", default="resnet50,inception_v3")
    ap.add_argument("--devices", default="malvik-4gpu")
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    ap.add_argument("--budget", type=int_in(1, MAX_BUDGET), default=20000)
    ap.add_argument("--seeds", type=int_in(1, 1000), default=2, help="seeds 0..N-1 (default 2)")
    ap.add_argument("--groups", type=int_in(0, 1_000_000), default=128,
                    help="units: at most this many Merge-and-Colocate groups (default 128, Placeto's; 0: every op)")
    ap.add_argument("--allowed", choices=DEVICE_CHOICES, default="gpus",
                    help="devices the units may use (default gpus, as in Post's experiments)")
    ap.add_argument("--start", choices=STARTS, default="heft",
                    help="placement the distributions start concentrated on (default heft, memory-aware; uniform: "
                         "Post's own start)")
    ap.add_argument("--workers", type=int_in(1, 1024), default=1, help="runs in parallel (default 1)")
    ap.add_argument("--out", default="docs/learned", help="folder for post.csv, post.md and post.png")
    args = ap.parse_args(argv)
    algorithms = [a for a in args.algorithms.split(",") if a]
    if any(a not in ALGORITHMS for a in algorithms):
        ap.error("algorithms: choose among " + ", ".join(ALGORITHMS))
    space = (("groups", args.groups), ("devices", args.allowed), ("start", args.start), ("feasible", True))
    jobs = [(n, args.devices, a, s, args.budget, space) for n in args.networks.split(",") for a in algorithms
            for s in range(args.seeds)]
    out = check_output_dir(args.out, "--out")
    out.mkdir(parents=True, exist_ok=True)
    rows, histories = [], {}
    start = time.perf_counter()
    from ..parallel.tasks import map_unordered
    done = []
    # in this process with one worker; more run in fresh processes (never a fork of this one)
    for i, (k, row) in enumerate(map_unordered(run_job, jobs, workers=max(1, args.workers)), 1):
        done.append((k, row))
        print(f"[{i}/{len(jobs)}] {row['network']} {row['algorithm']} seed {row['seed']}: "
              f"{row['objective_s']:.4f} s ({time.perf_counter() - start:.0f} s elapsed)", flush=True)
    for _, row in sorted(done, key=lambda kr: kr[0]):  # job order, however they finished
        histories.setdefault((row["network"], row["algorithm"]), []).append(row.pop("_history"))
        rows.append(row)
    with open(out / "post.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    command = ("placement experiment post " + " ".join(argv or [])).strip()
    (out / "post.md").write_text(markdown(rows, command) + "\n")
    plot(rows, histories, out / "post.png")
    print(markdown(rows, command))
    print(f"wrote {out / 'post.csv'}, {out / 'post.md'} and {out / 'post.png'}")
    return 0
