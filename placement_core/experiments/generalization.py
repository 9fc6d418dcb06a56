"""Placeto's generalization experiment (§4.2, Fig. 5): a trained policy on a family's unseen test graphs.

For every test graph of a family (the odd indices) the policy trained on the
family's training graphs places it zero-shot (one greedy pass, one evaluation)
and after fine-tuning on it (``--finetune`` evaluations); MAP-Elites and the GA
optimize it from scratch (``--budget`` evaluations each), and the baselines
(best single device, m-ETF, HEFT, and memory-aware HEFT, the placement a
Placeto policy's episodes start from) and Placeto's strawman, a uniformly random
placement (the mean objective of 100; it "fits" when most of them do), place
it too. Every objective is divided by MAP-Elites' on the same graph. Writes ``generalization.csv`` (one row per graph
and scheme), ``generalization.md`` (medians per family, and whether the target
holds: zero-shot median within 10 % of MAP-Elites and better than every
baseline's median) and ``generalization.png`` (CDFs of the ratios, Fig. 5's).
"""

from __future__ import annotations

import csv
import statistics
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ..base.args import MAX_BUDGET, Parser, int_in
from ..base.outputs import check_output_dir
from .plotting import pyplot, skipped

SCHEMES = ("zero-shot", "fine-tuned", "map-elites", "ga", "single", "m-etf", "heft", "heft-memory", "random")
# heft-memory is the placement a Placeto policy's episodes start from (``--start heft``): what it learned is the gap
BASELINES = ("single", "m-etf", "heft", "heft-memory")
FIELDS = ["family", "graph", "scheme", "objective_s", "ratio", "feasible", "evaluations", "wall_s"]


@dataclass(frozen=True)
class Job:
    family: str
    index: int
    graph_seed: int
    devices: str
    policy: str
    method: str
    budget: int
    finetune: int
    seed: int
    penalty: str
    schemes: tuple = SCHEMES  # with --keep, only those a kept graph lacks
    reference: float | None = None  # MAP-Elites' objective when it is not among ``schemes``


def default_policy(method: str, family: str, devices: str) -> str:
    from ..formats.catalog import assets_dir
    return str(assets_dir() / "policies" / f"{method}-{family}-{devices}.json")


def run_graph(job: Job) -> list[dict]:
    """Every scheme on one test graph."""
    import placement_core.torch.policies  # noqa: F401  (registers placeto and gdp)
    from ..formats.catalog import load_devices
    from ..families import family_graph
    from ..optimize import run
    from ..problem import ProblemSpec

    graph = family_graph(job.family, job.graph_seed, job.index).graph
    problem = ProblemSpec(penalty=job.penalty).build(graph, load_devices(job.devices))
    runs = {
        "zero-shot": (job.method, 1, {"policy": job.policy}),
        "fine-tuned": (job.method, job.finetune, {"policy": job.policy}),
        "map-elites": ("map-elites", job.budget, {}),
        "ga": ("ga", job.budget, {}),
        **{b: (b, job.budget, {}) for b in BASELINES},
    }
    rows = []
    for scheme, (algorithm, budget, params) in runs.items():
        if scheme not in job.schemes:
            continue
        t = time.perf_counter()
        r = run(problem, algorithm, evaluations=budget, seed=job.seed, params=params)
        rows.append({"family": job.family, "graph": graph.name, "scheme": scheme, "objective_s": r.best_objective,
                     "feasible": int(r.best.feasible), "evaluations": r.evaluations,
                     "wall_s": round(time.perf_counter() - t, 3)})
    if "random" in job.schemes:
        rng = np.random.default_rng(job.seed)
        t = time.perf_counter()
        randoms = rng.integers(0, problem.n_devices, (100, problem.n_ops), dtype=np.int32)
        evaluations = [problem.simulate(x) for x in randoms]
        rows.append({"family": job.family, "graph": graph.name, "scheme": "random",
                     "objective_s": float(np.mean([e.objective for e in evaluations])),
                     "feasible": int(np.mean([e.feasible for e in evaluations]) >= 0.5), "evaluations": 100,
                     "wall_s": round(time.perf_counter() - t, 3)})
    ref = next((r["objective_s"] for r in rows if r["scheme"] == "map-elites"), job.reference)
    for r in rows:
        r["ratio"] = r["objective_s"] / ref
    return rows


