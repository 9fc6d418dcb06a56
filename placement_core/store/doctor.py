"""``placement runs doctor``: check a run store, and salvage what can be read into a new file.

SQLite's integrity check finds damaged pages; then every run is read on its own (so a bad
page or a cell of garbage costs only the runs it holds) with its network, devices, history,
archive and checkpoint, and every benchmark likewise. When anything is damaged, all that
reads cleanly is copied, ids unchanged, into a new store file next to the old one. The old
file is only ever read: trying the doctor loses nothing.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from ..base.errors import InputError
from . import JSON_COLUMNS, RunStore, StoreError, run_ids
from .records import DAMAGE, strict_text
from .salvage_plan import (check_archive_row as _check_archive_row, check_checkpoint_row as _check_checkpoint_row,
                           check_kept_row as _check_kept_row, json_of as _json)

MAX_PROBLEMS = 20  # integrity_check lines kept in the report


@dataclass
class Report:
    path: Path
    problems: list[str] = field(default_factory=list)  # what is wrong with the file as a whole
    runs: int = 0  # runs found
    copied: list[int] = field(default_factory=list)  # runs that read cleanly (copied when salvaging)
    damaged: dict[int, str] = field(default_factory=dict)  # run id -> why it cannot be copied
    partial: dict[int, str] = field(default_factory=dict)  # run id -> what was left behind (history, ...)
    benchmarks: int = 0
    benchmarks_damaged: list[int] = field(default_factory=list)
    salvaged: Path | None = None

    @property
    def healthy(self) -> bool:
        return not (self.problems or self.damaged or self.partial or self.benchmarks_damaged)

    def lines(self) -> list[str]:
        """What the doctor found and did, for the terminal."""
        out = [f"checked {self.path}: "
               + ("no problems found" if self.healthy else f"{len(self.problems)} problem(s) with the file")]
        out += [f"  {p}" for p in self.problems]
        out.append(f"  {self.runs} run(s): {len(self.copied)} readable"
                   + (f", {len(self.damaged)} damaged" if self.damaged else "")
                   + f"; {self.benchmarks} benchmark(s)"
                   + (f", {len(self.benchmarks_damaged)} damaged" if self.benchmarks_damaged else ""))
        out += [f"  run {i}: {why}" for i, why in sorted(self.damaged.items())]
        out += [f"  run {i}: readable, but {why}" for i, why in sorted(self.partial.items())]
        if self.salvaged is not None:
            out.append(f"wrote {self.salvaged}: {len(self.copied)} run(s) and "
                       f"{self.benchmarks - len(self.benchmarks_damaged)} benchmark(s), ids unchanged. "
                       f"{self.path.name} is unchanged.")
            out.append(f"To use it: keep the damaged file aside (mv {self.path} {self.path}.damaged), then "
                       f"mv {self.salvaged} {self.path}")
        return out


def examine(path: str | Path, out: str | Path | None = None, salvage: bool = True) -> Report:
    """Check the store at ``path``; when it is damaged (and ``salvage``), copy what reads into ``out``
    (default: ``runs-salvaged-YYYYmmdd-HHMMSS.sqlite`` next to it; never an existing file).

    Damage inside rows (a cell of garbage) is read around through SQLite; damaged pages, a truncated file
    or a broken header send the doctor to a repaired copy and to the pages themselves (:mod:`.salvage`),
    so every run whose pages survive is saved."""
    path = Path(path)
    report = Report(path)
    if not path.exists():
        raise InputError("there is no run store here", source=str(path),
                         fix="Give the data directory that holds runs.sqlite with --home")
    if path.stat().st_size == 0:
        report.problems.append("the file is empty (0 bytes): it holds no runs; restore it from a backup or delete it")
        return report
    target = (lambda: _target(path, out))
    try:
        src = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
    except DAMAGE as e:
        report.problems.append(f"SQLite cannot open it ({e})")
        return _from_pages(path, report, salvage, target)
    try:
        src.row_factory = sqlite3.Row
        src.text_factory = strict_text
        report.problems += _integrity(src)
        if report.problems:  # damaged pages: read them from a repaired copy, and page by page
            src.close()
            return _from_pages(path, report, salvage, target)
        plans = _check_runs(src, report)
        bench = _check_benchmarks(src, report)
        if salvage and not report.healthy and (plans or bench):
            report.salvaged = _copy(src, plans, bench, target())
    finally:
        src.close()
    return report


def _from_pages(path: Path, report: Report, salvage: bool, target) -> Report:
    """What SQLite reads of the repaired copy, and then every run the pages hold that it could not read."""
    from .pagefile import read_image, write_copy
    from .salvage import scan
    from .salvage_plan import merge_pages, tables
    try:
        image = read_image(path)
    except OSError as e:
        report.problems.append(f"the file cannot be read ({e.strerror}): nothing can be salvaged")
        return report
    report.problems += image.notes
    seen = Report(path)  # what SQLite makes of the copy: the starting point
    plans: dict[int, dict] = {}
    bench: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="placement-doctor-") as tmp:
        copy = write_copy(image, Path(tmp) / "copy.sqlite")
        try:
            conn = sqlite3.connect(copy)
            conn.row_factory = sqlite3.Row
            conn.text_factory = strict_text
            try:
                plans = _check_runs(conn, seen)
                bench = _check_benchmarks(conn, seen)
            finally:
                conn.close()
        except DAMAGE as e:
            seen.problems.append(f"SQLite cannot read even a repaired copy ({e})")
    merge_pages(scan(image, *tables()), plans, bench, seen, report)
    if salvage and not report.healthy and (plans or bench):
        report.salvaged = _copy(None, plans, bench, target())
    if not plans and not bench:
        report.problems.append("nothing readable was found in it: nothing can be salvaged")
    return report


def _integrity(src: sqlite3.Connection) -> list[str]:
    try:
        rows = [r[0] for r in src.execute(f"PRAGMA integrity_check({MAX_PROBLEMS})")]
    except DAMAGE as e:
        return [f"integrity check: {e}"]
    return [] if rows == ["ok"] else [f"integrity check: {r}" for r in rows]


def _blob(src, h, what: str) -> tuple:
    row = src.execute("SELECT hash, kind, data FROM blobs WHERE hash=?", (h,)).fetchone()
    if row is None:
        raise ValueError(f"its {what} is missing")
    try:
        json.loads(zlib.decompress(row["data"]))
    except (zlib.error, TypeError, ValueError) as e:
        raise ValueError(f"its {what} is damaged ({e})") from None
    return tuple(row)


def _rows(src, sql: str, run_id: int) -> list[tuple]:
    try:
        return [tuple(r) for r in src.execute(sql, (run_id,))]
    except sqlite3.OperationalError as e:
        if "no such table: kept" in str(e):  # a store from before kept placements: nothing to copy
            return []
        raise


def _check_runs(src, report: Report) -> dict[int, dict]:
    """run id -> the rows to copy, for every run that reads; the others land in report.damaged."""
    plans = {}
    ids = sorted(run_ids(src))
    report.runs = len(ids)
    for run_id in ids:
        try:
            row = src.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
        except DAMAGE as e:
            report.damaged[run_id] = f"its row cannot be read ({e})"
            continue
        if row is None:
            report.runs -= 1  # listed by a table that refers to it, but deleted
            continue
        try:
            for column in JSON_COLUMNS:
                if column not in row.keys():  # a store older than the column (seeding)
                    continue
                if row[column] is not None or column in ("problem", "params"):
                    _json(row[column], column, list if column == "best_placement" else dict)
            blobs = [_blob(src, row["network_hash"], "network"), _blob(src, row["devices_hash"], "device graph")]
            if "initial_hash" in row.keys() and row["initial_hash"] is not None:
                blobs.append(_blob(src, row["initial_hash"], "initial placements"))
        except (ValueError, *DAMAGE) as e:
            report.damaged[run_id] = str(e)
            continue
        plan, left = {"run": dict(row), "blobs": blobs}, []
        for table, sql, check in (
                ("history", "SELECT * FROM history WHERE run_id=?", None),
                ("archive", "SELECT * FROM archive WHERE run_id=?", _check_archive_row),
                ("kept", "SELECT * FROM kept WHERE run_id=?", _check_kept_row),
                ("checkpoints", "SELECT * FROM checkpoints WHERE run_id=?", _check_checkpoint_row)):
            try:
                rows = _rows(src, sql, run_id)
                for r in rows if check else ():
                    check(r)
                plan[table] = rows
            except (ValueError, zlib.error, *DAMAGE) as e:
                plan[table] = []
                left.append(f"its {table} cannot be read ({e}) and is left behind")
        if left:
            report.partial[run_id] = "; ".join(left)
        plans[run_id] = plan
        report.copied.append(run_id)
    return plans


def _check_benchmarks(src, report: Report) -> list[dict]:
    try:
        ids = [r[0] for r in src.execute("SELECT id FROM benchmarks")]
    except DAMAGE:  # a damaged page: try every id the counter has handed out
        try:
            row = src.execute("SELECT seq FROM sqlite_sequence WHERE name='benchmarks'").fetchone()
            ids = range(1, min(int(row[0]), 1_000_000) + 1) if row else []
        except (*DAMAGE, TypeError, ValueError):
            ids = []
        report.problems.append("the benchmarks table has a damaged page")
    keep = []
    for i in sorted(ids):
        try:
            row = src.execute("SELECT * FROM benchmarks WHERE id=?", (i,)).fetchone()
            if row is None:
                continue
            for column in ("placement", "machine", "result"):
                _json(row[column], column, dict)
        except (ValueError, *DAMAGE):
            report.benchmarks += 1
            report.benchmarks_damaged.append(i)
            continue
        report.benchmarks += 1
        keep.append(dict(row))
    return keep


def _target(path: Path, out) -> Path:
    target = Path(out) if out else path.with_name(f"runs-salvaged-{time.strftime('%Y%m%d-%H%M%S')}.sqlite")
    if target.exists() or target.is_symlink():
        raise InputError("exists already; the doctor never overwrites a file", source=str(target), field="--out",
                         fix="Give a new file name")
    if not target.parent.is_dir():
        raise InputError(f"the folder {str(target.parent)!r} does not exist", source=str(target), field="--out",
                         fix="Create it first, or give a path in an existing folder")
    return target


def _insert(conn, table: str, row: dict) -> None:
    columns = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
    keys = [k for k in row if k in columns]
    conn.execute(f"INSERT OR IGNORE INTO {table}({', '.join(keys)}) VALUES({', '.join('?' * len(keys))})",
                 [row[k] for k in keys])


def _copy(src, plans: dict[int, dict], benchmarks: list[dict], target: Path) -> Path:
    try:
        _fill(plans, benchmarks, target)
    except BaseException:
        for name in (target, Path(f"{target}-wal"), Path(f"{target}-shm")):
            name.unlink(missing_ok=True)
        raise
    return target


def _fill(plans: dict[int, dict], benchmarks: list[dict], target: Path) -> None:
    with RunStore(path=target) as dst:
        if not dst.created:
            raise StoreError("was made by another process while the doctor was writing it", source=str(target),
                             field="--out", fix="Run the doctor again")
        conn = dst._conn
        conn.execute("PRAGMA foreign_keys=OFF")  # a benchmark may name a run that could not be copied
        conn.execute("BEGIN IMMEDIATE")
        try:
            for plan in plans.values():
                for blob in plan["blobs"]:
                    conn.execute("INSERT OR IGNORE INTO blobs VALUES(?,?,?)", blob)
                _insert(conn, "runs", plan["run"])
                conn.executemany("INSERT OR IGNORE INTO history VALUES(?,?,?,?)", plan["history"])
                conn.executemany("INSERT OR IGNORE INTO archive VALUES(?,?,?,?,?)", plan["archive"])
                conn.executemany("INSERT OR IGNORE INTO kept VALUES(?,?,?,?)", plan["kept"])
                conn.executemany("INSERT OR IGNORE INTO checkpoints VALUES(?,?,?,?)", plan["checkpoints"])
            for row in benchmarks:
                if row.get("run_id") is not None and row["run_id"] not in plans:
                    row = {**row, "run_id": None}
                _insert(conn, "benchmarks", row)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
