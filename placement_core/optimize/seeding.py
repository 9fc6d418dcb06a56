"""Initial placements for any search (dissertation Ch. 4): heuristic mappings and a Bayesian-optimization start.

``--init heft,heft-nocomm,min-cut,m-etf,single,random:10,bayes:100``. Each heuristic is one of our fixed
placers (HEFT; HEFT without communication, the dissertation's TF-Mapper; recursive min-cut; Baechi's m-ETF
and m-TOPO; the expert's balanced stages; every single-device placement, the dissertation's homogeneous
mappings); ``random:N`` draws N uniformly random placements; ``bayes:T`` runs T trials of optuna's
tree-structured Parzen estimator (TPE, the dissertation's BO, §4.2) over one categorical variable per op,
starting from the homogeneous mappings as the dissertation does, and contributes its best distinct trials.

Seeds are evaluated here (each heuristic once, BO ``T`` times): :class:`Seeds` reports how many
evaluations they cost, so a comparison can charge them to the search's budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..base.errors import InputError
from ..problem import Problem

HEURISTICS = ("heft", "heft-nocomm", "heft-memory", "min-cut", "m-etf", "m-topo", "expert", "single",
              "data-parallel", "hybrid-parallel", "heft-sharded")  # the last three split ops (docs/sharding.md)
COUNTED = {"random": 10, "bayes": 100}  # kinds that take :N, with their default N
KINDS = HEURISTICS + tuple(COUNTED)


@dataclass
class Seeds:
    placements: np.ndarray  # [k, n_ops], distinct, best first
    labels: list[str]
    objectives: list[float]
    evaluations: int  # what producing them cost
    parts: dict = field(default_factory=dict)  # kind -> evaluations it used


def seeding_record(init: str, seeds: Seeds, *, with_current: bool = False) -> dict:
    """What a run was seeded with, as the run store keeps it and every surface reports it."""
    return {"init": init, "placements": len(seeds.labels), "evaluations": seeds.evaluations,
            "best_label": seeds.labels[0], "best_objective_s": float(seeds.objectives[0]),
            "with_current": bool(with_current)}


def seeding_text(seeding: dict, *, best: bool = False, sentence: bool = False) -> str:
    """A :func:`seeding_record` in words (the CLI's, ``runs show``'s and the dashboard's); ``sentence``
    starts it with a capital, as a caption of its own does."""
    text = (f"{'S' if sentence else 's'}eeded with {seeding['placements']} initial placement(s) ({seeding['init']}; "
            f"{seeding['evaluations']:,} evaluations, not counted in the budget)"
            + (" and the current placement" if seeding.get("with_current") else ""))
    if best:
        text += f"; best seed {seeding['best_label']}: {seeding['best_objective_s']:.6g} s"
    return text


def parse_init(text: str) -> list[tuple[str, int]]:
    """``heft,bayes:50`` -> [("heft", 1), ("bayes", 50)]; every name checked."""
    out = []
    for item in [p.strip() for p in str(text).split(",") if p.strip()]:
        name, _, count = item.partition(":")
        if name not in KINDS:
            raise InputError(f"unknown initial mapping {name!r}", field="--init",
                             fix="Use a comma-separated list of: " + ", ".join(KINDS) + " (random:N and bayes:N "
                                 "take a count)")
        if count and name not in COUNTED:
            raise InputError(f"{name} takes no count", field="--init", fix=f"Write {name} alone")
        try:
            n = int(count) if count else COUNTED.get(name, 1)
        except ValueError:
            raise InputError(f"{item!r}: the count must be an integer", field="--init") from None
        if not 1 <= n <= 100_000:
            raise InputError(f"{item!r}: the count must be from 1 to 100000", field="--init")
        out.append((name, n))
    if not out:
        raise InputError("no initial mapping named", field="--init", fix="e.g. --init heft,min-cut,bayes:100")
    return out


# What seeding may cost, checked before any of it starts (a search that never starts helps no one):
MAX_SEED_GENES = 20_000_000  # placements x ops held at once (80 MB as int32); random:100000 of 100k ops was 37 GiB
MAX_BAYES_TRIALS = 1_000  # optuna's TPE looks at every earlier trial for each new one: quadratic in the trials
MAX_BAYES_WORK = 50_000  # trials x ops: bayes:100 on Inception-V3 (315 ops) is 31,500, about 20 s
CHUNK = 4096  # random placements drawn and evaluated at a time (Ctrl-C lands between chunks)


def check_init(problem: Problem, kinds: list[tuple[str, int]], option: str = "--init") -> None:
    """Refuse, with the limit, initial mappings whose placements would not fit in memory or whose Bayesian
    start would run for hours."""
    n, d = problem.n_ops, problem.n_devices
    count = 0
    for name, k in kinds:
        if name == "bayes":
            most = max(1, min(MAX_BAYES_TRIALS, MAX_BAYES_WORK // n))
            if k > most:
                raise InputError(f"bayes:{k} is {k:,} TPE trials over {n:,} ops; the Bayesian start takes at most "
                                 f"{MAX_BAYES_TRIALS:,} trials and {MAX_BAYES_WORK:,} trials x ops (optuna's TPE "
                                 "slows with every trial)", field=option,
                                 fix=f"Use at most bayes:{most} for this network, or random:N for many more starts")
        count += k if name in COUNTED else (d if name == "single" else 1)
    if count * n > MAX_SEED_GENES:
        most = max(0, MAX_SEED_GENES // n - (count - sum(k for name, k in kinds if name == "random")))
        raise InputError(f"{count:,} initial placements of {n:,} ops are {count * n:,} genes, more than the "
                         f"{MAX_SEED_GENES:,} the seeds may hold", field=option,
                         fix=f"Ask for fewer: at most random:{most} with these kinds on this network"
                         if most else "Ask for fewer initial mappings on a network this large")


def initial_placements(problem: Problem, init: str | list, *, seed: int = 0, keep: int | None = None,
                       objective: Callable[[np.ndarray], np.ndarray] | None = None) -> Seeds:
    """The placements ``init`` names, evaluated, distinct, best first (at most ``keep``).

    ``objective`` scores a batch of placements (default: the simulator); the Bayesian start optimizes it.
    What they would cost is checked first (:func:`check_init`)."""
    kinds = parse_init(init) if isinstance(init, str) else list(init)
    check_init(problem, kinds)
    score = objective or problem.evaluate_many
    rng = np.random.default_rng(seed)
    xs: list[np.ndarray] = []
    labels: list[str] = []
    fs: list[float] = []
    parts: dict[str, int] = {}
    for name, count in kinds:
        if name == "bayes":
            bx, bf = bayes_start(problem, count, seed=seed, objective=score)
            order = np.argsort(bf, kind="stable")
            xs += [bx[i] for i in order]
            fs += [float(bf[i]) for i in order]
            labels += [f"bayes trial {int(i) + 1}" for i in order]
            parts[name] = count
            continue
        if name == "random":
            from .genes import gene_space
            space = gene_space(problem)
            cand, vals = [], []
            for start in range(0, count, CHUNK):  # in chunks: a long start stays interruptible
                k = min(CHUNK, count - start)
                part = (rng.integers(0, problem.n_devices, (k, problem.n_ops), dtype=np.int32)
                        if isinstance(space, int) else space.draw(rng, np.broadcast_to(np.arange(problem.n_ops),
                                                                                       (k, problem.n_ops))))
                cand.append(np.ascontiguousarray(part, dtype=np.int32))
                vals.append(np.asarray(score(cand[-1]), dtype=float))
            cand, vals = np.concatenate(cand), np.concatenate(vals)
            names = [f"random #{i + 1}" for i in range(count)]
            xs += list(cand)
            labels += names
            fs += [float(v) for v in vals]
            parts[name] = len(cand)
            continue
        from . import algorithm_class
        placer = algorithm_class(name)(problem, seed=seed)
        cand = placer.all_candidates()
        names = [name if len(cand) == 1 else f"{name} #{i + 1}" for i in range(len(cand))]
        vals = score(np.ascontiguousarray(cand, dtype=np.int32))
        xs += list(cand)
        labels += names
        fs += [float(v) for v in vals]
        parts[name] = len(cand)
    seen: set[bytes] = set()
    rows = []
    for i in np.argsort(fs, kind="stable"):
        key = np.ascontiguousarray(xs[i], dtype=np.int32).tobytes()
        if key not in seen:
            seen.add(key)
            rows.append(i)
    rows = rows[:keep] if keep else rows
    return Seeds(np.array([xs[i] for i in rows], dtype=np.int32).reshape(-1, problem.n_ops),
                 [labels[i] for i in rows], [fs[i] for i in rows], int(sum(parts.values())), parts)


def bayes_start(problem: Problem, trials: int, *, seed: int = 0,
                objective: Callable[[np.ndarray], np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``trials`` evaluations chosen by optuna's TPE (one categorical device per op), the homogeneous
    mappings first; returns (placements, objectives) in trial order."""
    try:
        import optuna
    except ImportError:
        raise InputError("optuna is not installed (the Bayesian start uses its TPE sampler)", field="--init",
                         fix='Install the learn extra: .venv/bin/pip install -e ".[learn]"') from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    score = objective or problem.evaluate_many
    n, d = problem.n_ops, problem.n_devices
    dist = optuna.distributions.CategoricalDistribution(list(range(d)))
    fixed = {f"op{i}": dist for i in range(n)}
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, trials)))
    for dev in range(min(d, trials)):
        study.enqueue_trial({f"op{i}": dev for i in range(n)})
    xs, fs = [], []
    for _ in range(trials):
        trial = study.ask(fixed)
        x = np.array([trial.params[f"op{i}"] for i in range(n)], dtype=np.int32)
        f = float(score(x[None])[0])
        study.tell(trial, f)
        xs.append(x)
        fs.append(f)
    return np.array(xs, dtype=np.int32).reshape(-1, n), np.array(fs)