def summary(rows: list[dict]) -> dict:
    """(family, scheme) -> (median ratio, mean ratio, graphs, graphs that fit in memory)."""
    cells: dict[tuple, list] = {}
    for r in rows:
        cells.setdefault((r["family"], r["scheme"]), []).append(r)
    return {k: (statistics.median(float(r["ratio"]) for r in v), statistics.fmean(float(r["ratio"]) for r in v),
                len(v), sum(int(r["feasible"]) for r in v)) for k, v in cells.items()}


def markdown(rows: list[dict], command: str) -> str:
    s = summary(rows)
    families = list(dict.fromkeys(r["family"] for r in rows))
    lines = [f"Reproduce with `{command}`.", "",
             "Objective / MAP-Elites' objective on the same test graph (lower is better; 1 = as good as MAP-Elites "
             "with 20,000 evaluations). Cells: median (mean) over the family's test graphs; the last column counts "
             "the graphs whose placement fits in memory.", ""]
    for fam in families:
        lines += [f"**{fam}**", "", "| scheme | median | mean | fits |", "|---|---|---|---|"]
        for scheme in SCHEMES:
            if (fam, scheme) in s:
                med, mean, n, fit = s[(fam, scheme)]
                lines.append(f"| {scheme} | {med:.3f} | {mean:.3f} | {fit}/{n} |")
        zs = s.get((fam, "zero-shot"))
        if zs:
            within = zs[0] <= 1.10
            beats = all(zs[0] < s[(fam, b)][0] for b in BASELINES if (fam, b) in s)
            lines += ["", f"Target for {fam}: zero-shot median within 10 % of MAP-Elites: "
                          f"{'yes' if within else 'no'} ({zs[0]:.3f}); better than every baseline's median: "
                          f"{'yes' if beats else 'no'}.", ""]
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        skipped(path)
        return

    families = list(dict.fromkeys(r["family"] for r in rows))
    fig, axes = plt.subplots(1, len(families), figsize=(5.2 * len(families), 3.8), squeeze=False)
    colors = plt.get_cmap("tab10").colors
    for ax, fam in zip(axes.flat, families):
        for k, scheme in enumerate(SCHEMES):
            ratios = sorted(float(r["ratio"]) for r in rows if r["family"] == fam and r["scheme"] == scheme)
            if not ratios:
                continue
            ys = np.arange(1, len(ratios) + 1) / len(ratios)
            ax.step(ratios, ys, where="post", color=colors[k % 10], lw=2.2 if "shot" in scheme else 1.4,
                    label=scheme)
        ax.set_xscale("log")
        ax.set_title(f"{fam}: test graphs")
        ax.set_xlabel("objective / MAP-Elites' (log)")
        ax.set_ylabel("fraction of graphs")
        ax.grid(alpha=0.3)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), frameon=False)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _write(path: Path, rows: list[dict]) -> None:
    from ..base.outputs import write_output
    import io
    buf = io.StringIO()
    w = csv.DictWriter(buf, FIELDS)
    w.writeheader()
    w.writerows(rows)
    write_output(path, buf.getvalue().encode())


