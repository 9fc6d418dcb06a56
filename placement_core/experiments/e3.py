"""Experiment E3 of the thesis (§4.3.3): every algorithm on three versions of the placement problem.

Versions: ``normal`` (Malvik: CPU + 2 V100), ``limited`` (4 V100 with memory
capped so that all GPUs must be used: 200 MB for AlexNet, 2.5 GB for ResNet-50
and Inception-V3) and ``pipelined`` (malvik-4gpu, 10 batches, 4 in flight).
Each algorithm gets the same evaluation budget (20,000 in the thesis);
stochastic ones run with several seeds, deterministic ones once. Results go
to a CSV, a markdown table with mean +- 95 % confidence intervals, and plots.

``--exprimo DIR`` runs the same grid on the thesis' own input files (Exprimo's
``nets/`` and ``device_graphs/`` in DIR) under the ``exprimo-2020`` profile, so
the thesis' findings compare like for like; its table is a second section of
the same markdown file. An algorithm may carry parameters, ``ga[min_mutation_rate=0.01]``.
"""

from __future__ import annotations

import csv
import math
import os
import re
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from ..base.args import MAX_BUDGET, Parser, int_in
from ..base.outputs import check_output_dir, check_report_file, read_report, write_output
from ..analysis.stats import mean_ci
from ..parallel.tasks import map_unordered
from ..problem import ProblemSpec
from .plotting import pyplot, skipped


def write_text(path: Path, text: str) -> None:
    write_output(path, text.encode("utf-8"))

NETWORKS = ("alexnet", "resnet50", "inception_v3")
VERSIONS = ("normal", "limited", "pipelined")
LIMITED = {"alexnet": "malvik-4gpu-limited-alexnet", "resnet50": "malvik-4gpu-limited-resnet50",
           "inception_v3": "malvik-4gpu-limited-inception"}
FIELDS = ["version", "network", "algorithm", "schedule", "seed", "objective_s", "batch_time_s", "feasible",
          "evaluations", "wall_s"]
# The thesis' own files (Exprimo's repository) for each network and version, under DIR/nets, DIR/device_graphs.
EXPRIMO_NETS = {"alexnet": "alex_v2", "resnet50": "resnet50", "inception_v3": "inception_v3"}
EXPRIMO_DEVICES = {"normal": "malvik", "pipelined": "malvik-4gpu",
                   "limited": {"alexnet": "malvik-4gpu-reduced-alexnet", "resnet50": "malvik-4gpu-reduced-resnet",
                               "inception_v3": "malvik-4gpu-reduced-inception"}}


@dataclass(frozen=True)
class Job:
    version: str
    network: str
    algorithm: str
    seed: int
    budget: int
    schedule: str = "thesis"
    exprimo: str = ""  # a folder of the thesis' files: run on them under the exprimo-2020 profile


def spec_for(version: str, schedule: str = "thesis", profile: str = "default") -> ProblemSpec:
    """E3's recipe: one batch (normal, limited), or the pipelined case: ten batches, four in flight under the
    thesis scheme, or the same parallelism as one batch split into four micro-batches under GPipe / 1F1B."""
    if version in ("normal", "limited"):
        return ProblemSpec(profile=profile)
    if version == "pipelined":
        return ProblemSpec(batches=10, in_flight=4, profile=profile) if schedule == "thesis" else \
            ProblemSpec(schedule=schedule, micro_batches=4, profile=profile)
    raise ValueError(f"unknown E3 version {version!r}")


def devices_for(version: str, network: str) -> str:
    """The device preset of each E3 version (the limited one caps the GPUs' memory per network)."""
    if version == "limited":
        return LIMITED[network]
    return "malvik" if version == "normal" else "malvik-4gpu"


