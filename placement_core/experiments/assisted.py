"""Surrogate-assisted search and initial mappings, measured on the simulator (the simulator plays the truth).

``placement experiment assisted``: per network and seed, the plain GA's best after ``--reference`` (20,000)
evaluations, and the surrogate-assisted GA's best after ``--budget`` (2,000) true evaluations, with how
many true evaluations it needed to reach the plain GA's result (the issue's target: at most 2,000).

``placement experiment seeding``: the GA's best after 1,000 / 5,000 / 20,000 evaluations from random
placements, from the dissertation's heuristic mappings, from the Bayesian (TPE) start and from both; the
evaluations a start spends are charged to the GA's budget.

Both print a Markdown table (``--json``: the rows).
"""

from __future__ import annotations

import json
import os
import time

import numpy as np

from ..base.args import MAX_BUDGET, Parser, int_in
DEFAULT_PROBLEMS = "resnet50:malvik-4gpu-limited-resnet50,inception_v3:malvik-4gpu-limited-inception"
HEURISTICS = "heft,heft-nocomm,heft-memory,min-cut,m-etf,m-topo,expert,single"


def _problems(text: str):
    from ..formats.catalog import load_devices, load_network
    from ..problem import Problem

    out = []
    for item in text.split(","):
        net, _, dev = item.partition(":")
        out.append((net, dev, Problem(load_network(net), load_devices(dev))))
    return out


def _best_at(history: np.ndarray, evaluations: int) -> float:
    rows = history[history[:, 0] <= evaluations]
    return float(rows[-1, 1]) if len(rows) else float("inf")


def assisted_rows(problems: str, seeds: int, budget: int, reference: int, batch: int, generations: int,
                  initial: int, say=lambda m: None, first_seed: int = 0) -> list[dict]:
    from ..surrogate.search import Ledger, SearchSettings, run_search
    from ..optimize import run

    rows = []
    for net, dev, problem in _problems(problems):
        for seed in range(first_seed, first_seed + seeds):
            t0 = time.perf_counter()
            ga = run(problem, "ga", evaluations=reference, seed=seed)
            ga_s = time.perf_counter() - t0
            target = ga.best_objective
            t0 = time.perf_counter()
            found = run_search(problem, Ledger(lambda xs, labels: problem.evaluate_many(xs)),
                               SearchSettings(budget=budget, search="assisted", seed=seed, batch=batch,
                                              generations=generations, initial=initial))
            sa_s = time.perf_counter() - t0
            reached = next((u for u, b in found.history if b <= target), None)
            rows.append({"network": net, "devices": dev, "seed": seed, "ga_reference": target,
                         "ga_at_budget": _best_at(ga.history, budget), "assisted": found.best_value,
                         "assisted_reached_at": reached, "ga_s": ga_s, "assisted_s": sa_s})
            say(f"{net} seed {seed}: GA@{reference} {target:.4f}, GA@{budget} {rows[-1]['ga_at_budget']:.4f}, "
                f"assisted@{budget} {found.best_value:.4f} (reached at {reached}) [{sa_s:.0f} s]")
    return rows


def seeding_rows(problems: str, seeds: int, checkpoints=(1000, 5000, 20000), bayes: int = 100,
                 say=lambda m: None, first_seed: int = 0) -> list[dict]:
    from ..optimize import run
    from ..optimize.seeding import initial_placements

    starts = {"random": None, "heuristics": HEURISTICS, "bayes": f"bayes:{bayes}",
              "heuristics + bayes": f"{HEURISTICS},bayes:{bayes}"}
    rows = []
    for net, dev, problem in _problems(problems):
        for name, init in starts.items():
            for seed in range(first_seed, first_seed + seeds):
                spent, initial = 0, None
                if init:
                    s = initial_placements(problem, init, seed=seed)
                    spent, initial = s.evaluations, s.placements
                r = run(problem, "ga", evaluations=max(checkpoints) - spent, seed=seed, initial=initial)
                row = {"network": net, "devices": dev, "start": name, "seed": seed, "start_evaluations": spent}
                for c in checkpoints:
                    row[f"best@{c}"] = _best_at(r.history, c - spent)
                rows.append(row)
            say(f"{net}, {name}: " + ", ".join(f"{c}: {np.mean([r[f'best@{c}'] for r in rows[-seeds:]]):.4f}"
                                             for c in checkpoints))
    return rows