def main(argv: list[str] | None = None) -> int:
    from ..families import FAMILIES, family_graphs, graph_name
    from ..parallel.tasks import map_unordered
    from ..torch import require_torch
    ap = Parser(prog="placement experiment generalization", description=__doc__.splitlines()[0])
    ap.add_argument("--families", default="nmt,ptb,cifar10")
    ap.add_argument("--method", choices=["placeto", "gdp"], default="placeto")
    ap.add_argument("--policy", action="append", default=[], metavar="FAMILY=FILE",
                    help="the policy of a family (default assets/policies/METHOD-FAMILY-DEVICES.json)")
    ap.add_argument("--devices", default="malvik-4gpu")
    ap.add_argument("--count", type=int_in(2, 10_000), default=32, help="graphs per family; the odd-indexed half is tested")
    ap.add_argument("--graph-seed", type=int_in(0), default=0)
    ap.add_argument("--budget", type=int_in(1, MAX_BUDGET), default=20000, help="evaluations of MAP-Elites and the GA")
    ap.add_argument("--finetune", type=int_in(0, MAX_BUDGET), default=2000, help="evaluations of fine-tuning")
    ap.add_argument("--seed", type=int_in(0), default=0)
    ap.add_argument("--penalty", default="thesis", choices=["thesis", "placeto", "infeasible"])
    ap.add_argument("--limit", type=int_in(0, 10_000), default=0, help="test only the first N test graphs of each family")
    ap.add_argument("--schemes", default=",".join(SCHEMES),
                    help="the schemes to measure, comma-separated (default all: " + ",".join(SCHEMES) + ")")
    ap.add_argument("--workers", type=int_in(1, 1024), default=1, help="graphs in parallel (default 1)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the rows already in OUT/generalization.csv and measure only the graphs and schemes "
                         "they lack (to continue an interrupted run, or add a family)")
    ap.add_argument("--out", default="docs/learned", help="folder for the CSV, the table and the plot")
    args = ap.parse_args(argv)
    require_torch()
    families = [f for f in args.families.split(",") if f]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        ap.error(f"unknown family: {', '.join(unknown)}")
    schemes = tuple(dict.fromkeys(x for x in args.schemes.split(",") if x))
    if not schemes or any(x not in SCHEMES for x in schemes):
        ap.error("schemes: choose among " + ", ".join(SCHEMES))
    if "map-elites" not in schemes and not args.keep:
        ap.error("schemes: include map-elites, the reference every ratio divides by (or --keep its rows)")
    policies = dict(p.split("=", 1) for p in args.policy if "=" in p)
    jobs = []
    for fam in families:
        policy = policies.get(fam, default_policy(args.method, fam, args.devices))
        tests = [fg.index for fg in family_graphs(fam, count=args.count, seed=args.graph_seed, split="test")]
        for index in tests[:args.limit or None]:
            jobs.append(Job(fam, index, args.graph_seed, args.devices, policy, args.method, args.budget,
                            args.finetune, args.seed, args.penalty, schemes))
    out = check_output_dir(args.out, "--out")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    if args.keep and (out / "generalization.csv").exists():
        with open(out / "generalization.csv", newline="") as f:
            rows = list(csv.DictReader(f))  # every family's: --keep with another family adds it to the table
        have: dict[tuple, dict] = {}
        for r in rows:
            have.setdefault((r["family"], r["graph"]), {})[r["scheme"]] = r
        kept_jobs = []
        for j in jobs:
            schemes = have.get((j.family, graph_name(j.family, j.graph_seed, j.index)), {})
            missing = tuple(s for s in j.schemes if s not in schemes)
            if missing:  # a scheme added since that graph was measured is measured alone
                ref = float(schemes["map-elites"]["objective_s"]) if "map-elites" in schemes else None
                kept_jobs.append(replace(j, schemes=missing, reference=ref))
        jobs = kept_jobs
    start = time.perf_counter()
    # in this process with one worker; more run in fresh processes (a fork of a process holding torch's or any
    # other thread's locks can hang), each graph's rows written as it finishes
    for i, (_, graph_rows) in enumerate(map_unordered(run_graph, jobs, workers=max(1, args.workers)), 1):
        rows += graph_rows
        z = next((r for r in graph_rows if r["scheme"] == "zero-shot"), graph_rows[0])
        print(f"[{i}/{len(jobs)}] {z['graph']}: {z['scheme']} {z['ratio']:.3f} x MAP-Elites "
              f"({time.perf_counter() - start:.0f} s elapsed)", flush=True)
        _write(out / "generalization.csv", rows)  # after every graph: an interrupted run keeps its rows
    command = "placement experiment generalization " + " ".join(a for a in (argv or []) if a != "--keep")
    (out / "generalization.md").write_text(markdown(rows, command.strip()) + "\n")
    plot(rows, out / "generalization.png")
    print(markdown(rows, command.strip()))
    print(f"wrote {out / 'generalization.csv'}, {out / 'generalization.md'} and {out / 'generalization.png'}")
    return 0