def exprimo_files(folder: str | Path, version: str, network: str) -> tuple[Path, Path]:
    """The thesis' network and device file of one E3 cell, in Exprimo's folder layout."""
    from ..base.errors import InputError
    devices = EXPRIMO_DEVICES[version]
    devices = devices[network] if isinstance(devices, dict) else devices
    net = Path(folder) / "nets" / f"{EXPRIMO_NETS[network]}.json"
    dev = Path(folder) / "device_graphs" / f"{devices}.json"
    for path in (net, dev):
        if not path.is_file():
            raise InputError(f"{path} does not exist", field="--exprimo",
                             fix="Give the folder of Exprimo's files, the one that holds nets/ and device_graphs/")
    return net, dev


def problem_for(version: str, network: str, schedule: str = "thesis", exprimo: str = ""):
    from .. import load_devices, load_network
    if exprimo:
        net, dev = exprimo_files(exprimo, version, network)
        return spec_for(version, schedule, "exprimo-2020").build(load_network(str(net)), load_devices(str(dev)))
    spec = spec_for(version, schedule)
    return spec.build(load_network(network), load_devices(devices_for(version, network)))


def parse_variant(label: str) -> tuple[str, dict]:
    """``ga[min_mutation_rate=0.01;population=100]`` -> ("ga", {"min_mutation_rate": "0.01", ...})."""
    from ..base.errors import InputError
    m = re.fullmatch(r"([\w-]+)(?:\[([^\]]*)\])?", label.strip())
    if not m:
        raise InputError(f"cannot read the algorithm {label!r}", field="--algorithms",
                         fix="Write NAME or NAME[PARAM=VALUE;PARAM=VALUE], e.g. ga[min_mutation_rate=0.01]")
    params = {}
    for item in filter(None, (m.group(2) or "").split(";")):
        key, eq, value = item.partition("=")
        if not eq:
            raise InputError(f"{item!r} is not PARAM=VALUE", field="--algorithms")
        params[key.strip()] = value.strip()
    return m.group(1), params


