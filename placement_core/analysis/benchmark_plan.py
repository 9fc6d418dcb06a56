"""What to measure for real, and where: the K best distinct placements of an optimization run, and which local
device plays each device of the device graph.

Used by ``placement benchmark --run ID --top K`` and by the dashboard's Benchmark page, so both rank, label
and warn alike. No torch here: choosing what to measure is the simulator's business.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def run_candidates(store, run_id: int) -> tuple[Problem, list[tuple[str, np.ndarray]], str]:
    """A stored run's problem, the placements it keeps, and what they are in words.

    The best placement; the best distinct placements it evaluated (every run keeps its 50 best, stored when
    it ends, in its checkpoint while it runs); a MAP-Elites run's archive (every elite); a run stopped or
    interrupted mid-way also its population from the last checkpoint (GA). Runs stored before kept
    placements existed keep only their best and their archive."""
    rec = store.get(run_id)
    problem = store.problem(run_id)
    cands: list[tuple[str, np.ndarray]] = []
    kinds = []
    if rec.best_placement is not None:
        cands.append((f"best of run {run_id}", rec.best_placement))
        kinds.append("its best placement")
    kept = store.kept_of(run_id)
    cands += [(f"#{i} evaluated by run {run_id}", x) for i, (_, x) in enumerate(kept, start=1)]
    if kept:
        kinds.append(f"the {len(kept)} best distinct placement(s) it evaluated")
    rows = store.archive_rows(run_id)
    for i, r in enumerate(rows, start=1):
        niche = ",".join(str(int(v)) for v in r["niche"])
        cands.append((f"elite #{i} of run {run_id} (niche {niche})", r["placement"]))
    if rows:
        kinds.append(f"{len(rows)} archive elite(s)")
    state = store.load_checkpoint(run_id) if rec.status != "done" else None
    pop = ((state or {}).get("optimizer") or {}).get("pop")
    if pop:
        pop = np.asarray(pop, dtype=np.int32).reshape(-1, problem.n_ops)
        cands += [(f"population #{i} of run {run_id} (checkpoint)", x) for i, x in enumerate(pop, start=1)]
        kinds.append(f"{len(pop)} placement(s) of its last checkpoint's population")
    if not cands:
        raise InputError(f"run {run_id} has no placement yet", field="--run",
                         fix="Wait for its first checkpoint, or choose a run that has a best placement")
    return problem, cands, ", ".join(kinds)


def top_of_run(store, run_id: int, k: int) -> tuple[Problem, list[Ranked], str]:
    """The run's problem, its ``k`` best distinct placements, and a note when it keeps fewer than ``k``."""
    problem, cands, kinds = run_candidates(store, run_id)
    ranked = distinct_top(problem, cands, k)
    note = ""
    if len(ranked) < k:
        note = (f"run {run_id} keeps {len(ranked)} distinct placement(s) ({kinds}), fewer than the {k} asked "
                "for (a run keeps the 50 best distinct placements it evaluated; a deterministic placer proposes only a "
                "few, and runs stored by older versions kept only their best)")
    return problem, ranked, note


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
