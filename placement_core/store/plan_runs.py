"""Plan archives (MAP-Elites over cluster plans, :mod:`..optimize.plan_elites`) as stored runs.

A plan archive is not a placement search: it has no best placement, no history, no checkpoint. It is stored
as a finished run (algorithm ``plan-archive``) in one transaction, so the store holds either the whole run
or nothing: the network and device graph as blobs like every run's, the plan request and search settings
in its problem and parameters, and every elite (its genome and plan: dimensions, step time, peak memory,
fits, breakdown, pipeline cuts) in its extras. Reopening rebuilds the plan space from the same inputs and
finds each elite's genome in it, so the archive browses, bins and re-simulates as the searched one did; a
stored archive this version cannot read is an InputError that says so, never a traceback.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sqlite3
import time
from dataclasses import dataclass

from ..base.errors import InputError
from ..base.jsonio import compact as _dumps
from ..base.jsonio import to_jsonable as _jsonable
from ..families import gpt
from ..formats import clusters
from ..formats.catalog import network_from_data
from ..formats.network import network_to_dict
from ..model.devices import DeviceGraph, devices_from_dict, devices_to_dict
from ..optimize.plan_elites import NICHES, PlanArchive, PlanElite
from ..optimize.plan_space import DIMS, plan_space
from ..optimize.plans import Plan, PlanRequest
from .records import StoreError, _finite, store_error
from .run_store import RunStore

ALGORITHM = "plan-archive"
FORMAT = 1  # the layout of a stored plan archive; another number is another version's
PLAN_FIELDS = [f.name for f in dataclasses.fields(Plan) if f.name not in ("placement", "graph")]
RERUN = "Run the search again (Cluster plan page, or `placement plan --search map-elites`)"


@dataclass(frozen=True)
class PlanSearch:
    """What the search was asked: enough, with the network and devices, to rebuild its plan space."""

    devices_spec: str  # the cluster (dgx-a100:nodes=2), preset or file the devices came from
    request: PlanRequest
    network_spec: str | None = None  # the gpt: spec a GPT's configuration is parsed from (None: not a GPT)
    vary: tuple[str, ...] = ()
    niches: tuple[str, ...] = NICHES
    budget: int = 100
    seed: int = 0

    @property
    def config(self):
        return gpt.parse(self.network_spec) if self.network_spec and gpt.is_gpt(self.network_spec) else None


class StoredPlanArchive(PlanArchive):
    """A plan archive reopened from the store: its elites, and how many plans the search simulated."""

    def __init__(self, space, niches, setup, evaluations: int, run_id: int):
        super().__init__(space, niches, setup=setup)
        self._evaluations = int(evaluations)
        self.run_id = run_id

    @property
    def evaluations(self) -> int:
        return self._evaluations


def plan_to_dict(plan: Plan) -> dict:
    return _jsonable({k: getattr(plan, k) for k in PLAN_FIELDS})


def plan_from_dict(d: dict) -> Plan:
    missing = [k for k in PLAN_FIELDS if k not in d and k not in ("cuts", "sequence_parallel")]
    if missing:
        raise KeyError(", ".join(missing))
    kw = {k: d[k] for k in PLAN_FIELDS if k in d}
    kw["cuts"] = tuple(int(c) for c in kw.get("cuts", ()))
    return Plan(**kw)


def save_plan_archive(store: RunStore, archive: PlanArchive, search: PlanSearch, graph, devices, *,
                      wall_s: float, label: str | None = None) -> int:
    """Store a finished plan archive as a run; its id. One transaction: nothing half-written."""
    space = archive.space
    best = archive.best() if len(archive) else None
    data = {"format": FORMAT, "space_size": len(space), "niches_reachable": len(archive.reachable),
            "dimensions": [{"name": d.name, "label": d.label, "values": list(d.axis)} for d in archive.descriptors],
            "elites": [{"niche": list(e.niche), "row": int(e.row), "genome": space.plan_of(e.row),
                        "plan": plan_to_dict(e.plan)} for e in archive.ranked()]}
    problem = {"kind": "plan", "format": FORMAT, "devices_spec": search.devices_spec,
               "network_spec": search.network_spec, "folded": not isinstance(devices, DeviceGraph),
               "request": dataclasses.asdict(search.request)}
    params = {"budget": int(search.budget), "niches": list(search.niches), "vary": list(search.vary)}
    dev = devices_to_dict(devices) if isinstance(devices, DeviceGraph) else {"cluster": search.devices_spec}
    now = time.time()
    try:
        with store._tx() as c:
            nh = store._put_blob(c, "network", network_to_dict(graph))
            dh = store._put_blob(c, "devices" if isinstance(devices, DeviceGraph) else "cluster", dev)
            cur = c.execute(
                "INSERT INTO runs(created, updated, status, label, network_name, network_hash, devices_name, "
                "devices_hash, problem, algorithm, params, seed, budget_evaluations, evaluations, best_objective, "
                "wall_s, extras, host, pid) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (now, now, "done", label, graph.name, nh, devices.name, dh, _dumps(_jsonable(problem)), ALGORITHM,
                 _dumps(params), int(search.seed), int(search.budget), int(archive.evaluations),
                 None if best is None else _finite(best.plan.step_time_s), float(wall_s),
                 _dumps({"plan_archive": _jsonable(data)}), socket.gethostname(), os.getpid()))
            return int(cur.lastrowid)
    except sqlite3.DatabaseError as e:
        raise store_error(e, store.path, "write to") from None


def is_plan_run(rec) -> bool:
    return rec.algorithm == ALGORITHM


def plan_search_of(rec) -> PlanSearch:
    """A stored plan archive's search settings; an InputError when they cannot be read."""
    try:
        p, q = rec.problem, rec.params
        if p.get("kind") != "plan" or p.get("format") != FORMAT:
            raise _other_version(rec.id, p.get("format"))
        known = {f.name for f in dataclasses.fields(PlanRequest)}
        req = PlanRequest(**{k: v for k, v in p["request"].items() if k in known})
        return PlanSearch(devices_spec=str(p["devices_spec"]), request=req, network_spec=p.get("network_spec"),
                          vary=tuple(q["vary"]), niches=tuple(q["niches"]), budget=int(q["budget"]),
                          seed=int(rec.seed))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise _damaged(rec.id, f"its search settings do not read ({type(e).__name__}: {e})") from None


