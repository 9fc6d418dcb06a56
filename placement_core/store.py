"""The run store: every optimization, its history, archive, checkpoints and benchmarks, in SQLite.

One file (``runs.sqlite`` in the user data directory: ``$PLACEMENT_HOME`` or
``~/.placement``) in WAL mode, so the dashboard can read while a run writes
and a killed process leaves a readable store. A run records everything needed
to rebuild its Problem (the network and device graph as JSON, stored once by
content hash), so archives can be reopened and runs resumed days later.
Checkpoints hold the optimizer's full state (population or archive, RNG,
counters), zlib-compressed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import sqlite3
import tempfile
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from .catalog import network_from_data
from .cost import get_profile
from .devices import DeviceGraph, devices_from_dict, devices_to_dict
from .errors import InputError
from .graph import Graph
from .netformat import network_to_dict
from .problem import Problem
from .simulate.schedules import schedule_settings

SCHEMA_VERSION = 1
STATUSES = ("running", "done", "stopped", "failed")
JSON_COLUMNS = ("problem", "params", "best_placement", "extras")  # the runs columns that hold JSON text
DOCTOR = ("Run `placement runs doctor` to check the store and copy every run that can still be read into a new "
          "store file (the damaged file is kept as it is)")


class StoreError(InputError):
    """The run store itself cannot be used (damaged, replaced, unreadable), whatever the command asked."""


class DamagedRun(StoreError):
    """One run's row cannot be read; the other runs can."""

    def __init__(self, run_id: int, why: str, path: str | None = None):
        self.run_id = run_id
        self.why = why
        super().__init__(f"run {run_id} is damaged: {why}", source=path, field="run",
                         fix=f"{DOCTOR}, or delete just this run with `placement runs delete {run_id}`")


def store_error(e: sqlite3.Error, path, doing: str = "use") -> StoreError:
    """An SQLite failure as a StoreError whose fix fits the cause (never "move the file away")."""
    low = str(e).lower()
    folder = Path(path).parent
    if isinstance(e, sqlite3.OperationalError) and ("locked" in low or "busy" in low):
        fix = "Another process has held it for writing for over 30 s; try again in a moment"
    elif isinstance(e, sqlite3.OperationalError) and ("readonly" in low or "read-only" in low
                                                        or "unable to open" in low):
        fix = (f"Check that you may write to the file and to its folder {str(folder)!r} (SQLite keeps its journal "
               "next to it), or point PLACEMENT_HOME (or --home) elsewhere; the store is left as it is")
    elif isinstance(e, sqlite3.OperationalError) and ("disk i/o" in low or "full" in low):
        fix = "Check the disk (free space, errors) and try again; the store is left as it is"
    else:
        fix = DOCTOR
    return StoreError(f"cannot {doing} the run store ({e})", source=str(path), fix=fix)


def _guarded(doing: str):
    """SQLite failures inside a RunStore method become a StoreError with the right fix."""
    def wrap(method):
        @functools.wraps(method)
        def inner(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError):
                raise
            except sqlite3.DatabaseError as e:
                raise store_error(e, self.path, doing) from None
        return inner
    return wrap


def process_start(pid: int) -> str | None:
    """What tells process ``pid`` from a later one given the same pid: boot id and start time (clock ticks
    after boot, field 22 of /proc/PID/stat). None where there is no /proc (then only the pid is checked)."""
    try:
        with open(f"/proc/{int(pid)}/stat", "rb") as f:
            text = f.read()
        ticks = text[text.rindex(b")") + 2:].split()[19].decode()
    except (OSError, ValueError, IndexError):
        return None
    return f"{_boot_id()}:{ticks}"


