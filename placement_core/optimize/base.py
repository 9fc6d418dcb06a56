"""The one interface every placement optimizer implements: ask for candidates, tell their objectives.

The driver (:mod:`.driver`) owns the budget, the evaluation backend, the
history and the stop flag; an optimizer only proposes placements and learns
from their objectives, like pyribs' emitters. Placements are int32 arrays over
the ops in topological order; objectives are seconds per batch plus the
memory penalty (lower is better).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np

from ..base.errors import InputError
from ..problem import Evaluation, Problem


@dataclass(frozen=True)
class Param:
    """A tunable parameter: default, type and a help text the CLI and dashboard show."""

    default: Any
    help: str
    type: type = float
    choices: tuple | None = None
    low: float | None = None
    high: float | None = None
    # The values the dashboard offers in a list (the parser still takes any valid value, e.g. "5-point").
    options: tuple | None = None
    # A comma-separated subset of these names (at least two, no repeats), e.g. MAP-Elites' niche dimensions.
    items: tuple | None = None

    def parse(self, name: str, value: Any) -> Any:
        if self.items is not None:
            return self._parse_items(name, value)
        if self.type is bool:
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
                    raise InputError(f"{name} must be true or false, got {value!r}", field=name)
                value = value.lower() in ("true", "1", "yes")
            return bool(value)
        raw = value
        try:
            value = self.type(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf), float(10**400)
            raise InputError(f"{name} must be {_TYPE_WORDS.get(self.type, self.type.__name__)}, got "
                             f"{_short(raw)}", field=name) from None
        if self.type is float and not math.isfinite(value):
            # NaN passes every bound check (all comparisons are false), and the run store cannot read it back
            raise InputError(f"{name} must be a finite number, got {_short(raw)}", field=name)
        if self.choices is not None and value not in self.choices:
            raise InputError(f"{name} must be one of {', '.join(map(str, self.choices))}, got {value!r}",
                             field=name)
        high = self.high if self.high is not None or self.type is not int else MAX_INT_PARAM
        if self.low is not None and value < self.low or high is not None and value > high:
            raise InputError(f"{name} must be in [{self.low}, {high}], got {_short(value)}", field=name)
        return value


    def _parse_items(self, name: str, value: Any) -> str:
        parts = value if isinstance(value, (list, tuple)) else str(value).split(",")
        names = [str(p).strip() for p in parts if str(p).strip()]
        unknown = [n for n in names if n not in self.items]
        if unknown:
            raise InputError(f"{name}: unknown {', '.join(map(repr, unknown))}", field=name,
                             fix="Use a comma-separated list of: " + ", ".join(self.items))
        if len(set(names)) != len(names) or len(names) < 2:
            raise InputError(f"{name} needs at least two different names, got {value!r}", field=name,
                             fix="Use a comma-separated list of two or more of: " + ", ".join(self.items))
        return ",".join(names)


# An integer parameter without its own bound still ends up in SQLite and numpy: 64 bits at most. Those that
# size an allocation (population, batch, initial_size, tournament_size) set a far lower ``high``.
MAX_INT_PARAM = 2**63 - 1
_TYPE_WORDS = {int: "an integer", float: "a number", str: "text"}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text):,} characters)"


# Every optimizer by name, in the order their modules are imported (optimize/__init__ imports them all):
# the CLI's --algorithm choices and the dashboard's list.
ALGORITHMS: dict[str, type["Optimizer"]] = {}
# Optimizers that apply a trained policy (they need torch): registered when placement_core.torch.policies is
# imported, kept apart so that the everyday list never depends on what happened to be imported.
LEARNED_NAMES = ("placeto", "gdp")
LEARNED: dict[str, type["Optimizer"]] = {}


def register(cls: type["Optimizer"]) -> type["Optimizer"]:
    """Class decorator making an optimizer available by its ``name``; a name taken twice fails at import."""
    if not cls.name:
        raise ValueError(f"{cls.__qualname__} has no name to register under")
    table = LEARNED if cls.name in LEARNED_NAMES else ALGORITHMS
    other = ALGORITHMS.get(cls.name) or LEARNED.get(cls.name)
    if other is not None and other.__qualname__ != cls.__qualname__:
        raise ValueError(f"two optimizers are named {cls.name!r}: {other.__module__}.{other.__qualname__} and "
                         f"{cls.__module__}.{cls.__qualname__}")
    table[cls.name] = cls
    return cls


class Optimizer:
    """Base class: subclasses set ``name``, ``PARAMS`` and implement ``ask``/``tell``."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    PARAMS: ClassVar[dict[str, Param]] = {}
    # Deterministic algorithms (HEFT, baselines) propose a fixed list and then finish.
    deterministic: ClassVar[bool] = False
    # Set by the driver while it drives this optimizer (None otherwise): work that takes long inside
    # one ask(), such as HEFT planning 125,000 tasks, reports a snapshot through it.
    report: Callable[[dict], None] | None = None
    # Batches the driver may have asked for and not yet told (FIFO): 1 is the classic ask/tell
    # alternation; asynchronous variants raise it so workers never wait for the driver.
    pending: int = 1
    # Parameters renamed since runs were stored, {old name: new name}: a stored run's parameters and
    # checkpoints load under the new name (stored_params); a caller who passes the old name is told the new one.
    RENAMED: ClassVar[dict[str, str]] = {}
    # Parameters added since runs were stored, with the values that reproduce those runs: a stored run that lacks
    # one resumes with this value, not today's default (stored_params).
    STORED_DEFAULTS: ClassVar[dict[str, Any]] = {}

    def __init__(self, problem: Problem, *, seed: int = 0, initial: np.ndarray | None = None, **params):
        self.problem = problem
        self.n = problem.n_ops
        self.d = problem.n_devices
        # what the operators draw genes from: the device count, or the problem's genes when ops may be split
        from .genes import gene_space
        self.space = gene_space(problem)
        self.sharded = not isinstance(self.space, (int, np.integer))
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        unknown = set(params) - set(self.PARAMS)
        for old in sorted(unknown & set(self.RENAMED)):
            new = self.RENAMED[old]
            raise InputError(f"{self.name}'s parameter {old} is now called {new}", field=old,
                             fix=f"Use {new}={params[old]}")
        if unknown:
            raise InputError(f"unknown parameter(s) for {self.name}: {', '.join(sorted(unknown))}",
                             field="params", fix="Known: " + (", ".join(self.PARAMS) or "none"))
        self.params = {k: p.parse(k, params.get(k, p.default)) for k, p in self.PARAMS.items()}
        self.initial = (np.zeros((0, self.n), dtype=np.int32) if initial is None
                        else np.ascontiguousarray(np.atleast_2d(initial), dtype=np.int32))
        if self.initial.shape[1:] != (self.n,):
            raise InputError(f"initial placements must have {self.n} entries", field="initial")
        self.finished = False
        self.current = float("inf")  # the objective an optimizer considers "current" (for history plots)

    # -- the loop -------------------------------------------------------------------------------
    def ask(self, limit: int) -> np.ndarray:
        """Up to ``limit`` candidate placements, shape (k, n_ops); k = 0 means nothing left to try."""
        raise NotImplementedError

    def tell(self, placements: np.ndarray, objectives: np.ndarray) -> None:
        """Objectives of a prefix of the last ``ask`` (the budget may cut a batch short)."""
        raise NotImplementedError

    def next_recipe(self, limit: int):
        """The next batch as a :class:`~.variation.Recipe` (the driver's side of ``ask``): placements as they
        are, unless the algorithm lets its children be made where they are evaluated."""
        from .variation import Recipe
        return Recipe("given", np.ascontiguousarray(self.ask(limit)[:limit], dtype=np.int32))

    def take_results(self, placements: np.ndarray, objectives: np.ndarray, rates=None) -> None:
        """A proposed batch's children and objectives, in the order proposed (the driver's ``tell``)."""
        self.tell(placements, objectives)

    def ready(self) -> bool:
        """Whether ``ask`` may be called before the outstanding batches are told (an asynchronous
        variant waits for its first population)."""
        return True

    def configure(self, evaluator, budget: int | None) -> None:
        """Called once by the driver before the first ``ask`` (not on a resume) with the evaluation
        backend (its ``workers`` and measured ``pacing``) and the evaluation budget: an asynchronous
        variant resolves its "auto" batch sizes here and writes them into ``params``, so the result
        says what was used."""

    # -- what the UI and the result show --------------------------------------------------------
    def snapshot(self) -> dict:
        """Population or archive summary for progress displays (cheap, JSON-able)."""
        return {}

    def extras(self) -> dict:
        """Algorithm-specific results (HEFT's planned schedule, the MAP-Elites archive)."""
        return {}

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state, "finished": self.finished, "current": self.current}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.finished = state["finished"]
        self.current = state["current"]

    # -- helpers --------------------------------------------------------------------------------
    def random_placements(self, k: int) -> np.ndarray:
        if self.sharded:
            return self.space.draw(self.rng, np.broadcast_to(np.arange(self.n), (k, self.n)))
        return self.rng.integers(0, self.d, (k, self.n), dtype=np.int32)


