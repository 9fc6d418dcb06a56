"""``placement sweep``: many independent runs (algorithms x parameter values x seeds) as whole tasks."""

from __future__ import annotations

import argparse
import sys

from ..base.errors import InputError
from ..analysis.stats import mean_ci
from ..base.units import fmt_seconds
from .common import add_problem_options, build_problem, print_json, printable, table
from .optimize_cmds import note, parse_params
from .validate import count_int, positive_seconds, workers_int


def register(sub) -> None:
    p = sub.add_parser("sweep", help="many independent runs at once: algorithms x parameter values x seeds",
                       description="Run every algorithm with every combination of the parameter values given, "
                                   "once per seed, each run a whole task on one core of this machine (--workers) "
                                   "or of a Dask cluster (--dask), and summarize them per configuration.")
    add_problem_options(p)
    p.add_argument("--algorithm", required=True, metavar="NAMES",
                   help="one or several algorithms, comma-separated (see `placement algorithms`)")
    p.add_argument("--seeds", type=seeds_list, default=[0], metavar="SEEDS",
                   help="N (seeds 0..N-1), A-B (inclusive) or a comma-separated list (default: seed 0)")
    p.add_argument("--budget", type=count_int, help="evaluations per run (default 20000)")
    p.add_argument("--seconds", type=positive_seconds, help="wall-clock budget per run")
    p.add_argument("--param", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="a parameter and the values to sweep, repeatable; applied to the algorithms that have it")
    par = p.add_mutually_exclusive_group()
    par.add_argument("--workers", type=workers_int, default=1, help="local processes, one run each (default 1)")
    par.add_argument("--dask", metavar="ADDRESS", help="run on a Dask cluster (tcp://host:8786); Dask exchanges "
                                                        "pickles: connect only to a scheduler you trust")
    p.add_argument("--no-store", action="store_true", help="do not record the runs in the run store")
    p.add_argument("--label", type=note, help="a note stored with every run")
    p.add_argument("--home", metavar="DIR", help="data directory (default $PLACEMENT_HOME or ~/.placement)")
    p.add_argument("--json", action="store_true", help="print every run and the summary as JSON")
    p.set_defaults(handler=cmd_sweep)


MAX_SEEDS = 100_000


def seeds_list(text: str) -> list[int]:
    """The seeds ``N``, ``A-B`` or ``a,b,c`` stand for; the count is checked before any list is made
    (``--seeds 10**30`` asked Python for a list longer than memory)."""
    try:
        if "," in text:
            seeds = [int(s) for s in text.split(",") if s.strip()]
        elif "-" in text.strip("-"):
            a, b = (int(s) for s in text.split("-", 1))
            seeds = list(range(a, b + 1)) if 0 <= a <= b and b - a < MAX_SEEDS else []
        else:
            n = int(text)
            seeds = list(range(n)) if 0 < n <= MAX_SEEDS else []
    except ValueError:
        seeds = []
    if (not seeds or min(seeds) < 0 or max(seeds) >= 2**63 or len(seeds) > MAX_SEEDS
            or len(set(seeds)) < len(seeds)):
        raise argparse.ArgumentTypeError(f"expected N, A-B or a list of distinct seeds from 0 to 2^63-1, at most "
                                         f"{MAX_SEEDS:,} of them, got {text[:40]!r}")
    return seeds


def cmd_sweep(args) -> int:
    from ..optimize.sweep import grid, run_many
    from ..store import RunStore

    algorithms = [a.strip() for a in args.algorithm.split(",") if a.strip()]
    values = {k: [v.strip() for v in raw.split(",") if v.strip()] for k, raw in parse_params(args.param).items()}
    for key, vals in values.items():
        if not vals:
            raise InputError(f"no values for {key}", field="--param", fix=f"Write e.g. --param {key}=0.1,0.5")
    problem = build_problem(args)
    evaluations = args.budget if args.budget or args.seconds else 20000
    jobs = grid(problem, algorithms, args.seeds, evaluations=evaluations, seconds=args.seconds, params=values)
    if args.seconds is None:
        from .optimize_cmds import say_how_long
        say_how_long(problem, [j.algorithm for j in jobs], evaluations, args.workers, args.no_store, runs=len(jobs))
    store = None if args.no_store else RunStore(home=args.home)
    run_ids: dict[int, int] = {}
    if store is not None:
        for i, job in enumerate(jobs):  # recorded before they start: an interrupted sweep leaves resumable runs
            from ..optimize import make_optimizer
            opt = make_optimizer(job.problem, job.algorithm, seed=job.seed, params=job.params, evaluations=evaluations)
            run_ids[i] = store.create_run(job.problem, job.algorithm, opt.params, job.seed, evaluations=evaluations,
                                          seconds=args.seconds, label=args.label)
    done = [0]

    def on_result(i, job, result):
        done[0] += 1
        if store is not None:
            store.finish(run_ids[i], result, status="stopped" if result.stopped else "done")
        if not args.json and sys.stderr.isatty():
            sys.stderr.write(f"\r{done[0]}/{len(jobs)} runs finished ")
            sys.stderr.flush()

    try:
        results = run_many(jobs, workers=args.workers, dask=args.dask, on_result=on_result)
    except BaseException as e:
        if store is not None:
            for i, rid in run_ids.items():
                if store.get(rid).status == "running":
                    store.stop(rid) if isinstance(e, KeyboardInterrupt) else store.fail(rid, f"{type(e).__name__}: {e}")
        raise
    finally:
        if store is not None:
            store.close()
    if not args.json and sys.stderr.isatty():
        sys.stderr.write("\n")
    rows = summarize(jobs, results)
    if args.json:
        print_json({"runs": [{"run_id": run_ids.get(i), "algorithm": j.algorithm, "params": j.params, "seed": j.seed,
                              "best_objective_s": r.best_objective, "evaluations": r.evaluations,
                              "wall_s": r.wall_s} for i, (j, r) in enumerate(zip(jobs, results))],
                    "summary": rows})
        return 0
    print(f"{len(jobs)} runs on {printable(problem.graph.name)} / {printable(problem.devices.name)}, "
          f"{evaluations} evaluations each")
    print(table([[r["algorithm"], ", ".join(f"{k}={v}" for k, v in r["params"].items()) or "-", str(r["runs"]),
                  f"{r['mean_s']:.6g} ± {r['ci95_s']:.2g}", f"{r['best_s']:.6g} (seed {r['best_seed']})",
                  fmt_seconds(r["mean_wall_s"])] for r in rows],
                ["algorithm", "parameters", "runs", "best objective, mean ± 95 % CI (s)", "best", "wall per run"],
                right=(2,)))
    if run_ids:
        print(f"stored as runs {min(run_ids.values())}-{max(run_ids.values())} (see `placement runs list`)")
    return 0


def summarize(jobs, results) -> list[dict]:
    """One row per configuration (algorithm and parameter values), over its seeds, best first."""
    groups: dict[tuple, list] = {}
    for job, result in zip(jobs, results):
        groups.setdefault((job.algorithm, tuple(sorted(job.params.items()))), []).append((job, result))
    rows = []
    for (algorithm, params), members in groups.items():
        objectives = [r.best_objective for _, r in members]
        mean, half = mean_ci(objectives)
        best_job, best = min(members, key=lambda m: m[1].best_objective)
        rows.append({"algorithm": algorithm, "params": dict(params), "runs": len(members), "mean_s": mean,
                     "ci95_s": half, "best_s": best.best_objective, "best_seed": best_job.seed,
                     "mean_wall_s": sum(r.wall_s for _, r in members) / len(members)})
    return sorted(rows, key=lambda r: r["mean_s"])
