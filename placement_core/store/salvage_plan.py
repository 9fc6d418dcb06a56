"""From rows read off pages (:mod:`.salvage`) to the doctor's plans: every run whose row, network and
device graph survive, checked as closely as SQLite's rows are (its JSON parsed, its blobs decompressed
and their content hashes compared), with its history, archive, kept placements and checkpoint."""

from __future__ import annotations

import hashlib
import json
import zlib

from . import JSON_COLUMNS

_TABLES = None


def tables():
    """(columns, fewest values) of every table of the run store, for reading rows from pages (a row written
    before a column was added has fewer values)."""
    global _TABLES
    if _TABLES is None:
        from .connection import StoreFile
        from .salvage import columns_of
        from .schema import _SCHEMA
        columns = columns_of(_SCHEMA)
        least = {name: len(cols) - len(StoreFile._ADDED_COLUMNS.get(name, {})) for name, cols in columns.items()}
        _TABLES = (columns, least)
    return _TABLES


def json_of(text, what: str, want=None):
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as e:
        raise ValueError(f"its {what} is not valid JSON ({e})") from None
    if want is not None and not isinstance(value, want):
        raise ValueError(f"its {what} is not a JSON {want.__name__}")
    return value


def check_archive_row(r: tuple) -> None:
    for value, what in ((r[1], "archive niche"), (r[3], "archive descriptors"), (r[4], "archive placement")):
        json_of(value, what, list)


def check_kept_row(r: tuple) -> None:
    json_of(r[3], "kept placement", list)


def check_checkpoint_row(r: tuple) -> None:
    json_of(zlib.decompress(r[3]), "checkpoint", dict)


def merge_pages(found, plans: dict[int, dict], bench: list[dict], seen, report) -> None:
    """Add to ``plans`` and ``bench`` (what SQLite read of the repaired copy, its findings in ``seen``)
    every run and benchmark the pages hold that they lack, and fill ``report`` with the outcome."""
    columns, _ = tables()
    names = {t: [c.name for c in cols] for t, cols in columns.items()}
    blobs = {}
    for values in found.rows("blobs").values():
        blobs.setdefault(values[0], tuple(values))
    by_run: dict[str, dict[int, list]] = {t: {} for t in ("history", "archive", "kept")}
    for table in by_run:
        for values in found.rows(table).values():
            if isinstance(values[0], int):
                by_run[table].setdefault(values[0], []).append(tuple(values))
    checkpoints = {rowid: (rowid, *values[1:]) for rowid, values in found.rows("checkpoints").items()}
    known = set(plans) | set(seen.damaged) | set(found.rows("runs")) | set(checkpoints)
    known |= {i for rows in by_run.values() for i in rows}
    damaged: dict[int, str] = {}
    improved: set[int] = set()
    for run_id in sorted(known):
        if run_id in plans and run_id not in seen.partial:
            continue
        values = found.rows("runs").get(run_id)
        if values is None:
            if run_id not in plans:
                damaged[run_id] = seen.damaged.get(run_id, "its row was on a page that did not survive")
            continue
        try:
            plan = _plan(run_id, dict(zip(names["runs"], values)), blobs, by_run, checkpoints)
        except (ValueError, zlib.error, TypeError) as e:
            if run_id not in plans:
                damaged[run_id] = str(e)
            continue
        if run_id in plans:  # SQLite read the row but not all of its tables: take the pages' where they have more
            for table in ("history", "archive", "kept", "checkpoints"):
                if len(plan[table]) > len(plans[run_id][table]):
                    plans[run_id][table] = plan[table]
                    improved.add(run_id)
            continue
        plans[run_id] = plan
    report.problems += [p for p in seen.problems if p not in report.problems]
    report.partial = {i: why for i, why in seen.partial.items() if i in plans and i not in improved}
    report.runs = len(known)
    report.copied = sorted(plans)
    report.damaged = damaged
    have = {b["id"] for b in bench}
    for rowid, values in sorted(found.rows("benchmarks").items()):
        if rowid in have:
            continue
        row = dict(zip(names["benchmarks"], values), id=rowid)
        try:
            for column in ("placement", "machine", "result"):
                json_of(row[column], column, dict)
        except ValueError:
            continue
        bench.append(row)
        have.add(rowid)
    lost = sorted(set(seen.benchmarks_damaged) - have)
    report.benchmarks = len(have) + len(lost)
    report.benchmarks_damaged = lost


def _plan(run_id: int, row: dict, blobs: dict, by_run: dict, checkpoints: dict) -> dict:
    row["id"] = run_id
    for column in JSON_COLUMNS:
        if column in row and (row[column] is not None or column in ("problem", "params")):
            json_of(row[column], column, list if column == "best_placement" else dict)
    wanted = [(row["network_hash"], "network"), (row["devices_hash"], "device graph")]
    if row.get("initial_hash") is not None:
        wanted.append((row["initial_hash"], "initial placements"))
    plan = {"run": row, "blobs": [_blob(blobs, h, what) for h, what in wanted]}
    for table, check in (("history", None), ("archive", check_archive_row), ("kept", check_kept_row)):
        rows = []
        for r in by_run[table].get(run_id, []):
            try:
                if check is not None:
                    check(r)
                rows.append(r)
            except (ValueError, zlib.error, TypeError):
                continue  # a torn row: the others still come
        plan[table] = rows
    plan["checkpoints"] = []
    if run_id in checkpoints:
        try:
            check_checkpoint_row(checkpoints[run_id])
            plan["checkpoints"] = [checkpoints[run_id]]
        except (ValueError, zlib.error, TypeError):
            pass
    return plan


def _blob(blobs: dict, h, what: str) -> tuple:
    row = blobs.get(h)
    if row is None:
        raise ValueError(f"its {what} was on a page that did not survive")
    try:
        text = zlib.decompress(row[2])
        json.loads(text)
    except (zlib.error, TypeError, ValueError) as e:
        raise ValueError(f"its {what} is damaged ({e})") from None
    if hashlib.sha256(text).hexdigest() != h:
        raise ValueError(f"its {what} does not match its hash")
    return row
