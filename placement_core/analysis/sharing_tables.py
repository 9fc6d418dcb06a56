"""A device graph's shared resources and measured collectives as dashboard tables, and what survives an edit.

The Devices page edits devices and channels in tables (:mod:`.device_tables`); a calibrated graph also
declares what its devices share and the collectives it measured (docs/formats.md "collectives", "shared"),
which change every simulation on it. Rebuilding the graph from the two tables dropped them silently: a user
who corrected one memory size lost the calibration's all-reduce curves. :func:`carry_sharing` keeps them
(those whose devices all still exist, the others named), and the shared resources get a table of their own.
"""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

from ..base.errors import InputError
from ..model.device_sharing import sharing_to_dict
from ..model.devices import DeviceGraph, devices_from_dict, devices_to_dict

SHARED_COLUMNS = ("name", "devices", "capacity", "demands", "collective demand")


def _names(text) -> list[str]:
    if text is None or (isinstance(text, float) and math.isnan(text)):
        return []
    return [p.strip() for p in re.split(r"[,;\s]+", str(text)) if p.strip()]


def _number(v):
    if v is None or isinstance(v, str) and not v.strip():
        return None
    try:
        v = float(v)
    except (TypeError, ValueError):
        return v  # the loader names it
    return None if math.isnan(v) else v


def shared_to_rows(g: DeviceGraph) -> list[dict]:
    return [{"name": r.name, "devices": ", ".join(r.devices), "capacity": r.capacity,
             "demands": ", ".join(f"{x:g}" for x in r.demand), "collective demand": r.collective_demand}
            for r in g.shared]


def collective_rows(g: DeviceGraph) -> list[dict]:
    """One read-only row per measured collective: its group, sizes and times at the largest size."""
    return [{"op": c.op, "devices": ", ".join(c.devices), "sizes": len(c.sizes),
             "largest MB": c.sizes[-1] / 1e6, "alone ms": c.seconds[-1] * 1e3,
             "while computing ms": (c.busy_seconds or c.seconds)[-1] * 1e3} for c in g.collectives]


def _rows_to_shared(shared_rows: list[dict]) -> tuple[list[dict], list[int]]:
    """The table's non-empty rows as device-file entries, and each one's row index (for error messages)."""
    rows, at = [], []
    for i, row in enumerate(shared_rows):
        if all(_number(row.get(c)) is None and not str(row.get(c) or "").strip() for c in SHARED_COLUMNS):
            continue  # an empty row the editor added
        capacity = _number(row.get("capacity"))
        item = {"name": str(row.get("name") or "").strip(), "devices": _names(row.get("devices")),
                "capacity": 1.0 if capacity is None else capacity}
        demands = [_number(x) for x in _names(row.get("demands"))]
        if demands:
            item["demand"] = demands
        coll = _number(row.get("collective demand"))
        if coll:
            item["collective_demand"] = coll
        rows.append(item)
        at.append(i)
    return rows, at


def carry_sharing(old: DeviceGraph, new: DeviceGraph, shared_rows: list[dict] | None = None
                  ) -> tuple[DeviceGraph, list[str]]:
    """``new`` (rebuilt from the tables) with ``old``'s collectives and shared resources, or with the shared
    resources of ``shared_rows`` when given (the page's table, validated by the device-file loader; errors
    name the row and column). A collective or resource over a device that ``new`` no longer has is dropped;
    the notes name each one."""
    notes: list[str] = []
    names = set(new.names)

    def kept(items, what):
        out = []
        for x in items:
            gone = sorted(set(x.devices) - names)
            if gone:
                notes.append(f"{what(x)} was dropped: {', '.join(gone)} is no longer a device")
            else:
                out.append(x)
        return out

    collectives = kept(old.collectives, lambda c: f"the measured {c.op} over {', '.join(c.devices)}")
    if shared_rows is None:
        shared = kept(old.shared, lambda r: f"the shared resource {r.name!r}")
        return DeviceGraph(new.name, list(new.devices), list(new.channels), source=new.source,
                           collectives=collectives, shared=shared), notes
    data = {k: v for k, v in devices_to_dict(new).items() if k not in ("collectives", "shared")}
    data.update(sharing_to_dict(SimpleNamespace(collectives=collectives, shared=())))
    rows, at = _rows_to_shared(shared_rows)
    if rows:
        data["shared"] = rows
    try:
        return devices_from_dict(data, source=None), notes
    except InputError as e:
        m = re.match(r"shared\[(\d+)\](?:\.(\w+))?", e.field or "")
        if not m:
            raise
        column = {"demand": "demands", "collective_demand": "collective demand"}.get(m.group(2), m.group(2))
        raise InputError(e.problem, source=f"Shared resources table, row {at[int(m.group(1))] + 1}",
                         field=f"column '{column}'" if column else None, fix=e.fix) from None
