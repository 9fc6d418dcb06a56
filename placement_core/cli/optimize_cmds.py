"""``placement optimize``: run any algorithm on a problem, with a progress bar, JSON and a result file."""

from __future__ import annotations

import argparse
import sys
import time

from ..base.errors import InputError, escape
from ..base.jsonio import write_json
from ..model.placement import placement_to_dict
from ..base.units import fmt_seconds
from . import measured_cmds
from .common import add_problem_options, build_problem, print_json, printable, stop_on_first_interrupt
from .core_cmds import batch_summary, describe_batches
from .validate import check_output_file, count_int, positive_seconds, run_id as run_id_arg, seed_int, workers_int


def register(sub) -> None:
    from ..optimize import ALGORITHMS, LEARNED_NAMES

    p = sub.add_parser("optimize", help="search for a good placement with one algorithm",
                       description="Search for a placement with one algorithm against the simulator.")
    add_problem_options(p, required=False)  # not needed with --resume
    p.add_argument("--algorithm", choices=list(ALGORITHMS) + list(LEARNED_NAMES), metavar="NAME",
                   help="one of: " + ", ".join(list(ALGORITHMS) + list(LEARNED_NAMES)) + " (placeto and gdp apply "
                        "a trained --policy; they need the torch extra)")
    p.add_argument("--budget", type=budget_int, help="evaluations (default 20000); with placeto or gdp, 0 means "
                                                     "zero-shot: the policy's own placement, no fine-tuning")
    p.add_argument("--policy", metavar="FILE", help="placeto / gdp: the trained policy (placement-policy/1, e.g. "
                                                   "assets/policies/placeto-nmt-malvik-4gpu.json)")
    p.add_argument("--seconds", type=positive_seconds,
                   help="wall-clock budget; with --budget, whichever ends first")
    p.add_argument("--seed", type=seed_int, default=0,
                   help="random seed, 0 to 2^63-1 (same seed, same result; default 0)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="algorithm parameter, repeatable (see `placement algorithms`)")
    p.add_argument("--init", metavar="KINDS",
                   help="seed the search with initial mappings (dissertation Ch. 4), comma-separated: heft, "
                        "heft-nocomm, heft-memory, min-cut, m-etf, m-topo, expert, single (every device), random:N, "
                        "bayes:T (T trials of optuna's TPE from the single-device mappings); e.g. heft,min-cut,bayes:100")
    par = p.add_mutually_exclusive_group()
    par.add_argument("--workers", type=workers_int, default=1,
                     help="local worker processes evaluating placements (default 1: this process); pays off with "
                          "slow evaluations or the asynchronous variants ga-steady and map-elites-async "
                          "(docs/scaling.md)")
    par.add_argument("--dask", metavar="ADDRESS",
                     help="evaluate on a Dask cluster (tcp://host:8786; docs/scaling.md); Dask exchanges pickles, "
                          "which run code where they are loaded: connect only to a scheduler you trust "
                          "(docs/security.md)")
    p.add_argument("--out", metavar="FILE", help="write the result: placement/1 + history (+ archive, plan)")
    p.add_argument("--resume", type=run_id_arg, metavar="RUN_ID",
                   help="continue a stopped or interrupted stored run from its last checkpoint (the problem, "
                        "algorithm and budget are the run's own)")
    p.add_argument("--force", action="store_true",
                   help="with --resume: take over a run that claims to be running (its process on another host, say); "
                        "a process still driving it stops at its next checkpoint")
    p.add_argument("--no-store", action="store_true", help="do not record the run in the run store")
    p.add_argument("--label", type=note, help="a note stored with the run (plain text, at most 1,000 characters)")
    p.add_argument("--home", metavar="DIR", help="data directory (default $PLACEMENT_HOME or ~/.placement)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    measured_cmds.add_options(p)
    p.set_defaults(handler=cmd_optimize)

    p = sub.add_parser("algorithms", help="list the algorithms and their parameters (thesis defaults)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_algorithms)


def budget_int(text: str) -> int:
    """An evaluation budget: 0 (zero-shot, learned placers only) to 2**63 - 1."""
    return 0 if text.strip() == "0" else count_int(text)


def note(text: str) -> str:
    """A run's label: printed by `runs list` and stored as UTF-8, so no control characters or undecodable bytes."""
    if escape(text) != text:
        bad = next(c for c in text if escape(c) != c)
        raise argparse.ArgumentTypeError(f"contains {escape(repr(bad))}, a control character or an undecodable "
                                         "byte; write the note as plain text")
    if len(text) > 1000:
        raise argparse.ArgumentTypeError(f"is {len(text):,} characters long; write at most 1,000")
    return text


def parse_params(items: list[str]) -> dict:
    params = {}
    for item in items:
        if "=" not in item:
            raise InputError(f"expected KEY=VALUE, got {item!r}", field="--param", fix="Write e.g. --param population=100")
        k, v = item.split("=", 1)
        params[k.strip().replace("-", "_")] = v.strip()
    return params


class ProgressBar:
    """A one-line progress bar on stderr, redrawn at most ten times a second."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.last = 0.0

    def __call__(self, pr) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if not pr.done and now - self.last < 0.1:
            return
        self.last = now
        frac = pr.fraction
        bar = "" if frac is None else "[" + "#" * int(frac * 30) + "." * (30 - int(frac * 30)) + "] "
        budget = f"/{pr.budget}" if pr.budget else ""
        snap = pr.snapshot or {}
        if snap.get("stage") == "planning" and not pr.done:  # HEFT: long planning before its one evaluation
            sys.stderr.write(f"\r{pr.algorithm}: planning {snap['planned_tasks']:,}/{snap['tasks']:,} tasks ")
            sys.stderr.flush()
            return
        sys.stderr.write(f"\r{pr.algorithm}: {bar}{pr.evaluations}{budget} evals, best {pr.best:.6g} s, "
                         f"{pr.evals_per_s:,.0f} evals/s ")
        if pr.done:
            sys.stderr.write("\n")
        sys.stderr.flush()


def result_to_dict(result, problem) -> dict:
    out = {
        "format": "placement-result/1",
        "algorithm": result.algorithm,
        "params": result.params,
        "seed": result.seed,
        "problem": {"network": problem.graph.name, "devices": problem.devices.name, "profile": problem.profile.name,
                    "measured_op_times": bool(getattr(problem.profile, "timings", None)),
                    **batch_summary(problem), "forward_only": problem.settings.forward_only,
                    "penalty": problem.penalty},
        "best_objective_s": result.best_objective,
        "batch_time_s": result.best.result.batch_time,
        "feasible": result.best.feasible,
        "evaluations": result.evaluations,
        "wall_s": result.wall_s,
        "stopped": result.stopped,
        "best_assignment": placement_to_dict(result.best_placement, problem.graph, problem.devices,
                                             problem.splits)["assignment"],
        "placement": placement_to_dict(result.best_placement, problem.graph, problem.devices, problem.splits),
        "history": [[int(e), b, c] for e, b, c in result.history.tolist()],
    }
    extras = result.extras
    if "planned_makespan_s" in extras:
        out["planned_makespan_s"] = extras["planned_makespan_s"]
        # HEFT plans one step of the problem's graph: under gpipe/1f1b that is one micro-batch, while
        # best_objective_s is the simulated time per whole batch; do not compare the two blindly
        out["planned_for"] = "micro-batch" if problem.settings.schedule != "thesis" else "batch"
        out["plan"] = extras.get("plan", [])
    if extras.get("archive") is not None:
        archive = extras["archive"]
        out["archive"] = archive.to_dict()
        for elite in out["archive"]["elites"]:
            elite["assignment"] = placement_to_dict(elite.pop("placement"), problem.graph, problem.devices,
                                                    problem.splits)["assignment"]
    return out


def require_learned():
    """Import the learned placers (torch, registering placeto and gdp), or say which extra to install."""
    import importlib

    from ..torch import require_torch
    require_torch()
    return importlib.import_module("placement_core.torch.policies")


def cmd_optimize(args) -> int:
    from ..optimize import LEARNED_NAMES, run
    from ..store.recording import resume_run, start_run
    from ..store import RunStore

    bar = ProgressBar(enabled=not args.quiet and sys.stderr.isatty())
    out_path = check_output_file(args.out, "--out") if args.out is not None else None
    run_id = initial = seeded = None
    if args.objective == "measured" or args.resume is not None and _measured_run(args):
        return measured_cmds.cmd_measured(args)
    if args.resume is not None:
        if args.init:
            raise InputError("--init starts a new run; a resumed run keeps the seeds it was started with",
                             field="--init", fix="Leave --init out with --resume")
        with RunStore(home=args.home) as store:
            algorithm = store.get(args.resume).algorithm
            if algorithm.startswith("train-"):
                raise InputError(f"run {args.resume} is a policy training, not an optimization", field="--resume",
                                 fix="Train again with `placement train-policy` (a training is not resumed)")
            if algorithm in LEARNED_NAMES:
                require_learned()
            problem = store.problem(args.resume)
            run_id = args.resume
            with stop_on_first_interrupt(STOPPING) as stop:
                result = resume_run(store, args.resume, workers=args.workers, dask=args.dask, progress=bar,
                                    force=args.force, stop=stop)
    else:
        missing = [f"--{k}" for k in ("network", "devices", "algorithm") if getattr(args, k) is None]
        if missing:
            from .common import UsageError
            raise UsageError(f"the following arguments are required: {', '.join(missing)} "
                             "(see `placement optimize --help`)")
        from ..optimize import problem_for
        problem = problem_for(build_problem(args), args.algorithm)  # data parallel brings its splits
        if args.init:  # and so does starting a search from it (--init data-parallel)
            from ..optimize.seeding import parse_init
            for kind, _ in parse_init(args.init):
                problem = problem_for(problem, kind)
        params = parse_params(args.param)
        if args.algorithm in LEARNED_NAMES:
            if not args.policy:
                raise InputError(f"--algorithm {args.algorithm} applies a trained policy", field="--policy",
                                 fix="Give --policy FILE (see assets/policies/, or `placement train-policy`)")
            if args.init:
                raise InputError("--init seeds a search; a learned placer starts from its policy's own placement",
                                 field="--init", fix=f"Leave --init out with --algorithm {args.algorithm}")
            require_learned()
            params["policy"] = args.policy
        elif args.policy:
            raise InputError("--policy is for --algorithm placeto or gdp", field="--policy",
                             fix="Drop --policy, or choose a learned placer")
        elif args.budget == 0:
            raise InputError("a budget of 0 evaluations means zero-shot, which only a trained policy can do",
                             field="--budget", fix="Give --budget 1 or more, or use --algorithm placeto or gdp")
        # zero-shot: the one evaluation of the policy's own placement
        evaluations = 1 if args.budget == 0 else args.budget if args.budget or args.seconds else 20000
        if args.init:
            from ..optimize.seeding import initial_placements, seeding_record
            seeds = initial_placements(problem, args.init, seed=args.seed)
            initial = seeds.placements
            seeded = seeding_record(args.init, seeds)
        if args.seconds is None and not args.quiet:
            say_how_long(problem, args.algorithm, evaluations, args.workers, args.no_store)
        if args.no_store:
            with stop_on_first_interrupt(STOPPING) as stop:
                result = run(problem, args.algorithm, evaluations=evaluations, seconds=args.seconds, seed=args.seed,
                             params=params, workers=args.workers, dask=args.dask, progress=bar, initial=initial,
                             stop=stop)
        else:
            with RunStore(home=args.home) as store, stop_on_first_interrupt(STOPPING) as stop:
                run_id, result = start_run(store, problem, args.algorithm, evaluations=evaluations,
                                           seconds=args.seconds, seed=args.seed, params=params, label=args.label,
                                           workers=args.workers, dask=args.dask, progress=bar, initial=initial,
                                           seeding=seeded, stop=stop)
    data = result_to_dict(result, problem)
    if run_id is not None:
        data["run_id"] = run_id
    if seeded is not None:
        data["seeded"] = seeded
    if out_path is not None:
        write_json(out_path, data)
    if args.json:
        print_json(data)
        return 0
    summary = data["problem"]
    print(f"{result.algorithm} on {printable(problem.graph.name)} / {printable(problem.devices.name)} "
          f"(batch {summary['batch_size']}, "
          f"{describe_batches(summary)}): best objective "
          f"{result.best_objective:.6g} s (batch time {fmt_seconds(data['batch_time_s'])}, "
          + ("fits in memory" if data["feasible"] else "overflows memory")
          + f") after {result.evaluations} evaluations in {result.wall_s:.1f} s")
    if seeded is not None:
        from ..optimize.seeding import seeding_text
        print(printable(seeding_text(seeded, best=True)))
    if "planned_makespan_s" in data:
        unit = (f"one micro-batch of {summary['micro_batch_size']}, not the whole batch"
                if data["planned_for"] == "micro-batch" else "one batch")
        print(f"HEFT planned makespan {fmt_seconds(data['planned_makespan_s'])} (its own plan for {unit})")
    if "archive" in data:
        arch = result.extras["archive"]
        print(f"archive: {len(arch)} niches filled ({arch.coverage:.1%} of {'x'.join(map(str, arch.shape))})")
    used = {}
    split = 0
    for dev in data["best_assignment"].values():
        split += isinstance(dev, dict)
        for name in (dev["devices"] if isinstance(dev, dict) else [dev]):
            used[name] = used.get(name, 0) + 1
    print("ops per device: " + ", ".join(f"{printable(d)} {n}" for d, n in sorted(used.items()))
          + (f" ({split} op(s) split over several devices)" if split else ""))
    if args.out:
        print(f"result written to {printable(args.out)}")
    if run_id is not None:
        print(f"stored as run {run_id} (see `placement runs show {run_id}`)")
        if result.stopped:
            print(f"stopped after {result.evaluations:,} evaluations; `placement optimize --resume {run_id}` "
                  "continues it")
    return 0


STOPPING = "stopping after this batch and keeping the run (Ctrl-C again to interrupt at once)"
LONG_S = 600  # a run expected to take longer is announced with its duration before it starts


def say_how_long(problem, algorithm: str | list[str], evaluations: int, workers: int, no_store: bool,
                 runs: int = 1) -> None:
    """One line on stderr before a long search (or ``runs`` of them, a sweep): how long ``evaluations`` take at
    the simulator's rate, measured here on a few placements, and how to stop and resume it. Fixed placers (HEFT,
    min-cut, ...) finish early and are not counted."""
    from ..optimize import ALGORITHMS
    from ..parallel.pacing import probe_eval_seconds

    names = [algorithm] if isinstance(algorithm, str) else list(algorithm)
    searching = [a for a in names if a in ALGORITHMS and not ALGORITHMS[a].deterministic]
    if not searching or evaluations < 1000:
        return
    runs = max(1, round(runs * len(searching) / len(names)))
    per_eval = probe_eval_seconds(problem, budget_s=0.02, least=3, most=200)
    total = runs * evaluations * per_eval / max(1, workers)
    if total < LONG_S:
        return
    rate = 1 / per_eval if per_eval > 0 else float("inf")
    where = f"{workers} workers" if workers > 1 else "one core"
    what = f"{evaluations:,} evaluations" if runs == 1 else f"{runs:,} runs of {evaluations:,} evaluations"
    then = (("Ctrl-C stops it" if runs == 1 else "Ctrl-C stops them") if no_store else
            "Ctrl-C stops it and keeps the run; `placement optimize --resume ID` continues it" if runs == 1 else
            "Ctrl-C stops them and keeps the runs; `placement optimize --resume ID` continues one")
    print(f"note: {what} at about {rate:,.0f} evaluations/s (measured here, {where}) take about "
          f"{_duration(total)}; {then}. --budget or --seconds makes it shorter", file=sys.stderr)


def _duration(seconds: float) -> str:
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("hours", 3600), ("minutes", 60)):
        if seconds >= 2 * size:
            return f"{seconds / size:,.0f} {unit}"
    return f"{seconds:,.0f} seconds"


def _measured_run(args) -> bool:
    from ..store.measured_search import is_measured
    from ..store import RunStore

    with RunStore(home=args.home) as store:
        return is_measured(store.get(args.resume).algorithm)


def cmd_algorithms(args) -> int:
    from ..optimize import ALGORITHMS

    data = {name: {"title": cls.title, "deterministic": cls.deterministic,
                   "params": {k: {"default": p.default, "help": p.help} for k, p in cls.PARAMS.items()}}
            for name, cls in ALGORITHMS.items()}
    if args.json:
        print_json(data)
        return 0
    for name, info in data.items():
        print(f"{name}: {info['title']}")
        for k, p in info["params"].items():
            print(f"    {k} = {p['default']}    {p['help']}")
    return 0
