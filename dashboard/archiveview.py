"""Where the Archive page's archives come from: this session's MAP-Elites runs and plan archives (the Cluster plan
page's) and the run store's (placement runs' archives and plan archives).

Every kind is wrapped as an :class:`ArchiveSource`, so the page draws and
adopts them the same way. A finished run of this session is also in the store;
it is listed once, as the live run (which carries its full result).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import streamlit as st

from placement_core.analysis.archive_view import elite_fits
from placement_core.base.errors import InputError
from placement_core.store.plan_runs import is_plan_run

from . import state, stored, ui
from .background_runs import REGISTRY
from .planarchive import runs as plan_runs
from .planarchive import stored_run as stored_plan_run


@dataclass
class ArchiveSource:
    key: str  # "live:<registry id>" or "stored:<run id>"
    name: str
    description: str
    archive: object  # placement_core.optimize.archive.Archive
    evaluations: int
    adopt: Callable[[np.ndarray, str], None] | None  # make a placement current (None: a plan archive's plans)
    others: dict[str, np.ndarray] = field(default_factory=dict)  # other runs' bests on the same problem
    current_problem: bool = False  # made for the current network, devices and settings
    quality: list = field(default_factory=list)  # background_runs.Run.quality, then the final archive's point
    plan: object = None  # a plan archive's planarchive.PlanRun (its name, devices, capacity)


def _live_sources() -> list[ArchiveSource]:
    s = state.session()
    runs = REGISTRY.runs(s.session_key)
    out = []
    for r in runs:
        if r.result is None or r.result.archive is None:
            continue
        others = {f"best of {o.name}": o.result.best_placement for o in runs
                  if o.result is not None and o.spec.graph_key == r.spec.graph_key
                  and o.spec.devices_key == r.spec.devices_key}
        out.append(ArchiveSource(
            key=f"live:{r.id}", name=r.name,
            description=f"{r.name} · {r.spec.network_label} on {r.spec.devices_label} · "
                        f"{len(r.result.archive)} elites",
            archive=r.result.archive, evaluations=r.result.evaluations,
            adopt=lambda p, label, r=r: state.adopt_run(r, p, label), others=others,
            current_problem=r.spec.graph_key == state.graph_key() and r.spec.devices_key == state.devices_key(),
            quality=final_quality(r)))
    return out


def final_quality(run) -> list:
    """A live run's coverage and QD-score series, ending with its final archive (the last snapshot may
    precede the last batch)."""
    with run.lock:
        points = list(run.quality)
    archive = run.result.archive
    fs = [e.objective for e in archive.elites.values()]
    end = (run.result.evaluations, float(archive.coverage), len(fs), float(sum(fs)), float(max(fs, default=0.0)))
    if not points or points[-1][0] < end[0] or points[-1][2:4] != end[2:4]:
        points.append(end)
    return points


def _stored_sources(skip: set[int]) -> list[ArchiveSource]:
    out = []
    with stored.open_store() as store:
        sizes = store.archive_sizes()
        for rec in store.runs():
            if rec.id in skip:
                continue
            if is_plan_run(rec):
                try:
                    out.append(_plan_source(stored_plan_run(store, rec), f" · stored {rec.display_status}"))
                except InputError as e:  # one unreadable archive is named; the others are listed
                    st.warning(f"Run {rec.id} (a plan archive) cannot be reopened: {ui.esc(e)}",
                               icon=":material/warning:")
                continue
            if rec.id not in sizes:
                continue
            archive = stored.stored_archive(store, rec)
            if archive is None:
                continue
            name = stored.run_name(rec)

            def adopt(p, label, rec=rec):
                with stored.open_store() as st_:
                    note = stored.adopt(st_, rec, p, label).note
                if note:
                    state.session().placement_note = note

            out.append(ArchiveSource(
                key=f"stored:{rec.id}", name=name,
                description=f"{name} · {rec.network_name} on {rec.devices_name} · {sizes[rec.id]} elites · stored "
                            f"{rec.display_status}",
                archive=archive, evaluations=rec.evaluations, adopt=adopt,
                others={} if rec.best_placement is None else {f"best of {name}": rec.best_placement},
                current_problem=stored.same_setup(store, rec)))
    return out


def _plan_source(r, note: str = "") -> ArchiveSource:
    return ArchiveSource(key=r.key, name=r.name,
                         description=f"{r.name} · {r.network_label} on {r.devices_spec} · {len(r.archive)} plans "
                                     f"({' × '.join(d.label for d in r.archive.descriptors)}){note}",
                         archive=r.archive, evaluations=r.archive.evaluations, adopt=None,
                         current_problem=r.graph_key == state.graph_key(), plan=r)


def _plan_sources() -> list[ArchiveSource]:
    """This session's plan archives (MAP-Elites over cluster plans), newest first."""
    return [_plan_source(r) for r in plan_runs()]


