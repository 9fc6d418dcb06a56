"""What the Benchmark page can measure: the placements it offers (the current one, runs' bests and elites, single
devices) and a run's K best distinct placements. The ranking itself is the core's
(``placement_core.analysis.benchmark_plan``: :class:`RunPlacements`, :func:`top_k`), one function for this
session's live runs and the run store's alike; this module only finds the runs of the current setup and caches.
"""

from __future__ import annotations

import numpy as np

from placement_core import InputError
from placement_core.analysis import benchmark_plan
from placement_core.analysis.benchmark_plan import RunPlacements

from . import state, stored
from .background_runs import REGISTRY


def local_devices(spec: str) -> list:
    """The local devices a spec such as ``cpu:2`` names (torch-free parsing)."""
    from placement_core.torch.devspec import parse_devices
    return parse_devices(spec)


def _live_runs() -> list:
    """This session's finished runs of the current network and devices."""
    s = state.session()
    return [r for r in REGISTRY.runs(s.session_key) if r.result is not None and r.spec.graph_key == state.graph_key()
            and r.spec.devices_key == state.devices_key()]


def _stored_runs(exclude: set) -> list:
    """Stored runs of the current setup that have a best placement, less those in ``exclude`` (this session's)."""
    try:
        with stored.open_store() as store:
            return [rec for rec in store.runs(limit=200)
                    if rec.best_placement is not None and rec.id not in exclude and stored.same_setup(store, rec)]
    except InputError:
        return []  # an unreadable store only hides stored runs here; the Runs page says what is wrong


def candidates() -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """Placements that can be benchmarked on the current network and devices, and the stored run of each."""
    s = state.session()
    live = _live_runs()
    runs = [r.placements() for r in live]
    runs += [RunPlacements(f"{stored.run_name(rec)} (stored)", best=rec.best_placement, store_id=rec.id)
             for rec in _stored_runs({r.store_id for r in REGISTRY.runs(s.session_key)})]
    g, d = state.graph(), state.devices()
    return benchmark_plan.chosen_candidates((f"current: {s.placement_label}", state.current_placement()), runs,
                                            d.names, len(g))


def top_runs() -> dict[str, tuple]:
    """Runs of the current network and devices whose best placements can be measured: label -> ("live", Run)
    for this session's finished runs, ("stored", RunRecord) for the run store's (another session, the CLI)."""
    live = _live_runs()
    out: dict[str, tuple] = {r.name: ("live", r) for r in live}
    for rec in _stored_runs({r.store_id for r in live}):
        out[f"{stored.run_name(rec)} (stored, {rec.display_status})"] = ("stored", rec)
    return out


def top_k(source: tuple, k: int) -> tuple[list, str, int | None]:
    """The K best distinct placements of a run (ranked by its own simulated objective:
    :func:`benchmark_plan.top_k`), a note when it keeps fewer, and its id in the run store. Cached per run
    version and K."""
    kind, run = source
    key = (kind, run.id, getattr(run, "updated", None), int(k))
    cache = state.session().setdefault("bench_top_cache", {})
    if key not in cache:
        if kind == "live":
            ranked, note = benchmark_plan.top_k(run.problem, run.placements(), int(k))
            run_id = run.store_id
        else:
            with stored.open_store() as store:
                _, ranked, note = benchmark_plan.top_of_run(store, run.id, int(k))
            run_id = run.id
        cache[key] = (ranked, note[:1].upper() + note[1:], run_id)
        while len(cache) > 8:
            cache.pop(next(iter(cache)))
    return cache[key]