def assisted_table(rows: list[dict], budget: int, reference: int) -> str:
    lines = [f"| network | seed | plain GA, {reference:,} | plain GA, {budget:,} | surrogate-assisted, {budget:,} "
             f"| true evaluations to reach the plain GA's {reference:,} |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['network']} | {r['seed']} | {r['ga_reference']:.4f} | {r['ga_at_budget']:.4f} | "
                     f"{r['assisted']:.4f} | {r['assisted_reached_at'] or 'not reached'} |")
    return "\n".join(lines)


def seeding_table(rows: list[dict], checkpoints=(1000, 5000, 20000)) -> str:
    lines = ["| network | start | evaluations it spends | " + " | ".join(f"best after {c:,}" for c in checkpoints)
             + " |", "|---|---|---|" + "---|" * len(checkpoints)]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["network"], r["start"]), []).append(r)
    for (net, start), rs in groups.items():
        cells = []
        for c in checkpoints:
            v = np.array([r[f"best@{c}"] for r in rs])
            cells.append(f"{v.mean():.4f} ± {v.std():.4f}")
        lines.append(f"| {net} | {start} | {rs[0]['start_evaluations']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None, which: str = "assisted") -> int:
    p = Parser(prog=f"placement experiment {which}")
    p.add_argument("--problems", default=DEFAULT_PROBLEMS, help=f"NETWORK:DEVICES,... (default {DEFAULT_PROBLEMS})")
    p.add_argument("--seeds", type=int_in(1, 1000), default=5, help="how many seeds (default 5)")
    p.add_argument("--first-seed", type=int_in(0, 2**62), default=0, help="the first seed (default 0)")
    p.add_argument("--json", action="store_true")
    if which == "assisted":
        p.add_argument("--budget", type=int_in(1, MAX_BUDGET), default=2000, help="true evaluations of the assisted GA (default 2000)")
        p.add_argument("--reference", type=int_in(1, MAX_BUDGET), default=20000, help="the plain GA's evaluations (default 20000)")
        p.add_argument("--batch", type=int_in(1, 100_000), default=10, help="true evaluations per round (default 10)")
        p.add_argument("--generations", type=int_in(1, 100_000), default=10, help="GA generations on the surrogate per round")
        p.add_argument("--initial", type=int_in(2, 100_000), default=100, help="random true evaluations first (default 100)")
    else:
        p.add_argument("--bayes", type=int_in(1, 100_000), default=100, help="TPE trials of the Bayesian start (default 100)")
        p.add_argument("--checkpoints", default="1000,5000,20000",
                       help="evaluations at which the best is reported (default 1000,5000,20000)")
    args = p.parse_args(argv)
    say = (lambda m: None) if args.json else (lambda m: print(m, flush=True))
    say(f"load average at the start: {'{:.2f}, {:.2f}, {:.2f}'.format(*os.getloadavg())}")
    if which == "assisted":
        rows = assisted_rows(args.problems, args.seeds, args.budget, args.reference, args.batch, args.generations,
                             args.initial, say, first_seed=args.first_seed)
        table = assisted_table(rows, args.budget, args.reference)
    else:
        checkpoints = tuple(int(c) for c in args.checkpoints.split(","))
        rows = seeding_rows(args.problems, args.seeds, checkpoints, bayes=args.bayes, say=say, first_seed=args.first_seed)
        table = seeding_table(rows, checkpoints)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(table)
        print(f"load average at the end: {'{:.2f}, {:.2f}, {:.2f}'.format(*os.getloadavg())}")
    return 0


def main_seeding(argv: list[str] | None = None) -> int:
    return main(argv, "seeding")
