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
from placement_core.store import RunRecord, RunStore, problem_hashes, problem_spec

from . import state

RESUMABLE = ("stopped", "interrupted")
ALGORITHM_TITLES: dict[str, str] = {}


def open_store() -> RunStore:
    """The user's run store; an InputError (shown by the page's guard) says how to fix a broken one."""
    return RunStore()


def title(algorithm: str) -> str:
    if not ALGORITHM_TITLES:
        from placement_core.optimize import ALGORITHMS
        ALGORITHM_TITLES.update({k: (cls.title or k) for k, cls in ALGORITHMS.items()})
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
    from placement_core.runs import load_archive
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


def sim_of(spec: dict) -> dict:
    """The dashboard's simulator settings closest to a stored problem's."""
    sim = dict(state.ss().sim)
    sim.update(penalty=spec["penalty"], profile=spec["profile"] if spec["profile"] in state.PROFILES else "default")
    if spec["schedule"] == "thesis":
        sim.update(schedule="thesis", batches=int(spec["batches"]), in_flight=int(spec["in_flight"]))
    else:
        sim.update(schedule=spec["schedule"], micro_batches=int(spec["micro_batches"]), batches=1, in_flight=1)
    return sim


def setting_differences(problem) -> list[str]:
    """What the stored problem has that the dashboard's settings cannot express (shown as a note)."""
    g, d = problem.graph, problem.devices
    mine = problem_spec(state.build_problem(g, d, sim_of(problem_spec(problem))))
    theirs = problem_spec(problem)
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
        state.ss().pop("net_batch", None)
    if dev_hash != cur_dev:
        name = d.name if d.name in builtin_devices() and _devices_hash(load_devices(d.name)) == dev_hash else None
        if name is not None:
            state.set_devices(state.builtin_device_graph(name), f"preset:{name}", name)
        else:
            state.set_devices(d, f"stored:{dev_hash[:12]}", f"{d.name} (from run {rec.id})")
        state.ss().pop("dev_tables", None)
    state.set_sim(sim_of(problem_spec(problem)))
    state.set_placement(placement, label)
    diffs = setting_differences(problem)
    return Adopted("The run was optimized with settings the dashboard does not offer (" + ", ".join(diffs) +
                   "); the pages simulate it with the nearest ones." if diffs else None)


def _builtin_network_key(graph, net_hash: str) -> tuple[str | None, str]:
    from placement_core.netformat import network_to_dict
    from placement_core.store import content_hash
    if graph.name in builtin_networks():
        builtin = load_network(graph.name, batch_size=graph.batch_size)
        if content_hash(network_to_dict(builtin)) == net_hash:
            return graph.name, state.NETWORK_TITLES.get(graph.name, graph.name)
    return None, graph.name


def _devices_hash(devices) -> str:
    from placement_core.devices import devices_to_dict
    from placement_core.store import content_hash
    return content_hash(devices_to_dict(devices))
