"""Searches that spend a budget of *true* evaluations (measurements, or the simulator standing in for them):
the dissertation's GA on a learned surrogate (HTF-MPR, Ch. 6), a plain GA, and re-measuring the best
candidates in order.

Surrogate-assisted GA: the GA's population starts from the best truly evaluated placements and evolves
against the surrogate; after a few generations the placements it rates best that have no true value yet
are screened by the surrogate's prediction (a surrogate of measured times has the simulated time among
its features, so the simulator screens too) and only the best few are evaluated for real: half of them
from the GA's pool, half from neighbours of the best true placements (a trust region, which the
surrogate's errors mislead least; on Inception-V3 it took the seeds that missed the target to it); their true
values replace the predictions in the population, and the surrogate is refit on every true evaluation so
far (it is refit as they arrive). Rounds repeat until the budget is spent.

Every true evaluation goes through a :class:`Ledger`. A search is a deterministic function of its seed
and the values it is given, so a killed search resumes by running again from the start against the same
ledger: what was evaluated is read back, nothing is evaluated twice, and the search continues exactly
where it stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..base.errors import InputError
from ..problem import Problem
from .model import Surrogate, SurrogateSpec

SEARCHES = ("assisted", "ga", "top-k")


class Ledger:
    """Every true evaluation, by placement. ``evaluate`` asks ``truth`` only for placements it has not
    seen and remembers what it says (``inf`` for a failed one); :meth:`record` is where a persistent
    ledger writes."""

    def __init__(self, truth: Callable[[np.ndarray, list[str]], np.ndarray], known: dict[bytes, float] | None = None):
        self.truth = truth
        self.values: dict[bytes, float] = dict(known or {})
        self.order: list[bytes] = list(self.values)
        self.asked = 0  # placements this process evaluated for real

    def __len__(self) -> int:
        return len(self.values)

    def evaluate(self, placements: np.ndarray, labels: list[str]) -> np.ndarray:
        xs = np.ascontiguousarray(np.atleast_2d(placements), dtype=np.int32)
        keys = [x.tobytes() for x in xs]
        new = [i for i, k in enumerate(keys) if k not in self.values and keys.index(k) == i]
        if new:
            got = np.asarray(self.truth(xs[new], [labels[i] for i in new]), dtype=float)
            self.asked += len(new)
            for i, v in zip(new, got):
                self.values[keys[i]] = float(v) if np.isfinite(v) else float("inf")
                self.order.append(keys[i])
            self.record(xs[new], got, [labels[i] for i in new])
        return np.array([self.values[k] for k in keys])

    def record(self, placements: np.ndarray, values: np.ndarray, labels: list[str]) -> None:
        """A persistent ledger stores them here (the in-memory one has nothing more to do)."""

    def best(self) -> tuple[float, np.ndarray | None]:
        if not self.values:
            return float("inf"), None
        key = min(self.order, key=lambda k: self.values[k])
        return self.values[key], np.frombuffer(key, dtype=np.int32).copy()

    def samples(self) -> tuple[np.ndarray, np.ndarray]:
        """(placements, values) of the finite true evaluations, in evaluation order."""
        keys = [k for k in self.order if np.isfinite(self.values[k])]
        if not keys:
            return np.zeros((0, 0), dtype=np.int32), np.zeros(0)
        return (np.array([np.frombuffer(k, dtype=np.int32) for k in keys]), np.array([self.values[k] for k in keys]))


@dataclass(frozen=True)
class SearchSettings:
    budget: int  # true evaluations, those already in the ledger included
    search: str = "assisted"
    seed: int = 0
    population: int = 50  # the GA's (inner GA's) population
    initial: int = 20  # assisted: true evaluations before the first surrogate (seeds first, then random)
    batch: int = 5  # assisted: true evaluations per round
    generations: int = 30  # assisted: GA generations on the surrogate per round
    surrogate: SurrogateSpec = SurrogateSpec()

    def check(self) -> "SearchSettings":
        if self.search not in SEARCHES:
            raise InputError(f"unknown search {self.search!r}", field="--search", fix="Use one of: " + ", ".join(SEARCHES))
        for name in ("budget", "population", "initial", "batch", "generations"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise InputError(f"{name} must be a positive integer, got {v!r}", field=f"--{name}")
        if self.population < 2:
            raise InputError("the population must be at least 2", field="--population")
        return self


@dataclass
class SearchResult:
    best_placement: np.ndarray
    best_value: float
    history: list[tuple[int, float]]  # (true evaluations so far, best true value so far)
    evaluations: int
    rounds: int = 0


def run_search(problem: Problem, ledger: Ledger, settings: SearchSettings, *, initial=None,
               progress: Callable[[int, float], None] | None = None, stop=None) -> SearchResult:
    """Spend ``settings.budget`` true evaluations (counting what ``ledger`` already holds) with
    ``settings.search``; ``initial``: placements to start from, best first (a run's archive, seeds)."""
    s = settings.check()
    init = np.zeros((0, problem.n_ops), dtype=np.int32) if initial is None else \
        np.ascontiguousarray(np.atleast_2d(initial), dtype=np.int32).reshape(-1, problem.n_ops)
    state = _State(ledger, s.budget, progress, stop)
    if s.search == "top-k":
        if len(init) == 0:
            raise InputError("re-measuring the best candidates needs candidates", field="--search",
                             fix="Start from a stored run (its kept placements and archive)")
        for i in range(0, min(len(init), s.budget), s.batch):  # a batch per call: one set of benchmark workers
            part = init[i:min(i + s.batch, s.budget)]
            if state.evaluate(part, [f"candidate #{i + j + 1}" for j in range(len(part))]) is None:
                break
    elif s.search == "ga":
        _plain_ga(problem, state, s, init)
    else:
        _assisted(problem, state, s, init)
    best_v, best_x = ledger.best()
    if best_x is None:
        raise InputError("the search evaluated nothing", field="--budget-measurements")
    return SearchResult(best_x, best_v, state.history, state.used, state.rounds)


class _State:
    """The budget, the history and the stop flag around the ledger."""

    def __init__(self, ledger: Ledger, budget: int, progress, stop):
        self.ledger, self.budget, self.progress = ledger, budget, progress
        self.stopped = (stop.is_set if hasattr(stop, "is_set") else stop) or (lambda: False)
        self.history: list[tuple[int, float]] = []
        self.used = 0  # distinct placements evaluated by this search (read back from the ledger or new)
        self.seen: set[bytes] = set()
        self.best = float("inf")
        self.rounds = 0

    @property
    def left(self) -> int:
        return self.budget - self.used

    def evaluate(self, xs: np.ndarray, labels: list[str]) -> np.ndarray | None:
        """True values of ``xs`` (within what is left of the budget), or None when the search must end."""
        if self.left <= 0 or self.stopped():
            return None
        fresh = []
        for i, x in enumerate(xs):
            k = x.tobytes()
            if k not in self.seen and len(fresh) < self.left:
                fresh.append(i)
                self.seen.add(k)
        if fresh:
            vals = self.ledger.evaluate(xs[fresh], [labels[i] for i in fresh])
            for v in vals:
                self.used += 1
                self.best = min(self.best, float(v))
                self.history.append((self.used, self.best))
            if self.progress is not None:
                self.progress(self.used, self.best)
        known = [self.ledger.values.get(x.tobytes(), np.inf) for x in xs]
        return np.array(known)


def _plain_ga(problem: Problem, state: _State, s: SearchSettings, init: np.ndarray) -> None:
    from ..optimize import make_optimizer

    ga = make_optimizer(problem, "ga", seed=s.seed, params={"population": s.population,
                                                             "elite": min(5, s.population - 1)},
                        initial=init[:s.population])
    while state.left > 0 and not state.stopped():
        xs = ga.ask(1 << 30)
        fs = state.evaluate(xs, [f"GA generation {ga.generation + 1}"] * len(xs))
        if fs is None:
            break
        ga.tell(xs, fs)  # placements cut off by the budget have no value: inf, never a parent


def _assisted(problem: Problem, state: _State, s: SearchSettings, init: np.ndarray) -> None:
    """The GA runs on, generation after generation, against the surrogate; every ``generations``
    generations the ``batch`` placements it rates best that have no true value are evaluated for real,
    their true values replace the predictions in the population (an optimistic error loses its place at
    once), and the surrogate is refit on everything measured so far."""
    from ..optimize import make_optimizer

    rng = np.random.default_rng(s.seed)
    first = init[:s.initial]
    if len(first) < s.initial:
        first = np.concatenate([first, rng.integers(0, problem.n_devices, (s.initial - len(first), problem.n_ops),
                                                    dtype=np.int32)])
    if state.evaluate(first, [f"start #{i + 1}" for i in range(len(first))]) is None:
        return
    X, y = _mine(state)
    order = np.argsort(y, kind="stable")
    ga = make_optimizer(problem, "ga", seed=int(rng.integers(1 << 62)),
                        params={"population": s.population, "elite": min(5, s.population - 1)},
                        initial=X[order[:s.population]])
    while state.left > 0 and not state.stopped():
        state.rounds += 1
        X, y = _mine(state)
        model = Surrogate(problem, s.surrogate).fit(X, y) if len(y) >= 2 else None
        if ga.generation > 0:  # the population's values: true where known, else the new model's
            ga.pop_f = _values(state, model, ga.pop, rng)
            ga.pop, ga.pop_f, ga.pop_rate = _sorted(ga.pop, ga.pop_f, ga.pop_rate)
        pool: dict[bytes, tuple[float, np.ndarray]] = {}
        for _ in range(s.generations):
            xs = ga.ask(1 << 30)
            fs = _values(state, model, xs, rng)
            ga.tell(xs, fs)
            for x, f in zip(xs, fs):
                k = x.tobytes()
                if k not in state.seen and k not in pool:
                    pool[k] = (float(f), x)
        if not pool:  # nothing new came up: explore at random
            pool = {x.tobytes(): (0.0, x) for x in rng.integers(0, problem.n_devices, (s.batch, problem.n_ops),
                                                                 dtype=np.int32)}
        take = min(s.batch, state.left)
        local = _local_pool(problem, state, model, rng, exclude=pool) if model is not None else {}
        n_local = min(len(local), take // 2)  # half the round refines the best true placements
        chosen = sorted(local.values(), key=lambda v: v[0])[:n_local]
        chosen += sorted(pool.values(), key=lambda v: v[0])[:take - n_local]
        xs = np.array([x for _, x in chosen], dtype=np.int32)
        if state.evaluate(xs, [f"round {state.rounds}, predicted #{i + 1}" for i in range(len(xs))]) is None:
            break
        ga.pop_f = _values(state, model, ga.pop, rng)
        ga.pop, ga.pop_f, ga.pop_rate = _sorted(ga.pop, ga.pop_f, ga.pop_rate)


def _local_pool(problem: Problem, state: _State, model, rng, exclude: dict, parents: int = 3,
                per_parent: int = 100) -> dict[bytes, tuple[float, np.ndarray]]:
    """Neighbours of the best truly evaluated placements, rated by the surrogate: a few ops given new genes,
    or a run of consecutive ops moved to one device (the GA's zone move). The GA on the surrogate roams;
    this is the trust region around what is known to be good, which a surrogate's errors mislead least."""
    from ..optimize.genes import Genes

    X, y = _mine(state)
    if len(y) == 0:
        return {}
    n, nd = problem.n_ops, problem.n_devices
    genes = Genes(problem) if problem.splits else None  # split genes only where the problem has splits
    out: dict[bytes, tuple[float, np.ndarray]] = {}
    cands = []
    for x in X[np.argsort(y, kind="stable")[:parents]]:
        for _ in range(per_parent):
            c = x.copy()
            if rng.random() < 0.5:
                pos = rng.choice(n, size=min(n, int(rng.integers(1, 5))), replace=False)
                c[pos] = genes.draw(rng, pos) if genes else rng.integers(0, nd, len(pos))
            else:
                length = int(rng.integers(1, max(2, n // 10) + 1))
                start = int(rng.integers(0, n - length + 1))
                zone = np.full(n, genes.draw_any(rng) if genes else int(rng.integers(0, nd)), dtype=np.int32)
                c[start:start + length] = (genes.repair(zone) if genes else zone)[start:start + length]
            cands.append(c)
    cands = np.array(cands, dtype=np.int32)
    for c, f in zip(cands, model.predict(cands)):
        k = c.tobytes()
        if k not in state.seen and k not in exclude and k not in out:
            out[k] = (float(f), c)
    return out


def _mine(state: _State) -> tuple[np.ndarray, np.ndarray]:
    """This search's finite true evaluations so far (a resumed search's ledger may hold later ones)."""
    X, y = state.ledger.samples()
    keep = [i for i, x in enumerate(X) if x.tobytes() in state.seen]
    return X[keep], y[keep]


def _values(state: _State, model, xs: np.ndarray, rng) -> np.ndarray:
    """True values where this search has them, predictions elsewhere."""
    pred = model.predict(xs) if model is not None else rng.random(len(xs))
    return np.array([state.ledger.values[x.tobytes()] if x.tobytes() in state.seen else float(p)
                     for x, p in zip(xs, pred)])


def _sorted(pop, pop_f, rate):
    order = np.argsort(pop_f, kind="stable")
    return pop[order], pop_f[order], rate[order]
