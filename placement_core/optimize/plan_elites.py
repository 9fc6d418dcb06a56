"""MAP-Elites over cluster plans: an archive holding the best plan of every niche (pipeline depth × tensor degree by
default, any two or more plan dimensions on request).

Why an archive and not only the winner: the fastest plan is often not the one a job can launch (a pipeline no
deeper than the model's layers split evenly, a tensor degree the kernels support, ZeRO the stack lacks), and the
exhaustive search (:func:`.plans.plan`) stops at 400 plans over tp, pp, dp and the micro-batch. MAP-Elites samples
a larger space (the schedule, virtual stages, recomputation and ZeRO stage too, :mod:`.plan_space`) and keeps one
plan per niche, so the engineer reads the best plan at every depth × degree off one map.

What a niche keeps: its fastest plan that fits in memory. A niche where no plan simulated so far fits keeps the
plan nearest to fitting (least peak memory; then the faster), flagged ``fits: false``, so an empty-looking corner
says "over memory by so much" instead of nothing; any fitting plan displaces it. Each plan is simulated by the
event simulator (:func:`.plans.simulate_plan`), once: a child already simulated is not simulated again, and a
run ends when ``budget`` distinct plans are simulated or the space is exhausted.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ..base.errors import InputError
from .plan_space import DIMS, LABELS, PlanSpace, plan_space
from .plans import Plan, PlanRequest, gpus_of, simulate_plan

NICHES = ("pp", "tp")
MAX_TRIES = 20  # mutations of random elites tried before a child is drawn at random among the plans not yet seen


@dataclass
class PlanDimension:
    """One niche dimension: its values in order (what :mod:`..analysis.archive_view` puts on an axis)."""

    name: str
    label: str
    size: int
    axis: list

    def tick_labels(self, problem=None) -> list[str]:
        return [str(v) for v in self.axis]


@dataclass
class PlanElite:
    niche: tuple[int, ...]
    objective: float  # the plan's step time, s
    descriptors: tuple[float, ...]  # the niche's indices along each dimension
    plan: Plan
    row: int  # the genome, a row of the space

    @property
    def fits(self) -> bool:
        return self.plan.fits


def rank_key(plan: Plan, row: int) -> tuple:
    """Plans that fit before those that do not; the faster first among those that fit, the nearer to fitting
    (peak memory) among those that do not; the genome's row last, so a tie is settled the same way in any order."""
    return (not plan.fits, plan.step_time_s if plan.fits else plan.peak_memory_bytes, plan.step_time_s, row)


