"""What to measure for real, and where: the K best distinct placements of an optimization run, and which local
device plays each device of the device graph.

Used by ``placement benchmark --run ID --top K`` and by the dashboard's Benchmark page (its live runs and its
stored runs alike, through :class:`RunPlacements` and :func:`top_k`), so both rank, label and warn alike. No
torch here: choosing what to measure is the simulator's business.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..base.errors import InputError
from ..problem import Problem


@dataclass
class Ranked:
    """One placement of a run with what the simulator says of it under the run's own problem."""

    label: str
    placement: np.ndarray
    objective: float  # what the optimizer minimised: seconds per batch plus any memory penalty
    batch_time: float  # simulated seconds per batch
    feasible: bool


def distinct_top(problem: Problem, candidates, k: int) -> list[Ranked]:
    """The ``k`` best distinct placements among ``candidates`` ((label, placement) pairs), best first.

    Each is simulated again under ``problem`` (stored objectives may come from an older simulator); a
    placement listed twice keeps its first label, so list the run's best first. Ties keep the listed order."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(f"K must be a positive integer, got {k!r}", field="--top")
    seen: set[bytes] = set()
    ranked: list[Ranked] = []
    for label, placement in candidates:
        x = np.ascontiguousarray(placement, dtype=np.int32)
        key = x.tobytes()
        if key in seen:
            continue
        seen.add(key)
        ev = problem.simulate(x)
        ranked.append(Ranked(label, x, float(ev.objective), float(ev.result.batch_time), ev.feasible))
    ranked.sort(key=lambda r: r.objective)  # stable: ties keep the listed order
    return ranked[:int(k)]


@dataclass
class RunPlacements:
    """The placements a run keeps that can be measured, each kind best first: what a live run of the dashboard
    holds in memory and what a stored run holds in the run store, in one form, so both are ranked alike.

    ``name`` is how labels name the run ("run 7", "GA #1"); ``elites`` are an archive's (niche or None,
    placement) pairs, best first (a stored run's label names the niche); ``population`` is the last checkpoint's
    population of a run stopped or interrupted mid-way (GA)."""

    name: str
    best: np.ndarray | None = None
    kept: list = field(default_factory=list)  # the best distinct placements it evaluated, best first
    elites: list = field(default_factory=list)  # [(niche tuple or None, placement)]
    population: list = field(default_factory=list)
    store_id: int | None = None  # the run's id in the run store, when it is stored

    def candidates(self) -> list[tuple[str, np.ndarray]]:
        """(label, placement) of everything the run keeps, its best first (so a repeat keeps the best's label)."""
        out = [(f"best of {self.name}", self.best)] if self.best is not None else []
        out += [(f"#{i} evaluated by {self.name}", x) for i, x in enumerate(self.kept, start=1)]
        out += [(f"elite #{i} of {self.name}" + ("" if niche is None else
                                                  f" (niche {','.join(str(int(v)) for v in niche)})"), x)
                for i, (niche, x) in enumerate(self.elites, start=1)]
        out += [(f"population #{i} of {self.name} (checkpoint)", x) for i, x in enumerate(self.population, start=1)]
        return out

    def kinds(self) -> str:
        """What the run keeps, in words."""
        kinds = ["its best placement"] if self.best is not None else []
        if self.kept:
            kinds.append(f"the {len(self.kept)} best distinct placement(s) it evaluated")
        if self.elites:
            kinds.append(f"{len(self.elites)} archive elite(s)")
        if self.population:
            kinds.append(f"{len(self.population)} placement(s) of its last checkpoint's population")
        return ", ".join(kinds)


def top_k(problem: Problem, run: RunPlacements, k: int) -> tuple[list[Ranked], str]:
    """The ``k`` best distinct placements a run keeps, ranked by ``problem`` (the run's own), best first, and a
    note when it keeps fewer than ``k``: the one ranking of a run's top K, for live and stored runs alike."""
    cands = run.candidates()
    if not cands:
        raise InputError(f"{run.name} has no placement yet", field="--run",
                         fix="Wait for its first checkpoint, or choose a run that has a best placement")
    ranked = distinct_top(problem, cands, k)
    note = ""
    if len(ranked) < k:
        note = (f"{run.name} keeps {len(ranked)} distinct placement(s) ({run.kinds()}), fewer than the {k} asked "
                "for (a run keeps the 50 best distinct placements it evaluated; a deterministic placer proposes only a "
                "few, and runs stored by older versions kept only their best)")
    return ranked, note


def stored_run(store, run_id: int) -> tuple[Problem, RunPlacements]:
    """A stored run's problem and the placements it keeps: the best; the best distinct placements it evaluated
    (every run keeps its 50 best, stored when it ends, in its checkpoint while it runs); a MAP-Elites run's
    archive (every elite); a run stopped or interrupted mid-way also its population from the last checkpoint
    (GA). Runs stored before kept placements existed keep only their best and their archive."""
    rec = store.get(run_id)
    problem = store.problem(run_id)
    state = store.load_checkpoint(run_id) if rec.status != "done" else None
    pop = ((state or {}).get("optimizer") or {}).get("pop")
    population = list(np.asarray(pop, dtype=np.int32).reshape(-1, problem.n_ops)) if pop else []
    return problem, RunPlacements(
        f"run {run_id}", best=rec.best_placement, kept=[x for _, x in store.kept_of(run_id)],
        elites=[(r["niche"], r["placement"]) for r in store.archive_rows(run_id)], population=population,
        store_id=run_id)


def run_candidates(store, run_id: int) -> tuple[Problem, list[tuple[str, np.ndarray]], str]:
    """A stored run's problem, the placements it keeps (:func:`stored_run`) as (label, placement) pairs, and what
    they are in words."""
    problem, run = stored_run(store, run_id)
    cands = run.candidates()
    if not cands:
        raise InputError(f"run {run_id} has no placement yet", field="--run",
                         fix="Wait for its first checkpoint, or choose a run that has a best placement")
    return problem, cands, run.kinds()


def top_of_run(store, run_id: int, k: int) -> tuple[Problem, list[Ranked], str]:
    """A stored run's problem, its ``k`` best distinct placements, and a note when it keeps fewer than ``k``."""
    problem, run = stored_run(store, run_id)
    return (problem, *top_k(problem, run, k))


def chosen_candidates(current: tuple[str, np.ndarray], runs: list[RunPlacements], device_names: list[str],
                      n_ops: int, elites: int = 4) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """What the Benchmark page offers to measure, label -> placement, and the stored run of each label that
    came from one: the current placement, each run's best and its archive's next ``elites`` elites, every op
    on one device (one per device)."""
    out = {current[0]: current[1]}
    origin: dict[str, int] = {}
    for run in runs:
        if run.best is not None:
            out[f"best of {run.name}"] = run.best
            if run.store_id is not None:
                origin[f"best of {run.name}"] = run.store_id
        for i, (_, x) in enumerate(run.elites[1:1 + elites], start=2):
            out[f"elite #{i} of {run.name}"] = x
    for i, name in enumerate(device_names):
        out[f"all on {name}"] = np.full(n_ops, i, dtype=np.int32)
    return out, origin


# -- which local device plays each device of the device graph ----------------------------------------

def default_mapping(names: list[str], used: list[int], local: list[str]) -> dict[int, str]:
    """Device index -> local device name for the devices ``used``: the local device of the same name when
    there is one (a calibrated ``local`` preset), else the least used local device (the first of those), so
    devices share a local device only when there are more of them than local devices."""
    if not local:
        raise InputError("no local devices", field="--devices", fix="Give e.g. cpu:2")
    out = {di: names[di] for di in used if names[di] in local}
    load = {loc: sum(1 for v in out.values() if v == loc) for loc in local}
    for di in used:
        if di not in out:
            out[di] = min(local, key=lambda loc: load[loc])  # min keeps the first of equals
            load[out[di]] += 1
    return {di: out[di] for di in used}


def parse_mapping(text: str, names: list[str], local: list[str]) -> dict[str, str]:
    """``gpu0=cpu0,gpu1=cpu1`` -> {device of the graph: local device}, every name checked."""
    out: dict[str, str] = {}
    for item in [p.strip() for p in str(text).split(",") if p.strip()]:
        if item.count("=") != 1:
            raise InputError(f"{item!r} is not DEVICE=LOCAL", field="--map",
                             fix="Write e.g. gpu0=cpu0,gpu1=cpu1 (a device of the run's device graph = a local "
                                 "device of --devices)")
        dev, loc = (s.strip() for s in item.split("="))
        if dev not in names:
            raise InputError(f"{dev!r} is not a device of the run's device graph", field="--map",
                             fix="Its devices are: " + ", ".join(names))
        if loc not in local:
            raise InputError(f"{loc!r} is not one of the local devices", field="--map",
                             fix="The local devices of --devices are: " + ", ".join(local))
        out[dev] = loc
    return out


def shared_local_devices(mapping: dict[str, str], torch_of: dict[str, str] | None = None,
                         runner: str = "ranks") -> list[tuple[str, list[str]]]:
    """Where several devices of the device graph run on one local device: [(where, [graph devices])].

    With the in-process runner, local devices that are the same torch device (``cpu:2`` gives cpu0 and cpu1,
    both ``cpu``) are one device too: one process runs their work one op after the other."""
    torch_of = torch_of or {}
    groups: dict[str, list[str]] = {}
    for dev, loc in mapping.items():
        if runner == "inprocess" and loc in torch_of:
            where = f"{torch_of[loc]} (in one process)"
        else:
            where = f"{loc} ({torch_of[loc]})" if loc in torch_of else loc
        groups.setdefault(where, []).append(dev)
    return [(where, sorted(devs)) for where, devs in groups.items() if len(devs) > 1]


def shared_warning(mapping: dict[str, str], torch_of: dict[str, str] | None = None, runner: str = "ranks") -> str:
    """A warning naming the devices that share a local device, or ""."""
    parts = []
    for where, devs in shared_local_devices(mapping, torch_of, runner):
        names = ", ".join(devs[:-1]) + f" and {devs[-1]}"
        parts.append(f"{names} {'all' if len(devs) > 2 else 'both'} run on {where}")
    if not parts:
        return ""
    return ("; ".join(parts) + ": the measured times then serialise work that the simulator runs in parallel on "
            "separate devices, so measured and simulated times disagree for that reason alone. Give each device "
            "its own local device (more local devices, or another mapping).")
