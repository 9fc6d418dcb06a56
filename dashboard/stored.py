"""Stored runs in the dashboard: reading the run store, matching runs to the current setup, adopting them.

The store (``placement_core.store``) holds every run of this machine: this
session's, other sessions', the CLI's. Pages open it per script run (a SQLite
connection is cheap and must not cross threads); rebuilt problems and archives
are cached by run id and last update.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import streamlit as st

from placement_core import builtin_devices, builtin_networks, load_devices, load_network
from placement_core.analysis import fmt_seconds
from placement_core.model.devices import devices_hash
from placement_core.base.jsonio import content_hash
from placement_core.formats.network import network_hash
from placement_core.problem import ProblemSpec
from placement_core.store import RunRecord, RunStore, problem_hashes

from . import settings, state
from .settings import SimChoices

RESUMABLE = ("stopped", "interrupted")
ALGORITHM_TITLES: dict[str, str] = {}


def open_store() -> RunStore:
    """The user's run store; an InputError (shown by the page's guard) says how to fix a broken one."""
    return RunStore()


def title(algorithm: str) -> str:
    if not ALGORITHM_TITLES:
        from placement_core.optimize import ALGORITHMS
        ALGORITHM_TITLES.update({k: (cls.title or k) for k, cls in ALGORITHMS.items()})
        ALGORITHM_TITLES.update({"placeto": "Placeto (trained policy)", "gdp": "GDP (trained policy)",
                                 "train-placeto": "Placeto training", "train-gdp": "GDP training",
                                 "plan-archive": "Plan archive (MAP-Elites over cluster plans)"})
    return ALGORITHM_TITLES.get(algorithm, algorithm)


def run_name(rec: RunRecord) -> str:
    return f"run {rec.id} · {title(rec.algorithm)}"


def describe(rec: RunRecord) -> str:
    best = "–" if rec.best_objective is None else fmt_seconds(rec.best_objective)
    return (f"{run_name(rec)} · {rec.network_name} on {rec.devices_name} · {rec.display_status} · "
            f"{rec.evaluations:,} evaluations · best {best}")


@st.cache_resource(max_entries=16, show_spinner="Rebuilding the stored problem…")
def _problem(path: str, run_id: int):
    with RunStore(path=path) as store:
        return store.problem(run_id)


def stored_problem(store: RunStore, run_id: int):
    """A run's problem as it was optimized (network, devices and settings never change after creation)."""
    return _problem(str(store.path), int(run_id))


@st.cache_resource(max_entries=8, show_spinner="Reopening the archive…")
def _archive(path: str, run_id: int, updated: float):
    from placement_core.store.recording import load_archive
    with RunStore(path=path) as store:
        return load_archive(store, run_id, _problem(path, run_id))


def stored_archive(store: RunStore, rec: RunRecord):
    """A stored MAP-Elites run's archive (None when the run has none yet)."""
    return _archive(str(store.path), rec.id, rec.updated)


@st.cache_resource(max_entries=16, show_spinner=False)
def _hashes(graph_key: str, devices_key: str, _graph, _devices) -> tuple[str, str]:
    return problem_hashes(_graph, _devices)


def current_hashes() -> tuple[str, str]:
    """Content hashes of the current network and device graph, to find stored runs made for them."""
    return _hashes(state.graph_key(), state.devices_key(), state.graph(), state.devices())


def same_setup(store: RunStore, rec: RunRecord) -> bool:
    """Was this run optimized for the current network (at its batch size) and device graph?"""
    return store.input_hashes(rec.id) == current_hashes()


def sim_of(spec: dict | ProblemSpec) -> SimChoices:
    """The dashboard's simulator settings closest to a stored problem's (its JSON form or the spec)."""
    if not isinstance(spec, ProblemSpec):
        spec = ProblemSpec.from_dict(spec)
    return state.session().sim.adopt(spec)


def setting_differences(problem) -> list[str]:
    """What the stored problem has that the dashboard's settings cannot express (shown as a note).

    Compares recipes as values: nothing is compiled."""
    theirs = problem.spec
    mine = state.spec_for(problem.graph, state.session().sim.adopt(theirs), problem.devices).to_dict()
    theirs = theirs.to_dict()
    measured = ("timings", "timings_batch")
    return [f"{k} = {theirs[k]!r}" for k in theirs if theirs[k] != mine.get(k) and k not in measured] + \
        (["a measured timing table"] if theirs.get("timings") and not mine.get("timings") else [])


@dataclass
class Adopted:
    note: str | None


def adopt(store: RunStore, rec: RunRecord, placement: np.ndarray, label: str) -> Adopted:
    """Make a stored run's placement current, with its network, devices and simulator settings.

    A built-in network or preset whose content equals the run's is used by name (so
    the Benchmark page still knows the PyTorch model it came from)."""
    problem = stored_problem(store, rec.id)
    net_hash, dev_hash = store.input_hashes(rec.id)
    cur_net, cur_dev = current_hashes()
    g, d = problem.graph, problem.devices
    if net_hash != cur_net:
        key, title_ = _builtin_network_key(g, net_hash)
        if key is not None:
            state.set_network(state.builtin_network(key), f"builtin:{key}", title_, batch_size=g.batch_size)
        else:
            state.set_network(g, f"stored:{net_hash[:12]}", f"{g.name} (from run {rec.id})")
        state.session().pop("net_batch", None)
    if dev_hash != cur_dev:
        name = d.name if d.name in builtin_devices() and devices_hash(load_devices(d.name)) == dev_hash else None
        if name is not None:
            state.set_devices(state.builtin_device_graph(name), f"preset:{name}", name)
        else:
            state.set_devices(d, f"stored:{dev_hash[:12]}", f"{d.name} (from run {rec.id})")
        state.session().pop("dev_tables", None)
    state.set_sim(sim_of(problem.spec))
    state.set_placement(placement, label)
    diffs = setting_differences(problem)
    return Adopted("The run was optimized with settings the dashboard does not offer (" + ", ".join(diffs) +
                   "); the pages simulate it with the nearest ones." if diffs else None)