def stored_params(algorithm: str, params: dict) -> dict:
    """A stored run's parameters under today's names: runs stored before a parameter was renamed (``in_flight``,
    now ``pending``) or added (pg's ``groups``: :attr:`Optimizer.STORED_DEFAULTS`) still resume as they ran.
    Unknown algorithms (measured searches) keep theirs as they are."""
    cls = ALGORITHMS.get(algorithm) or LEARNED.get(algorithm)
    renamed = cls.RENAMED if cls is not None else {}
    if not isinstance(params, dict):
        return params
    if renamed:
        params = {renamed.get(k, k): v for k, v in params.items() if not (k in renamed and renamed[k] in params)}
    added = cls.STORED_DEFAULTS if cls is not None else {}
    return {**{k: v for k, v in added.items() if k not in params}, **params} if added else params


@dataclass
class OptimizeResult:
    algorithm: str
    params: dict
    seed: int
    best_placement: np.ndarray
    best_objective: float
    best: Evaluation
    history: np.ndarray  # rows: evaluations used, best objective so far, current objective
    evaluations: int
    wall_s: float
    stopped: bool = False
    extras: dict = field(default_factory=dict)
    kept: list = field(default_factory=list)  # (objective, placement): the best distinct ones evaluated, best first

    @property
    def archive(self):
        return self.extras.get("archive")


@dataclass(frozen=True)
class Progress:
    """What a progress callback receives; safe to hand to another thread (no live references)."""

    algorithm: str
    evaluations: int
    budget: int | None
    best: float
    current: float
    elapsed_s: float
    snapshot: dict | None = None
    done: bool = False

    @property
    def evals_per_s(self) -> float:
        return self.evaluations / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def fraction(self) -> float | None:
        return None if not self.budget else min(1.0, self.evaluations / self.budget)