class PlanArchive:
    """niche -> the best plan simulated in it (:func:`rank_key`), and every plan simulated (without its graph)."""

    kind = "plan"
    problem = None  # plans have a problem each (:meth:`simulate`), not one for the archive
    # what the archive map's hover says (analysis.archive_view): an empty niche, an elite over memory
    empty_note = "no plan simulated here, or none is valid (t·p·d must be the GPUs)"
    over_memory_note = "(no plan simulated in this niche fits: the one nearest to fitting)"

    def __init__(self, space: PlanSpace, niches=NICHES, setup: tuple | None = None):
        bad = [n for n in niches if n not in DIMS]
        if bad or len(set(niches)) != len(niches) or len(niches) < 2:
            raise InputError(f"niches {','.join(map(str, niches))!r}: give two or more different plan dimensions",
                             field="--niches", fix="Use two or more of " + ", ".join(DIMS) + " (default pp,tp)")
        self.space, self.names = space, list(niches)
        self._cols = [DIMS.index(n) for n in niches]
        self.descriptors = [PlanDimension(n, LABELS[n], len(space.values[n]), list(space.values[n])) for n in niches]
        self.shape = tuple(d.size for d in self.descriptors)
        self.elites: dict[tuple[int, ...], PlanElite] = {}
        self.plans: dict[int, Plan] = {}
        self.reachable = {tuple(int(v) for v in r) for r in space.genomes[:, self._cols]}
        self.setup = setup  # (graph, devices, config): what :meth:`simulate` rebuilds a plan's problem from

    def __len__(self) -> int:
        return len(self.elites)

    @property
    def evaluations(self) -> int:
        return len(self.plans)

    @property
    def coverage(self) -> float:
        """The share of niches some valid plan falls in (a tp 8 × pp 8 niche of 8 GPUs holds none) that are filled."""
        return len(self.elites) / max(len(self.reachable), 1)

    def niche_of(self, row: int) -> tuple[int, ...]:
        return tuple(int(v) for v in self.space.genomes[row, self._cols])

    def add(self, row: int, plan: Plan) -> bool:
        """Record a simulated plan; True when it fills or improves its niche."""
        self.plans[row] = replace(plan, graph=None, placement=None)
        niche = self.niche_of(row)
        old = self.elites.get(niche)
        if old is not None and rank_key(old.plan, old.row) <= rank_key(plan, row):
            return False
        self.elites[niche] = PlanElite(niche, float(plan.step_time_s), tuple(float(k) for k in niche), plan, row)
        return True

    def fits(self, niche: tuple[int, ...]) -> bool:
        return self.elites[niche].fits

    def ranked(self) -> list[PlanElite]:
        return sorted(self.elites.values(), key=lambda e: rank_key(e.plan, e.row))

    def best(self) -> PlanElite:
        return self.ranked()[0]

    def label(self, elite: PlanElite) -> str:
        return " · ".join(f"{d.label} {d.axis[k]}" for d, k in zip(self.descriptors, elite.niche))

    def simulate(self, elite: PlanElite):
        """The elite's plan simulated again with its problem, (plan, problem), for its trace and memory."""
        if self.setup is None:
            raise InputError("this archive was loaded without its network and devices", field="archive")
        graph, devices, config = self.setup
        g = self.space.plan_of(elite.row)
        return simulate_plan(graph, devices, gpus_of(devices), g["pp"], g["dp"], g["micro_batch"],
                             self.space.request(elite.row), config)

    def to_dict(self) -> dict:
        return {"dimensions": [{"name": d.name, "label": d.label, "values": d.axis} for d in self.descriptors],
                "niches_reachable": len(self.reachable), "niches_filled": len(self.elites),
                "elites": [{"niche": {d.name: d.axis[k] for d, k in zip(self.descriptors, e.niche)},
                            "plan": e.plan.to_dict()} for e in self.ranked()]}


def search_plans(graph, devices, req: PlanRequest, config=None, *, vary=(), niches=NICHES, budget: int = 100,
                 seed: int = 0, initial: int = 8, immigrants: float = 0.1,
                 progress: Callable[[int, int], None] | None = None) -> PlanArchive:
    """MAP-Elites over the plans of ``graph`` on ``devices`` (:func:`.plan_space.plan_space`: ``req``'s given
    dimensions fixed, tp, pp, dp and the micro-batch searched when not given, and ``vary``'s too). ``initial``
    plans drawn at random seed the archive; then each child is a uniformly chosen elite mutated in one
    dimension (:meth:`.plan_space.PlanSpace.mutate`), or, with probability ``immigrants`` (and whenever
    ``MAX_TRIES`` mutations gave only plans already simulated), a plan not simulated yet drawn at random, so
    with ``budget`` at least the space's size every plan is simulated and each niche holds its true best."""
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 1:
        raise InputError(f"the budget must be a positive number of plans, got {budget!r}", field="--budget")
    if not 0.0 <= immigrants <= 1.0:
        raise InputError(f"the immigrant share must be between 0 and 1, got {immigrants!r}", field="immigrants")
    space = plan_space(graph, devices, req, config, vary)
    archive = PlanArchive(space, tuple(niches), setup=(graph, devices, config))
    gpus = gpus_of(devices)
    rng = np.random.default_rng(seed)
    total = min(int(budget), len(space))
    unseen = np.ones(len(space), dtype=bool)

    def fresh() -> int:
        return int(rng.choice(np.flatnonzero(unseen)))

    while archive.evaluations < total:
        row = None
        if archive.evaluations >= initial and archive.elites and rng.random() >= immigrants:
            elites = [e.row for e in archive.elites.values()]
            for _ in range(MAX_TRIES):
                child = space.mutate(rng, elites[rng.integers(len(elites))])
                if child is not None and unseen[child]:
                    row = child
                    break
        if row is None:
            row = fresh()
        unseen[row] = False
        g = space.plan_of(row)
        plan, _ = simulate_plan(graph, devices, gpus, g["pp"], g["dp"], g["micro_batch"], space.request(row), config)
        archive.add(row, plan)
        if progress is not None:
            progress(archive.evaluations, total)
    return archive