def is_plan_archive(archive) -> bool:
    return getattr(archive, "kind", None) == "plan"


def archive_sources() -> list[ArchiveSource]:
    """This session's archives first (plan archives, then placement runs; newest first), then the stored ones
    (newest first)."""
    live = _live_sources()
    skip = {r.store_id for r in REGISTRY.runs(state.session().session_key) if r.store_id is not None}
    skip |= {r.store_id for r in plan_runs() if r.store_id is not None}
    return _plan_sources() + list(reversed(live)) + _stored_sources(skip)


# archive -> {niche: (objective, fits)}: one simulation per elite per archive, not per rerun.
_FITS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def fits_in_memory(archive) -> Callable[[tuple], bool]:
    """``niche -> fits in memory`` for :func:`archive_heatmap`, memoised per archive (a stored archive's
    problem is shared between sessions, so its simulations take the page lock). A plan archive knows already."""
    if is_plan_archive(archive):
        return archive.fits
    memo = _FITS.setdefault(archive, {})

    def fits(niche) -> bool:
        elite = archive.elites[niche]
        known = memo.get(niche)
        if known is None or known[0] != elite.objective:
            known = memo[niche] = (elite.objective, elite_fits(archive.problem, elite))
        return known[1]

    return fits


def _int(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return int(v)
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        return int(v)
    return None


def _pair(data) -> tuple[int, int] | None:
    """The (row, column) in a point's customdata: a list or tuple, or a dict keyed 0/1 or "0"/"1" (what
    Streamlit hands back for a row of a typed array under Plotly 6)."""
    if isinstance(data, dict):
        data = [data.get(k, data.get(str(k))) for k in (0, 1)]
    if isinstance(data, (list, tuple)) and len(data) >= 2:
        a, b = _int(data[0]), _int(data[1])
        if a is not None and b is not None:
            return a, b
    return None


def clicked_cell(point: dict, cells: list[tuple[int, int]], shape: tuple[int, int],
                 curve: int = 1) -> tuple[int, int] | None:
    """The heatmap cell (row, column) a selected chart point stands for, or None.

    Tries the point's customdata, then its index among the clickable markers (trace ``curve``, listing
    ``cells`` in order), then its x / y (the chart's axes are the column and row indices); a cell outside
    ``shape`` is None. Robust to how Streamlit and Plotly versions serialise a selection.
    """
    if not isinstance(point, dict):
        return None
    ny, nx = shape
    candidates = [_pair(point.get("customdata"))]
    index = _int(point.get("point_index", point.get("point_number")))
    same_curve = _int(point.get("curve_number", curve)) == curve
    if index is not None and same_curve and 0 <= index < len(cells):
        candidates.append(cells[index])
    x, y = _int(point.get("x")), _int(point.get("y"))
    if x is not None and y is not None:
        candidates.append((y, x))
    for c in candidates:
        if c is not None and 0 <= c[0] < ny and 0 <= c[1] < nx:
            return c
    return None
