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

import hashlib
import json
import os
import socket
import sqlite3
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
    initial_hash TEXT REFERENCES blobs(hash)
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

    @property
    def display_status(self) -> str:
        """'interrupted' for a run whose process on this host is gone without finishing."""
        if self.status == "running" and self.host == socket.gethostname() and self.pid and not _alive(self.pid):
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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunStore:
    def __init__(self, home: str | os.PathLike | None = None, path: str | os.PathLike | None = None):
        self.path = Path(path) if path else home_dir(home) / "runs.sqlite"
        try:
            self._conn = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.executescript(_SCHEMA)
            self._migrate()
            self._conn.execute("INSERT OR IGNORE INTO meta VALUES('schema_version', ?)", (str(SCHEMA_VERSION),))
        except sqlite3.DatabaseError as e:
            raise InputError(f"cannot open the run store ({e})", source=str(self.path),
                             fix="Move the file away (it will be recreated) or point PLACEMENT_HOME elsewhere") from None
        self._conn.row_factory = sqlite3.Row

    # Columns added after the first schema: older stores get them in place (all nullable).
    _ADDED_COLUMNS = {"runs": {"initial_hash": "TEXT REFERENCES blobs(hash)"},
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
            raise InputError(f"the store is missing data {h[:12]}", source=str(self.path))
        return json.loads(zlib.decompress(row[0]))

    # -- runs ----------------------------------------------------------------------------------
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
                "initial_hash) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (now, now, "running", label, problem.graph.name, nh, problem.devices.name, dh,
                 _dumps(problem_spec(problem)), algorithm, _dumps(params), int(seed), evaluations, seconds,
                 socket.gethostname(), os.getpid(), ih))
            return int(cur.lastrowid)

    def initial(self, run_id: int) -> np.ndarray | None:
        """The placements a run was seeded with, or None."""
        row = self._conn.execute("SELECT initial_hash FROM runs WHERE id=?", (int(run_id),)).fetchone()
        if row is None:
            self.get(run_id)
        if row["initial_hash"] is None:
            return None
        return np.array(self._get_blob(row["initial_hash"]), dtype=np.int32)

    def input_hashes(self, run_id: int) -> tuple[str, str]:
        """Content hashes of a run's network and device graph (equal hashes: the same problem inputs)."""
        row = self._conn.execute("SELECT network_hash, devices_hash FROM runs WHERE id=?", (int(run_id),)).fetchone()
        if row is None:
            self.get(run_id)
        return row["network_hash"], row["devices_hash"]

    def claim(self, run_id: int, expected: RunRecord | None = None) -> None:
        """Mark a run as running in this process again (resume).

        With ``expected`` (the record the caller checked), only if its status and process are
        unchanged: of two processes resuming the same run at once, one gets an InputError.
        """
        with self._tx() as c:
            sql = "UPDATE runs SET status='running', pid=?, host=?, updated=?, error=NULL WHERE id=?"
            args = [os.getpid(), socket.gethostname(), time.time(), run_id]
            if expected is not None:
                sql += " AND status=? AND pid IS ? AND host IS ?"
                args += [expected.status, expected.pid, expected.host]
            if c.execute(sql, args).rowcount == 0:
                self.get(run_id)
                raise InputError(f"run {run_id} was just resumed by another process", field="--resume",
                                 fix="Let that process drive it; see `placement runs show` for its state")

    def checkpoint(self, run_id: int, state: dict) -> None:
        blob = zlib.compress(json.dumps(state, separators=(",", ":")).encode())
        with self._tx() as c:
            c.execute("INSERT INTO checkpoints VALUES(?,?,?,?) ON CONFLICT(run_id) DO UPDATE SET "
                      "evaluations=excluded.evaluations, updated=excluded.updated, state=excluded.state",
                      (run_id, int(state["evaluations"]), time.time(), blob))
            c.execute("UPDATE runs SET evaluations=?, best_objective=?, best_placement=?, updated=? WHERE id=?",
                      (int(state["evaluations"]), _finite(state["best_objective"]),
                       None if state["best_placement"] is None else _dumps(state["best_placement"]), time.time(),
                       run_id))

    def load_checkpoint(self, run_id: int) -> dict | None:
        row = self._conn.execute("SELECT state FROM checkpoints WHERE run_id=?", (run_id,)).fetchone()
        return None if row is None else json.loads(zlib.decompress(row[0]))

    def finish(self, run_id: int, result, status: str = "done") -> None:
        """Store the final result: best placement, history, archive; drop the checkpoint."""
        extras = {k: v for k, v in result.extras.items() if k != "archive"}
        archive = result.extras.get("archive")
        if archive is not None:
            extras["archive_dimensions"] = [{"name": d.name, "label": d.label, "size": d.size}
                                            for d in archive.descriptors]
        with self._tx() as c:
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

    def fail(self, run_id: int, message: str) -> None:
        with self._tx() as c:
            c.execute("UPDATE runs SET status='failed', error=?, updated=? WHERE id=?", (message, time.time(), run_id))

    def stop(self, run_id: int) -> None:
        with self._tx() as c:
            c.execute("UPDATE runs SET status='stopped', updated=? WHERE id=? AND status='running'",
                      (time.time(), run_id))

    def delete(self, run_id: int) -> None:
        """Delete a run and everything stored with it; a run that is still running is refused."""
        rec = self.get(run_id)
        if rec.alive:
            raise InputError(f"run {rec.id} is still running ({rec.where})", field="run",
                             fix=f"{STOP_IT_FIRST} deleted")
        with self._tx() as c:
            # only as checked: a resume that claimed the run in between keeps it
            gone = c.execute("DELETE FROM runs WHERE id=? AND status=? AND pid IS ? AND host IS ?",
                             (rec.id, rec.status, rec.pid, rec.host)).rowcount
        if not gone:
            self.get(run_id)
            raise InputError(f"run {rec.id} was resumed while it was being deleted", field="run",
                             fix=f"{STOP_IT_FIRST} deleted")

    # -- reading -------------------------------------------------------------------------------
    def _record(self, row: sqlite3.Row) -> RunRecord:
        return RunRecord(
            id=row["id"], created=row["created"], updated=row["updated"], status=row["status"], label=row["label"],
            network_name=row["network_name"], devices_name=row["devices_name"], problem=json.loads(row["problem"]),
            algorithm=row["algorithm"], params=json.loads(row["params"]), seed=row["seed"],
            budget_evaluations=row["budget_evaluations"], budget_seconds=row["budget_seconds"],
            evaluations=row["evaluations"], best_objective=row["best_objective"],
            best_placement=None if row["best_placement"] is None
            else np.array(json.loads(row["best_placement"]), dtype=np.int32),
            wall_s=row["wall_s"], extras=json.loads(row["extras"]) if row["extras"] else {}, error=row["error"],
            host=row["host"], pid=row["pid"])

    def runs(self, status: str | None = None, limit: int | None = None) -> list[RunRecord]:
        sql = "SELECT * FROM runs" + (" WHERE status=?" if status else "") + " ORDER BY id DESC"
        if limit:
            sql += f" LIMIT {int(limit)}"
        return [self._record(r) for r in self._conn.execute(sql, (status,) if status else ())]

    def get(self, run_id: int) -> RunRecord:
        row = self._conn.execute("SELECT * FROM runs WHERE id=?", (int(run_id),)).fetchone()
        if row is None:
            raise InputError(f"there is no run {run_id} in {self.path}", field="run",
                             fix="See `placement runs list` for the run ids")
        return self._record(row)

    def history(self, run_id: int) -> np.ndarray:
        rows = self._conn.execute("SELECT evaluations, best, current FROM history WHERE run_id=? ORDER BY evaluations",
                                  (run_id,)).fetchall()
        if not rows:
            state = self.load_checkpoint(run_id)
            rows = state["history"] if state else []
        return np.array([tuple(r) for r in rows], dtype=float).reshape(-1, 3)

    def archive_rows(self, run_id: int) -> list[dict]:
        return [{"niche": tuple(json.loads(r["niche"])), "objective": r["objective"],
                 "descriptors": tuple(json.loads(r["descriptors"])),
                 "placement": np.array(json.loads(r["placement"]), dtype=np.int32)}
                for r in self._conn.execute("SELECT * FROM archive WHERE run_id=? ORDER BY objective", (run_id,))]

    def archive_sizes(self) -> dict[int, int]:
        """run id -> number of stored elites, for the runs that have an archive."""
        return {int(r[0]): int(r[1]) for r in
                self._conn.execute("SELECT run_id, COUNT(*) FROM archive GROUP BY run_id")}

    def problem(self, run_id: int) -> Problem:
        row = self._conn.execute("SELECT network_hash, devices_hash, problem FROM runs WHERE id=?",
                                 (int(run_id),)).fetchone()
        if row is None:
            self.get(run_id)
        graph = network_from_data(self._get_blob(row["network_hash"]), source=f"run {run_id}")
        devices = devices_from_dict(self._get_blob(row["devices_hash"]), source=f"run {run_id}")
        return problem_from_spec(json.loads(row["problem"]), graph, devices)

    # -- benchmarks ----------------------------------------------------------------------------
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

    def delete_benchmarks(self, ids: list[int]) -> None:
        with self._tx() as c:
            c.executemany("DELETE FROM benchmarks WHERE id=?", [(int(i),) for i in ids])


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