def load_plan_archive(store: RunStore, run_id: int) -> tuple[StoredPlanArchive, PlanSearch, object]:
    """(archive, search settings, device graph or cluster) of a stored plan archive, rebuilt."""
    rec = store.get(run_id)
    if not is_plan_run(rec):
        raise InputError(f"run {rec.id} is a {rec.algorithm} run, not a plan archive", field="run",
                         fix="See `placement runs list`: plan archives are the plan-archive runs")
    search = plan_search_of(rec)
    data = rec.extras.get("plan_archive")
    if not isinstance(data, dict):
        raise _damaged(rec.id, "its elites are missing")
    if data.get("format") != FORMAT:
        raise _other_version(rec.id, data.get("format"))
    nh, dh = store.input_hashes(rec.id)
    graph = network_from_data(store._get_blob(nh), source=f"run {rec.id}")
    dev = store._get_blob(dh)
    if isinstance(dev, dict) and "cluster" in dev:
        devices = clusters.load_plan_cluster(str(dev["cluster"]).strip().lower().replace(" ", ""))
    else:
        devices = devices_from_dict(dev, source=f"run {rec.id}")
    config = search.config
    space = plan_space(graph, devices, search.request, config, search.vary)
    archive = StoredPlanArchive(space, search.niches, (graph, devices, config), rec.evaluations, rec.id)
    rows = {tuple(int(v) for v in g): i for i, g in enumerate(space.genomes)}
    try:
        for e in data["elites"]:
            g = e["genome"]
            genome = tuple(space.values[d].index(g[d]) if g[d] in space.values[d] else -1 for d in DIMS)
            row = rows.get(genome)
            if row is None or list(archive.niche_of(row)) != list(e["niche"]):
                raise ValueError(", ".join(f"{d} {g[d]}" for d in DIMS))
            plan = plan_from_dict(e["plan"])
            niche = archive.niche_of(row)
            archive.plans[row] = plan
            archive.elites[niche] = PlanElite(niche, float(plan.step_time_s), tuple(float(k) for k in niche), plan,
                                              row)
    except ValueError as e:
        raise StoreError(f"run {rec.id}'s plan archive holds a plan ({e}) that is not among the plans this version "
                         "finds valid for its network and devices (the rules changed, or the store was edited)",
                         field="run", fix=RERUN) from None
    except (KeyError, TypeError, AttributeError) as e:
        raise _damaged(rec.id, f"an elite does not read ({type(e).__name__}: {e})") from None
    if len(archive.elites) != len(data["elites"]):
        raise _damaged(rec.id, "two of its elites share a niche")
    return archive, search, devices


def _damaged(run_id: int, why: str) -> StoreError:
    return StoreError(f"run {run_id}'s plan archive is damaged: {why}", field="run",
                      fix=f"Delete it with `placement runs delete {run_id}` and {RERUN[0].lower()}{RERUN[1:]}")


def _other_version(run_id: int, fmt) -> StoreError:
    return StoreError(f"run {run_id}'s plan archive was stored by another version of placement (format {fmt!r}, "
                      f"this version reads {FORMAT})", field="run", fix=RERUN)