def split_algorithms(text: str) -> list[str]:
    """A comma-separated list whose items may hold brackets: ``ga,ga[a=1;b=2],heft``."""
    return [a for a in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", text) if a.strip()]


def _check_params(name: str, params: dict) -> None:
    """A variant's parameters exist and parse (before any run starts)."""
    from ..base.errors import InputError
    from ..optimize import ALGORITHMS
    known = ALGORITHMS[name].PARAMS
    for key, value in params.items():
        if key not in known:
            raise InputError(f"{name} has no parameter {key!r}", field="--algorithms",
                             fix="Known: " + (", ".join(known) or "none"))
        known[key].parse(key, value)


def run_job(job: Job) -> dict:
    from ..optimize import run
    problem = problem_for(job.version, job.network, job.schedule, job.exprimo)
    name, params = parse_variant(job.algorithm)
    t = time.perf_counter()
    r = run(problem, name, evaluations=job.budget, seed=job.seed, params=params)
    return {"version": job.version, "network": job.network, "algorithm": job.algorithm, "schedule": job.schedule,
            "seed": job.seed, "objective_s": r.best_objective, "batch_time_s": r.best.result.batch_time,
            "feasible": int(r.best.feasible), "evaluations": r.evaluations,
            "wall_s": round(time.perf_counter() - t, 3), "_history": r.history.tolist()}


def jobs(versions, networks, algorithms, seeds: int, budget: int, schedules=("thesis",), exprimo: str = "") -> list[Job]:
    from ..optimize import ALGORITHMS
    out = []
    for v in versions:
        for net in networks:
            for sched in (schedules if v == "pipelined" else ("thesis",)):
                for alg in algorithms:
                    n = 1 if ALGORITHMS[parse_variant(alg)[0]].deterministic else seeds
                    out.extend(Job(v, net, alg, s, budget, sched, exprimo) for s in range(n))
    return out


def algorithm_order(labels) -> list[str]:
    """Labels in the registry's order, each variant after its algorithm, variants in the order given."""
    from ..optimize import ALGORITHMS
    order, first = list(ALGORITHMS), {}
    for a in labels:
        first.setdefault(a, len(first))
    return sorted(first, key=lambda a: (order.index(parse_variant(a)[0]), first[a]))


def summarize(rows: list[dict]) -> dict:
    cells: dict[tuple, list[float]] = {}
    feasible: dict[tuple, list[int]] = {}
    for r in rows:
        key = (r["version"], r["network"], r["schedule"], r["algorithm"])
        cells.setdefault(key, []).append(float(r["objective_s"]))
        feasible.setdefault(key, []).append(int(r["feasible"]))
    return {k: (*mean_ci(v), len(v), sum(feasible[k])) for k, v in cells.items()}


TITLE = "# Experiment E3: optimizer comparison"
THESIS_FILES = "On the thesis' own files"


def markdown(rows: list[dict], command: str, exprimo: bool = False) -> str:
    """One table section: ours (``## normal`` ...), or with ``exprimo`` the thesis' files (``### normal`` ...)."""
    summary = summarize(rows)
    algorithms = algorithm_order(k[3] for k in summary)
    level = "###" if exprimo else "##"
    lines = [f"## {THESIS_FILES} (`exprimo-2020` profile)", "",
             "The thesis' network and device files (Exprimo's `nets/alex_v2.json`, `resnet50.json`, "
             "`inception_v3.json`; `device_graphs/malvik.json`, `malvik-4gpu-reduced-*.json`, "
             "`malvik-4gpu.json`) under the profile that reproduces its simulator.", ""] if exprimo else []
    lines += ["Reproduce with:", "", f"```bash\n{command}\n```", "",
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
        lines += [f"{level} {version}", ""]
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
    plt = pyplot()
    if plt is None:
        skipped(path)
        return
    import numpy as np

    from ..optimize import ALGORITHMS
    labels = algorithm_order(r["algorithm"] for r in rows)
    panels = sorted({(r["version"], r["network"], r["schedule"]) for r in rows},
                    key=lambda c: (VERSIONS.index(c[0]), NETWORKS.index(c[1]) if c[1] in NETWORKS else 9, c[2]))
    cols = 3
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.8 * nrows), squeeze=False)
    colors = plt.get_cmap("tab20").colors
    for ax, panel in zip(axes.flat, panels):
        for a in labels:
            curves = histories.get((*panel, a))
            if not curves:
                continue
            color = colors[labels.index(a) % len(colors)]
            if ALGORITHMS[parse_variant(a)[0]].deterministic:
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


def splice(text: str, tag: str, block: str) -> str:
    """``text`` with the block between ``<!-- e3:TAG -->`` and ``<!-- /e3:TAG -->`` replaced by ``block``;
    a block the file lacks goes before the discussion. Regenerating one table leaves the other alone."""
    start, end = f"<!-- e3:{tag} -->", f"<!-- /e3:{tag} -->"
    wrapped = f"{start}\n{block.strip()}\n{end}\n"
    if start in text and end in text:
        a, b = text.index(start), text.index(end) + len(end)
        return text[:a] + wrapped.rstrip("\n") + text[b:]
    i = text.find(DISCUSSION)
    if i < 0:
        return text.rstrip("\n") + "\n\n" + wrapped
    return text[:i].rstrip("\n") + "\n\n" + wrapped + text[i:]