@functools.lru_cache(maxsize=1)
def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS blobs(hash TEXT PRIMARY KEY, kind TEXT NOT NULL, data BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS runs(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    updated REAL NOT NULL,
    status TEXT NOT NULL,
    label TEXT,
    network_name TEXT NOT NULL,
    network_hash TEXT NOT NULL REFERENCES blobs(hash),
    devices_name TEXT NOT NULL,
    devices_hash TEXT NOT NULL REFERENCES blobs(hash),
    problem TEXT NOT NULL,
    algorithm TEXT NOT NULL,
    params TEXT NOT NULL,
    seed INTEGER NOT NULL,
    budget_evaluations INTEGER,
    budget_seconds REAL,
    evaluations INTEGER NOT NULL DEFAULT 0,
    best_objective REAL,
    best_placement TEXT,
    wall_s REAL,
    extras TEXT,
    error TEXT,
    host TEXT,
    pid INTEGER,
    initial_hash TEXT REFERENCES blobs(hash),
    pid_start TEXT
);
CREATE TABLE IF NOT EXISTS history(
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    evaluations INTEGER NOT NULL,
    best REAL NOT NULL,
    current REAL NOT NULL,
    PRIMARY KEY(run_id, evaluations)
);
CREATE TABLE IF NOT EXISTS archive(
    run_id INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    niche TEXT NOT NULL,
    objective REAL NOT NULL,
    descriptors TEXT NOT NULL,
    placement TEXT NOT NULL,
    PRIMARY KEY(run_id, niche)
);
CREATE TABLE IF NOT EXISTS checkpoints(
    run_id INTEGER PRIMARY KEY REFERENCES runs(id) ON DELETE CASCADE,
    evaluations INTEGER NOT NULL,
    updated REAL NOT NULL,
    state BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS benchmarks(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    created REAL NOT NULL,
    run_id INTEGER REFERENCES runs(id) ON DELETE SET NULL,
    network_name TEXT NOT NULL,
    devices_spec TEXT NOT NULL,
    runner TEXT NOT NULL,
    placement TEXT NOT NULL,
    simulated_s REAL,
    measured_median_s REAL,
    machine TEXT NOT NULL,
    result TEXT NOT NULL,
    label TEXT,
    network_hash TEXT,
    batch_size INTEGER
);
CREATE INDEX IF NOT EXISTS runs_by_status ON runs(status);
"""


def home_dir(override: str | os.PathLike | None = None) -> Path:
    """The user data directory: the override, ``$PLACEMENT_HOME``, or ``~/.placement``."""
    path = Path(override or os.environ.get("PLACEMENT_HOME") or Path.home() / ".placement").expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create the data directory {path} ({e.strerror})", field="PLACEMENT_HOME",
                         fix="Point PLACEMENT_HOME (or --home) at a writable folder") from None
    return path


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def content_hash(obj: Any) -> str:
    """The key data is stored under: equal networks (or device graphs) get equal hashes."""
    text = obj if isinstance(obj, str) else _dumps(obj)
    return hashlib.sha256(text.encode()).hexdigest()


def problem_hashes(graph: Graph, devices: DeviceGraph) -> tuple[str, str]:
    """(network hash, device-graph hash) as :meth:`RunStore.network_hash` reports them for a run."""
    return content_hash(network_to_dict(graph)), content_hash(devices_to_dict(devices))


def machine_info() -> dict:
    import platform
    return {"host": socket.gethostname(), "platform": platform.platform(), "python": platform.python_version(),
            "cpus": os.cpu_count()}


@dataclass
class RunRecord:
    id: int
    created: float
    updated: float
    status: str
    label: str | None
    network_name: str
    devices_name: str
    problem: dict
    algorithm: str
    params: dict
    seed: int
    budget_evaluations: int | None
    budget_seconds: float | None
    evaluations: int
    best_objective: float | None
    best_placement: np.ndarray | None
    wall_s: float | None
    extras: dict
    error: str | None
    host: str | None
    pid: int | None
    pid_start: str | None = None  # see process_start: a recycled pid is not this run's process

    @property
    def display_status(self) -> str:
        """'interrupted' for a run whose process on this host is gone without finishing."""
        if (self.status == "running" and self.host == socket.gethostname() and self.pid
                and not _alive(self.pid, self.pid_start)):
            return "interrupted"
        return self.status

    @property
    def alive(self) -> bool:
        """Running, and its process still drives it (or may: one on another host cannot be checked)."""
        return self.display_status == "running"

    @property
    def where(self) -> str:
        """``process 123 on host h``: where a running run is driven."""
        return f"process {self.pid} on {self.host}" if self.pid else f"a process on {self.host}"


# What to do about a run that is still running (delete, resume)
STOP_IT_FIRST = ("Stop it first (Ctrl-C where it runs, or Stop on the dashboard's Optimize page) or wait until it "
                 "finishes; a run whose process is gone shows as interrupted and can be")


def _alive(pid: int, start: str | None = None) -> bool:
    """Process ``pid`` exists and, when its start is known, is the same process (not a reused pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    except (OverflowError, ValueError):
        return False
    if start is not None:
        now = process_start(pid)
        if now is not None and now != start:
            return False
    return True


class RunStore:
    """The run store of one data directory (or one file, ``path``).

    A store is made under a temporary name and linked into place, so ``runs.sqlite`` is never
    an empty or half-made file: an empty one is damage, reported, not a new store. The file's
    identity (device, inode) is taken at opening and checked before every commit, so a store
    deleted or replaced under a running process fails that process's next write instead of
    letting it report success into a file nobody can open again.
    """

    def __init__(self, home: str | os.PathLike | None = None, path: str | os.PathLike | None = None):
        self.path = Path(path) if path else home_dir(home) / "runs.sqlite"
        self.created = False  # this call made a new, empty store
        try:
            size = os.stat(self.path).st_size
        except FileNotFoundError:
            size = None
        except OSError as e:
            raise StoreError(f"cannot open the run store ({e.strerror})", source=str(self.path),
                             fix="Check the path and its permissions, or point PLACEMENT_HOME (or --home) "
                                 "elsewhere") from None
        if size is None:
            self._create()
        elif size == 0:
            raise StoreError("is empty (0 bytes): a run store is never made empty, so this one was truncated or "
                             "replaced", source=str(self.path),
                             fix="Restore it from a backup if it held runs; if it did not, delete it and a new "
                                 "store is made")
        try:
            self._conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as e:
            raise store_error(e, self.path, "open") from None
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._check_schema()
            self._conn.executescript(_SCHEMA)
            self._migrate()
            self._conn.execute("INSERT OR IGNORE INTO meta VALUES('schema_version', ?)", (str(SCHEMA_VERSION),))
            self._identity = self._file_identity()
        except sqlite3.Error as e:
            self._conn.close()
            raise store_error(e, self.path, "open") from None
        except BaseException:
            self._conn.close()
            raise
        self._conn.row_factory = sqlite3.Row

    def _create(self) -> None:
        folder = self.path.parent
        try:
            fd, tmp = tempfile.mkstemp(prefix=".runs-new-", suffix=".sqlite", dir=folder)
        except OSError as e:
            raise StoreError(f"cannot create the run store in {str(folder)!r} ({e.strerror})", source=str(self.path),
                             fix="Point PLACEMENT_HOME (or --home) at a writable folder") from None
        os.close(fd)
        try:
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(_SCHEMA)
                conn.execute("INSERT INTO meta VALUES('schema_version', ?)", (str(SCHEMA_VERSION),))
                conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            finally:
                conn.close()
            try:
                os.link(tmp, self.path)  # never replaces a store another process made meanwhile
                self.created = True
            except FileExistsError:
                pass
            except OSError:  # a file system without hard links
                if not os.path.lexists(self.path):
                    os.replace(tmp, self.path)
                    self.created = True
        except (OSError, sqlite3.Error) as e:
            raise StoreError(f"cannot create the run store ({getattr(e, 'strerror', None) or e})",
                             source=str(self.path), fix="Check the free space and the folder's permissions") from None
        finally:
            for name in (tmp, tmp + "-wal", tmp + "-shm"):
                try:
                    os.unlink(name)
                except OSError:
                    pass

    def _check_schema(self) -> None:
        """A SQLite file that is not a run store, or one from a newer version, is refused, never changed."""
        tables = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if tables and not {"runs", "meta"} <= tables:
            raise StoreError("is an SQLite database but not a run store (it has no runs and meta tables)",
                             source=str(self.path), fix="Point PLACEMENT_HOME (or --home) at a folder of its own")
        if "meta" in tables:
            row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            try:
                version = int(row[0]) if row else SCHEMA_VERSION
            except (TypeError, ValueError):
                raise StoreError(f"has an unreadable schema_version {row[0]!r}", source=str(self.path),
                                 fix=DOCTOR) from None
            if version > SCHEMA_VERSION:
                raise StoreError(f"was written by a newer version of placement (store schema {version}; this "
                                 f"version reads schema {SCHEMA_VERSION} and older)", source=str(self.path),
                                 fix="Use that newer version, or point PLACEMENT_HOME (or --home) elsewhere")

    def _file_identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_dev, st.st_ino

    def check_file(self) -> None:
        """Raise a StoreError when the file at ``path`` is no longer the one this store opened."""
        if self._file_identity() != self._identity:
            raise StoreError("the run store was deleted or replaced while this process was using it; what this "
                             "process recorded since went with the old file", source=str(self.path),
                             fix="Restore the old file if you have a copy; leave runs.sqlite in place while a "
                                 "run is going")

    # Columns added after the first schema: older stores get them in place (all nullable).
    _ADDED_COLUMNS = {"runs": {"initial_hash": "TEXT REFERENCES blobs(hash)", "pid_start": "TEXT"},
                      "benchmarks": {"label": "TEXT", "network_hash": "TEXT", "batch_size": "INTEGER"}}

    def _migrate(self) -> None:
        for table, added in self._ADDED_COLUMNS.items():
            columns = {row[1] for row in self._conn.execute(f"PRAGMA table_info({table})")}
            for name, decl in added.items():
                if name not in columns:
                    self._conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {decl}")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
            self.check_file()  # a commit into a deleted or replaced file would be lost unseen
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    # -- blobs ---------------------------------------------------------------------------------
    def _put_blob(self, conn, kind: str, obj: Any) -> str:
        text = _dumps(obj)
        h = content_hash(text)
        conn.execute("INSERT OR IGNORE INTO blobs VALUES(?,?,?)", (h, kind, zlib.compress(text.encode())))
        return h

    def _get_blob(self, h: str) -> Any:
        row = self._conn.execute("SELECT data FROM blobs WHERE hash=?", (h,)).fetchone()
        if row is None:
            raise StoreError(f"the store is missing data {h[:12]}", source=str(self.path), fix=DOCTOR)
        try:
            return json.loads(zlib.decompress(row[0]))
        except (zlib.error, TypeError, ValueError) as e:
            raise StoreError(f"the store's data {h[:12]} is damaged ({e})", source=str(self.path), fix=DOCTOR) from None

    # -- runs ----------------------------------------------------------------------------------
    @_guarded("write to")
    def create_run(self, problem: Problem, algorithm: str, params: dict, seed: int, *,
                   evaluations: int | None = None, seconds: float | None = None, label: str | None = None,
                   initial: np.ndarray | None = None) -> int:
        """Record a new run; ``initial`` (the placements the search was seeded with) is kept for resuming."""
        now = time.time()
        with self._tx() as c:
            nh = self._put_blob(c, "network", network_to_dict(problem.graph))
            dh = self._put_blob(c, "devices", devices_to_dict(problem.devices))
            ih = None
            if initial is not None and len(initial):
                ih = self._put_blob(c, "initial", np.asarray(initial, dtype=np.int32).tolist())
            cur = c.execute(
                "INSERT INTO runs(created, updated, status, label, network_name, network_hash, devices_name, "
                "devices_hash, problem, algorithm, params, seed, budget_evaluations, budget_seconds, host, pid, "
                "initial_hash, pid_start) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (now, now, "running", label, problem.graph.name, nh, problem.devices.name, dh,
                 _dumps(problem_spec(problem)), algorithm, _dumps(params), int(seed), evaluations, seconds,
                 socket.gethostname(), os.getpid(), ih, process_start(os.getpid())))
            return int(cur.lastrowid)

    @_guarded("read")
    def initial(self, run_id: int) -> np.ndarray | None:
        """The placements a run was seeded with, or None."""
        row = self._conn.execute("SELECT initial_hash FROM runs WHERE id=?", (int(run_id),)).fetchone()
        if row is None:
            self.get(run_id)
        if row["initial_hash"] is None:
            return None
        return np.array(self._get_blob(row["initial_hash"]), dtype=np.int32)

    @_guarded("read")
    def input_hashes(self, run_id: int) -> tuple[str, str]:
        """Content hashes of a run's network and device graph (equal hashes: the same problem inputs)."""
        row = self._conn.execute("SELECT network_hash, devices_hash FROM runs WHERE id=?", (int(run_id),)).fetchone()
        if row is None:
            self.get(run_id)
        return row["network_hash"], row["devices_hash"]

    @_guarded("write to")
    def claim(self, run_id: int, expected: RunRecord | None = None) -> None:
        """Mark a run as running in this process again (resume).

        With ``expected`` (the record the caller checked), only if its status and process are
        unchanged: of two processes resuming the same run at once, one gets an InputError.
        """
        with self._tx() as c:
            sql = "UPDATE runs SET status='running', pid=?, host=?, pid_start=?, updated=?, error=NULL WHERE id=?"
            args = [os.getpid(), socket.gethostname(), process_start(os.getpid()), time.time(), run_id]
            if expected is not None:
                sql += " AND status=? AND pid IS ? AND host IS ?"
                args += [expected.status, expected.pid, expected.host]
            if c.execute(sql, args).rowcount == 0:
                self.get(run_id)
                raise InputError(f"run {run_id} was just resumed by another process", field="--resume",
                                 fix="Let that process drive it; see `placement runs show` for its state")

    def _owned(self, c, run_id: int) -> None:
        """Raise unless this process still drives the run (it was not deleted, nor resumed elsewhere)."""
        row = c.execute("SELECT status, pid, host FROM runs WHERE id=?", (int(run_id),)).fetchone()
        if row is None:
            raise StoreError(f"run {run_id} was deleted while this process was running it; its result is not "
                             "stored", source=str(self.path), field="run")
        if tuple(row) != ("running", os.getpid(), socket.gethostname()):
            where = f"process {row[1]} on {row[2]}" if row[0] == "running" else f"it is now {row[0]}"
            raise StoreError(f"run {run_id} was taken over by another process ({where}) while this process was "
                             "running it; this process stops and stores nothing more", source=str(self.path),
                             field="run")

    @_guarded("write to")
    def checkpoint(self, run_id: int, state: dict) -> None:
        blob = zlib.compress(json.dumps(state, separators=(",", ":")).encode())
        with self._tx() as c:
            self._owned(c, run_id)
            c.execute("INSERT INTO checkpoints VALUES(?,?,?,?) ON CONFLICT(run_id) DO UPDATE SET "
                      "evaluations=excluded.evaluations, updated=excluded.updated, state=excluded.state",
                      (run_id, int(state["evaluations"]), time.time(), blob))
            c.execute("UPDATE runs SET evaluations=?, best_objective=?, best_placement=?, updated=? WHERE id=?",
                      (int(state["evaluations"]), _finite(state["best_objective"]),
                       None if state["best_placement"] is None else _dumps(state["best_placement"]), time.time(),
                       run_id))

    @_guarded("read")
    def load_checkpoint(self, run_id: int) -> dict | None:
        row = self._conn.execute("SELECT state FROM checkpoints WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            return None
        try:
            return json.loads(zlib.decompress(row[0]))
        except (zlib.error, TypeError, ValueError) as e:
            raise StoreError(f"run {run_id}'s checkpoint is damaged ({e})", source=str(self.path), field="run",
                             fix=DOCTOR) from None

    @_guarded("write to")
    def finish(self, run_id: int, result, status: str = "done") -> None:
        """Store the final result: best placement, history, archive; drop the checkpoint."""
        extras = {k: v for k, v in result.extras.items() if k != "archive"}
        archive = result.extras.get("archive")
        if archive is not None:
            extras["archive_dimensions"] = [{"name": d.name, "label": d.label, "size": d.size}
                                            for d in archive.descriptors]
        with self._tx() as c:
            self._owned(c, run_id)
            c.execute("UPDATE runs SET status=?, updated=?, evaluations=?, best_objective=?, best_placement=?, "
                      "wall_s=?, extras=? WHERE id=?",
                      (status, time.time(), int(result.evaluations), _finite(result.best_objective),
                       _dumps(result.best_placement.tolist()), float(result.wall_s), _dumps(_jsonable(extras)),
                       run_id))
            c.execute("DELETE FROM history WHERE run_id=?", (run_id,))
            c.executemany("INSERT OR REPLACE INTO history VALUES(?,?,?,?)",
                          [(run_id, int(e), _finite(b), _finite(cu)) for e, b, cu in result.history.tolist()])
            if archive is not None:
                c.execute("DELETE FROM archive WHERE run_id=?", (run_id,))
                c.executemany("INSERT INTO archive VALUES(?,?,?,?,?)",
                              [(run_id, _dumps(list(e.niche)), e.objective, _dumps(list(e.descriptors)),
                                _dumps(e.placement.tolist())) for e in archive.elites.values()])
            if status == "done":
                c.execute("DELETE FROM checkpoints WHERE run_id=?", (run_id,))

    @_guarded("write to")
    def fail(self, run_id: int, message: str) -> None:
        """Mark the run failed, if this process still drives it (a run taken over stays with its new process)."""
        with self._tx() as c:
            c.execute("UPDATE runs SET status='failed', error=?, updated=? WHERE id=? AND pid IS ? AND host IS ?",
                      (message, time.time(), run_id, os.getpid(), socket.gethostname()))

    @_guarded("write to")
    def stop(self, run_id: int) -> None:
        """Mark the run stopped, if this process still drives it."""
        with self._tx() as c:
            c.execute("UPDATE runs SET status='stopped', updated=? WHERE id=? AND status='running' AND pid IS ? "
                      "AND host IS ?", (time.time(), run_id, os.getpid(), socket.gethostname()))

    @_guarded("delete from")
    def delete(self, run_id: int, force: bool = False) -> None:
        """Delete a run and everything stored with it (a damaged one too).

        A run that is still running is refused unless ``force`` (for a claim that cannot be
        checked: a process on another host); the process driving it then stops at its next
        checkpoint, storing nothing more.
        """
        rec = self.claim_of(run_id)
        if rec.alive and not force:
            raise InputError(f"run {rec.id} is still running ({rec.where})", field="run",
                             fix=f"{STOP_IT_FIRST} deleted (--force deletes it anyway, e.g. when it runs on a host "
                                 "that is gone)")
        with self._tx() as c:
            # only as checked: a resume that claimed the run in between keeps it
            gone = c.execute("DELETE FROM runs WHERE id=? AND status=? AND pid IS ? AND host IS ?",
                             (rec.id, rec.status, rec.pid, rec.host)).rowcount
        if not gone:
            self.claim_of(run_id)
            raise InputError(f"run {rec.id} was resumed while it was being deleted", field="run",
                             fix=f"{STOP_IT_FIRST} deleted")

    @_guarded("read")
    def claim_of(self, run_id: int) -> RunRecord:
        """Who drives a run: a record with its plain columns only (JSON cells unread), so a damaged run has one."""
        row = self._conn.execute("SELECT id, created, updated, status, label, network_name, devices_name, "
                                 "algorithm, seed, budget_evaluations, budget_seconds, evaluations, best_objective, "
                                 "wall_s, error, host, pid, pid_start FROM runs WHERE id=?", (int(run_id),)).fetchone()
        if row is None:
            raise InputError(f"there is no run {run_id} in {self.path}", field="run",
                             fix="See `placement runs list` for the run ids")
        return RunRecord(problem={}, params={}, best_placement=None, extras={}, **dict(row))

    # -- reading -------------------------------------------------------------------------------
    def _record(self, row: sqlite3.Row) -> RunRecord:
        """A row as a RunRecord; a cell that does not parse is a DamagedRun naming the run and the column."""
        cells = {c: _json_cell(row, c, str(self.path)) for c in JSON_COLUMNS}
        try:
            best = None if cells["best_placement"] is None else np.array(cells["best_placement"], dtype=np.int32)
        except (TypeError, ValueError, OverflowError):
            raise DamagedRun(row["id"], "its best_placement is not a list of device indices", str(self.path)) from None
        return RunRecord(
            id=row["id"], created=row["created"], updated=row["updated"], status=row["status"], label=row["label"],
            network_name=row["network_name"], devices_name=row["devices_name"], problem=cells["problem"],
            algorithm=row["algorithm"], params=cells["params"], seed=row["seed"],
            budget_evaluations=row["budget_evaluations"], budget_seconds=row["budget_seconds"],
            evaluations=row["evaluations"], best_objective=row["best_objective"], best_placement=best,
            wall_s=row["wall_s"], extras=cells["extras"] or {}, error=row["error"],
            host=row["host"], pid=row["pid"], pid_start=row["pid_start"])

    def runs(self, status: str | None = None, limit: int | None = None) -> list[RunRecord]:
        """Stored runs, newest first; damaged ones are left out (:meth:`runs_checked` names them)."""
        return self.runs_checked(status, limit)[0]

    @_guarded("read")
    def runs_checked(self, status: str | None = None,
                     limit: int | None = None) -> tuple[list[RunRecord], list[DamagedRun]]:
        """(readable runs newest first, damaged runs): one bad cell or page costs only the runs it holds."""
        sql = "SELECT * FROM runs" + (" WHERE status=?" if status else "") + " ORDER BY id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        try:
            rows = self._conn.execute(sql, (status,) if status else ()).fetchall()
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError) and "malformed" not in str(e):
                raise
            rows = None  # a damaged page: read the runs one at a time
        records, damaged = [], []
        if rows is None:
            rows = []
            for run_id in sorted(run_ids(self._conn), reverse=True):
                try:
                    row = self._conn.execute("SELECT * FROM runs WHERE id=?", (run_id,)).fetchone()
                except sqlite3.DatabaseError as e:
                    damaged.append(DamagedRun(run_id, f"its row cannot be read ({e})", str(self.path)))
                    continue
                if row is not None and (not status or row["status"] == status):
                    rows.append(row)
                if limit and len(rows) >= limit:
                    break
        for row in rows:
            try:
                records.append(self._record(row))
            except DamagedRun as e:
                damaged.append(e)
        return records, damaged

    @_guarded("read")
    def get(self, run_id: int) -> RunRecord:
        try:
            row = self._conn.execute("SELECT * FROM runs WHERE id=?", (int(run_id),)).fetchone()
        except sqlite3.DatabaseError as e:
            if isinstance(e, sqlite3.OperationalError) and "malformed" not in str(e):
                raise
            raise DamagedRun(int(run_id), f"its row cannot be read ({e})", str(self.path)) from None
        if row is None:
            raise InputError(f"there is no run {run_id} in {self.path}", field="run",
                             fix="See `placement runs list` for the run ids")
        return self._record(row)

    @_guarded("read")
    def history(self, run_id: int) -> np.ndarray:
        rows = self._conn.execute("SELECT evaluations, best, current FROM history WHERE run_id=? ORDER BY evaluations",
                                  (run_id,)).fetchall()
        if not rows:
            state = self.load_checkpoint(run_id)
            rows = state["history"] if state else []
        return np.array([tuple(r) for r in rows], dtype=float).reshape(-1, 3)

    @_guarded("read")
    def archive_rows(self, run_id: int) -> list[dict]:
        return [{"niche": tuple(json.loads(r["niche"])), "objective": r["objective"],
                 "descriptors": tuple(json.loads(r["descriptors"])),
                 "placement": np.array(json.loads(r["placement"]), dtype=np.int32)}
                for r in self._conn.execute("SELECT * FROM archive WHERE run_id=? ORDER BY objective", (run_id,))]

    @_guarded("read")
    def archive_sizes(self) -> dict[int, int]:
        """run id -> number of stored elites, for the runs that have an archive."""
        return {int(r[0]): int(r[1]) for r in
                self._conn.execute("SELECT run_id, COUNT(*) FROM archive GROUP BY run_id")}

    @_guarded("read")
    def problem(self, run_id: int) -> Problem:
        row = self._conn.execute("SELECT network_hash, devices_hash, problem FROM runs WHERE id=?",
                                 (int(run_id),)).fetchone()
        if row is None:
            self.get(run_id)
        graph = network_from_data(self._get_blob(row["network_hash"]), source=f"run {run_id}")
        devices = devices_from_dict(self._get_blob(row["devices_hash"]), source=f"run {run_id}")
        return problem_from_spec(json.loads(row["problem"]), graph, devices)

    # -- benchmarks ----------------------------------------------------------------------------
    @_guarded("write to")
    def add_benchmark(self, *, network_name: str, devices_spec: str, runner: str, placement: dict,
                      simulated_s: float | None, measured_median_s: float | None, result: dict,
                      run_id: int | None = None, label: str | None = None, network_hash: str | None = None,
                      batch_size: int | None = None) -> int:
        """Record one measured placement (``placement``: op -> device name of the device graph)."""
        with self._tx() as c:
            cur = c.execute("INSERT INTO benchmarks(created, run_id, network_name, devices_spec, runner, placement, "
                            "simulated_s, measured_median_s, machine, result, label, network_hash, batch_size) "
                            "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
                            (time.time(), run_id, network_name, devices_spec, runner, _dumps(placement),
                             _finite_or_none(simulated_s), _finite_or_none(measured_median_s),
                             _dumps(machine_info()), _dumps(_jsonable(result)), label, network_hash, batch_size))
            return int(cur.lastrowid)

    @_guarded("read")
    def benchmarks(self, network_name: str | None = None, *, run_id: int | None = None,
                   network_hash: str | None = None) -> list[dict]:
        """Stored measurements, oldest first, optionally only those of one network / run / network content."""
        where, args = [], []
        for column, value in (("network_name", network_name), ("run_id", run_id), ("network_hash", network_hash)):
            if value is not None:
                where.append(f"{column}=?")
                args.append(value)
        sql = "SELECT * FROM benchmarks" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
        out = []
        for r in self._conn.execute(sql, args):
            d = dict(r)
            for k in ("placement", "machine", "result"):
                d[k] = json.loads(d[k])
            out.append(d)
        return out

    @_guarded("write to")
    def delete_benchmarks(self, ids: list[int]) -> None:
        with self._tx() as c:
            c.executemany("DELETE FROM benchmarks WHERE id=?", [(int(i),) for i in ids])


def _json_cell(row: sqlite3.Row, column: str, path: str) -> Any:
    text = row[column]
    if text is None:
        if column in ("problem", "params"):
            raise DamagedRun(row["id"], f"its {column} is missing", path)
        return None
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as e:
        raise DamagedRun(row["id"], f"its {column} is not valid JSON ({e})", path) from None
    if column != "best_placement" and not isinstance(value, dict):
        raise DamagedRun(row["id"], f"its {column} is not a JSON object", path)
    return value


def run_ids(conn: sqlite3.Connection) -> set[int]:
    """Every run id that can be found, even when pages of the runs table are damaged.

    The table's own scan stops at the first bad page; the status index, the tables that
    refer to runs and, as a last resort, the id counter are separate pages, so together
    they still name the runs on a damaged page (whose rows then fail to read, one by one).
    """
    ids: set[int] = set()
    listed = False  # the table or its index gave every id
    for sql in ("SELECT id FROM runs", "SELECT id FROM runs INDEXED BY runs_by_status",
                "SELECT run_id FROM checkpoints", "SELECT DISTINCT run_id FROM history",
                "SELECT DISTINCT run_id FROM archive"):
        try:
            found = [i for (i,) in conn.execute(sql) if isinstance(i, int)]
        except sqlite3.DatabaseError:
            continue
        ids.update(found)
        listed = listed or sql.startswith("SELECT id FROM runs")
    if not listed:
        try:
            row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name='runs'").fetchone()
            ids.update(range(1, min(int(row[0]), 1_000_000) + 1) if row else ())
        except (sqlite3.DatabaseError, TypeError, ValueError):
            pass
    return ids


def _finite_or_none(x) -> float | None:
    return None if x is None else _finite(x)


def _finite(x) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    return obj


def problem_spec(problem: Problem) -> dict:
    s = problem.settings
    prof = problem.profile
    return {"profile": prof.name, "comp_efficiency": prof.comp_efficiency, "comm_efficiency": prof.comm_efficiency,
            "timings": _jsonable(dict(prof.timings)) if getattr(prof, "timings", None) else None,
            "timings_batch": getattr(prof, "timings_batch", 0),
            "penalty": problem.penalty, "schedule": s.schedule, "micro_batches": s.micro_batches,
            "batches": s.batches // s.micro_batches, "in_flight": s.in_flight, "forward_only": s.forward_only}


def problem_from_spec(spec: dict, graph: Graph, devices: DeviceGraph) -> Problem:
    profile = get_profile(spec["profile"], comp_efficiency=spec["comp_efficiency"],
                          comm_efficiency=spec["comm_efficiency"], timings=spec.get("timings"),
                          timings_batch=spec.get("timings_batch"))
    settings = schedule_settings(spec["schedule"], len(graph), micro_batches=spec["micro_batches"],
                                 batches=spec["batches"], in_flight=spec["in_flight"],
                                 forward_only=spec["forward_only"])
    return Problem(graph, devices, profile=profile, settings=settings, penalty=spec["penalty"])