def _builtin_network_key(graph, net_hash: str) -> tuple[str | None, str]:
    if graph.name in builtin_networks():
        builtin = load_network(graph.name, batch_size=graph.batch_size)
        if network_hash(builtin) == net_hash:
            return graph.name, state.NETWORK_TITLES.get(graph.name, graph.name)
    return None, graph.name


# -- comparing stored runs ------------------------------------------------------------------------------

MISSING = "–"


def _num(v) -> str:
    if isinstance(v, bool) or v is None:
        return {True: "yes", False: "no", None: "none"}[v]
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (list, tuple)):
        return ", ".join(_num(x) for x in v)
    return str(v)


def run_settings(rec: RunRecord, network_hash: str | None = None, devices_hash: str | None = None,
                 batch_size: int | None = None) -> dict[str, str]:
    """Every setting a run was made with, as text by name: what the settings diff of two runs compares.

    The record alone does not say what its network and device files contained, so their content hashes
    (``RunStore.input_hashes``) and the network's batch size come as arguments; without them those rows
    are left out. A field an older store did not record shows as "–"."""
    spec = rec.problem
    out = {"network": rec.network_name}
    if network_hash:
        out["network content"] = network_hash[:12]
    if batch_size is not None:
        out["batch size"] = _num(int(batch_size))
    out["devices"] = rec.devices_name
    if devices_hash:
        out["devices content"] = devices_hash[:12]
    out["algorithm"] = f"{title(rec.algorithm)} ({rec.algorithm})"
    for k in sorted(rec.params):
        out[f"parameter {k}"] = _num(rec.params[k])
    out["budget (evaluations)"] = _num(rec.budget_evaluations)
    out["budget (seconds)"] = _num(rec.budget_seconds)
    out["seed"] = _num(rec.seed)

    def field(key, fmt=_num):
        return fmt(spec[key]) if key in spec else MISSING

    out["schedule"] = field("schedule", lambda s: settings.SCHEDULE_NAMES.get(s, str(s)))
    out["batches"] = field("batches")
    out["in flight"] = field("in_flight")
    out["micro-batches"] = field("micro_batches")
    out["forward only"] = field("forward_only")
    out["cost profile"] = field("profile")
    out["compute efficiency"] = field("comp_efficiency")
    out["communication efficiency"] = field("comm_efficiency")
    out["measured op times"] = field("timings", _timings_text)
    if spec.get("timings"):
        out["measured at batch"] = field("timings_batch")
    out["memory penalty"] = field("penalty", lambda p: settings.PENALTIES.get(p, str(p)))
    if spec.get("splits"):  # docs/sharding.md: only runs that could split ops have a table
        out["split table"] = f"{len(spec['splits'])} split(s) ({content_hash(spec['splits'])[:12]})"
    return out


def _timings_text(timings) -> str:
    if not timings:
        return "none (cost formulas)"
    return f"measured, {len(timings)} op(s) (table {content_hash(timings)[:12]})"


def settings_diff(a: dict[str, str], b: dict[str, str]) -> list[tuple[str, str, str]]:
    """(setting, value in A, value in B) for every setting that differs, in A's order with a setting only B
    has placed after the one it follows in B (a parameter among the parameters); a setting only one run has
    counts as differing ("–" on the other side). Empty: identical settings."""
    keys = list(a)
    previous = None
    for k in b:
        if k not in a:
            keys.insert(keys.index(previous) + 1 if previous is not None else 0, k)
        previous = k
    return [(k, a.get(k, MISSING), b.get(k, MISSING)) for k in keys if a.get(k, MISSING) != b.get(k, MISSING)]


def stored_settings(store: RunStore, rec: RunRecord) -> dict[str, str]:
    """:func:`run_settings` of a stored run, with its network and device contents and batch size."""
    net_hash, dev_hash = store.input_hashes(rec.id)
    return run_settings(rec, net_hash, dev_hash, stored_problem(store, rec.id).graph.batch_size)


@dataclass
class Curve:
    """One run's best-so-far curve for the overlay chart, with whether its objective holds a penalty."""
    name: str
    history: np.ndarray  # rows (evaluations, best objective s, current objective s)
    penalty: str
    best_overflow_bytes: float | None  # how far the run's best placement exceeds memory (0: it fits)


def run_curve(store: RunStore, rec: RunRecord) -> Curve:
    """A run's curve, named by run id, algorithm and network; its best placement is simulated once again to
    say whether the curve's last point is a time per batch or a time plus a memory penalty."""
    overflow = None
    if rec.best_placement is not None:
        ev = state.simulate(stored_problem(store, rec.id), rec.best_placement)
        overflow = float(ev.overflow.sum())
    return Curve(f"run {rec.id} · {title(rec.algorithm)} · {rec.network_name}", store.history(rec.id),
                 rec.problem.get("penalty", "thesis"), overflow)