def main(argv: list[str] | None = None) -> int:
    from ..base.errors import InputError
    from ..optimize import ALGORITHMS
    ap = Parser(prog="placement experiment e3", description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int_in(1, MAX_BUDGET), default=20000, help="evaluations per run (thesis: 20000)")
    ap.add_argument("--seeds", type=int_in(1, 1000), default=5, help="seeds per stochastic algorithm (default 5)")
    ap.add_argument("--versions", default=",".join(VERSIONS))
    ap.add_argument("--networks", default=",".join(NETWORKS))
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    ap.add_argument("--schedules", default="thesis", help="pipelined version: thesis,gpipe,1f1b")
    ap.add_argument("--workers", type=int_in(1, 1024), default=os.cpu_count() or 1, help="parallel runs on this machine")
    ap.add_argument("--dask", metavar="ADDRESS", help="spread the runs over a Dask cluster instead (tcp://HOST:8786; "
                                                      "docs/scaling.md)")
    ap.add_argument("--out", default=None, help="folder for results.csv and the plot (default docs/e3, with "
                                                 "--exprimo docs/e3/exprimo)")
    ap.add_argument("--markdown", default="docs/e3.md", help="the file whose table section is written")
    ap.add_argument("--exprimo", default="", metavar="DIR",
                    help="run on the thesis' own files in DIR (Exprimo's nets/ and device_graphs/) under the "
                         "exprimo-2020 profile; their table is a second section of --markdown")
    args = ap.parse_args(argv)
    algorithms = split_algorithms(args.algorithms)
    for label in algorithms:
        name, params = parse_variant(label)
        if name not in ALGORITHMS:
            raise InputError(f"unknown algorithm {name!r}", field="--algorithms", fix="Use some of: "
                             + ", ".join(ALGORITHMS))
        _check_params(name, params)
    for option, given, known in (("--networks", args.networks, NETWORKS), ("--versions", args.versions, VERSIONS)):
        for item in given.split(","):
            if item not in known:
                raise InputError(f"unknown {option[2:-1]} {item!r}", field=option,
                                 fix="Use some of: " + ", ".join(known))
    if args.exprimo:
        for v in args.versions.split(","):
            for n in args.networks.split(","):
                exprimo_files(args.exprimo, v, n)  # every file there, before any run
    todo = jobs(args.versions.split(","), args.networks.split(","), algorithms, args.seeds, args.budget,
                tuple(args.schedules.split(",")), args.exprimo)
    out = check_output_dir(args.out or ("docs/e3/exprimo" if args.exprimo else "docs/e3"), "--out")
    path = check_report_file(args.markdown, "--markdown", out)  # before the runs, not after them
    text = read_report(path) or TITLE + "\n"
    out.mkdir(parents=True, exist_ok=True)
    where = f"the Dask cluster at {args.dask}" if args.dask else f"{args.workers} worker(s)"
    print(f"E3: {len(todo)} runs of {args.budget} evaluations on {where}", flush=True)
    done: dict[int, dict] = {}
    start = time.perf_counter()
    for i, row in map_unordered(run_job, todo, workers=max(1, args.workers), dask=args.dask):
        done[i] = row
        print(f"[{len(done)}/{len(todo)}] {row['version']:9s} {row['network']:12s} {row['algorithm']:13s} "
              f"{row['schedule']:6s} seed {row['seed']}: {row['objective_s']:.4f} s "
              f"({time.perf_counter() - start:.0f} s elapsed)", flush=True)
    rows, histories = [], {}
    for i in sorted(done):  # in job order, however they finished
        row = done[i]
        history = row.pop("_history")
        rows.append(row)
        histories.setdefault((row["version"], row["network"], row["schedule"], row["algorithm"]), []).append(history)
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    # the thesis' files' folder is this machine's: the command names it EXPRIMO_DIR
    shown = [("EXPRIMO_DIR" if args.exprimo and a == args.exprimo else a) for a in argv or []]
    shown = ["--exprimo=EXPRIMO_DIR" if a.startswith("--exprimo=") else a for a in shown]
    command = "placement experiment e3 " + " ".join(a if a == "EXPRIMO_DIR" else shlex.quote(a) for a in shown)
    tag = "exprimo" if args.exprimo else "own"
    write_text(path, splice(text, tag, markdown(rows, command.strip(), exprimo=bool(args.exprimo))))
    plot(rows, histories, out / "e3.png")
    print(f"wrote {out / 'results.csv'}, {out / 'e3.png'} and {args.markdown}")
    return 0
