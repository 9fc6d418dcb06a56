"""Runs, their checkpoints, histories and archives, and benchmark measurements."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
import zlib

import numpy as np

from ..formats.catalog import network_from_data
from ..model.devices import devices_from_dict, devices_to_dict
from ..formats.network import network_to_dict
from ..optimize.base import stored_params
from ..problem import Problem, ProblemSpec
from .connection import StoreFile
from ..base.errors import InputError
from ..base.jsonio import compact as _dumps
from ..base.jsonio import to_jsonable as _jsonable
from .records import (DOCTOR, JSON_COLUMNS, STOP_IT_FIRST, DamagedRun, RunRecord, StoreError, _finite,
                      _finite_or_none, _guarded, _json_cell, machine_info, process_start, run_ids)


class RunStore(StoreFile):
    """The run store of one data directory (or one file, ``path``): runs and benchmarks."""

    # -- runs ----------------------------------------------------------------------------------
    @_guarded("write to")
    def create_run(self, problem: Problem, algorithm: str, params: dict, seed: int, *,
                   evaluations: int | None = None, seconds: float | None = None, label: str | None = None,
                   initial: np.ndarray | None = None, seeding: dict | None = None) -> int:
        """Record a new run; ``initial`` (the placements the search was seeded with) is kept for resuming,
        ``seeding`` says what they were (the initial mappings named, how many, what they cost)."""
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
                "initial_hash, pid_start, seeding) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (now, now, "running", label, problem.graph.name, nh, problem.devices.name, dh,
                 _dumps(problem.spec.to_dict()), algorithm, _dumps(params), int(seed), evaluations, seconds,
                 socket.gethostname(), os.getpid(), ih, process_start(os.getpid()),
                 None if seeding is None else _dumps(_jsonable(seeding))))
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
            # the parameters as used: an asynchronous variant resolves its "auto" batch sizes when it starts
            c.execute("UPDATE runs SET status=?, updated=?, evaluations=?, best_objective=?, best_placement=?, "
                      "wall_s=?, extras=?, params=? WHERE id=?",
                      (status, time.time(), int(result.evaluations), _finite(result.best_objective),
                       _dumps(result.best_placement.tolist()), float(result.wall_s), _dumps(_jsonable(extras)),
                       _dumps(_jsonable(result.params)), run_id))
            c.execute("DELETE FROM history WHERE run_id=?", (run_id,))
            c.executemany("INSERT OR REPLACE INTO history VALUES(?,?,?,?)",
                          [(run_id, int(e), _finite(b), _finite(cu)) for e, b, cu in result.history.tolist()])
            c.execute("DELETE FROM kept WHERE run_id=?", (run_id,))
            c.executemany("INSERT INTO kept VALUES(?,?,?,?)",
                          [(run_id, rank, float(f), _dumps(np.asarray(x).tolist()))
                           for rank, (f, x) in enumerate(getattr(result, "kept", []) or [], start=1)
                           if np.isfinite(f)])
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

    @_guarded("write to")
    def interrupt(self, run_id: int, message: str) -> None:
        """Mark the run interrupted (its evaluations were lost with their cluster), if this process still
        drives it; it resumes from its last checkpoint like a stopped run."""
        with self._tx() as c:
            c.execute("UPDATE runs SET status='interrupted', error=?, updated=? WHERE id=? AND status='running' "
                      "AND pid IS ? AND host IS ?", (message, time.time(), run_id, os.getpid(), socket.gethostname()))

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
            algorithm=row["algorithm"], params=stored_params(row["algorithm"], cells["params"]), seed=row["seed"],
            budget_evaluations=row["budget_evaluations"], budget_seconds=row["budget_seconds"],
            evaluations=row["evaluations"], best_objective=row["best_objective"], best_placement=best,
            wall_s=row["wall_s"], extras=cells["extras"] or {}, error=row["error"],
            host=row["host"], pid=row["pid"], pid_start=row["pid_start"], seeding=cells["seeding"])

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
    def kept_rows(self, run_id: int) -> list[dict]:
        """The best distinct placements a finished or stopped run evaluated, best first (a running or
        interrupted run's are in its checkpoint: :meth:`kept_of`)."""
        return [{"rank": r["rank"], "objective": r["objective"],
                 "placement": np.array(json.loads(r["placement"]), dtype=np.int32)}
                for r in self._conn.execute("SELECT * FROM kept WHERE run_id=? ORDER BY rank", (run_id,))]

    def kept_of(self, run_id: int) -> list[tuple[float, np.ndarray]]:
        """(objective, placement) of the best distinct placements a run evaluated, stored or checkpointed."""
        rows = self.kept_rows(run_id)
        if rows:
            return [(r["objective"], r["placement"]) for r in rows]
        state = self.load_checkpoint(run_id) or {}
        return [(float(f), np.asarray(x, dtype=np.int32)) for f, _, x in state.get("kept") or []]

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
        return ProblemSpec.from_dict(json.loads(row["problem"]), source=f"run {run_id}").build(
            graph, devices, whole_batch=False)

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
