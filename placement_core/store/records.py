"""What the run store is made of besides its SQL: errors, records, process identity, helpers."""

from __future__ import annotations

import functools
import json
import os
import socket
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..model.devices import DeviceGraph, devices_hash
from ..base.errors import InputError
from ..model.graph import Graph
from ..formats.network import network_hash

SCHEMA_VERSION = 1
STATUSES = ("running", "done", "stopped", "failed", "interrupted")  # interrupted: its Dask scheduler was lost
JSON_COLUMNS = ("problem", "params", "best_placement", "extras", "seeding")  # the runs columns that hold JSON text
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

def home_dir(override: str | os.PathLike | None = None) -> Path:
    """The user data directory: the override, ``$PLACEMENT_HOME``, or ``~/.placement``."""
    path = Path(override or os.environ.get("PLACEMENT_HOME") or Path.home() / ".placement").expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create the data directory {path} ({e.strerror})", field="PLACEMENT_HOME",
                         fix="Point PLACEMENT_HOME (or --home) at a writable folder") from None
    return path


def problem_hashes(graph: Graph, devices: DeviceGraph) -> tuple[str, str]:
    """(network hash, device-graph hash) as :meth:`RunStore.input_hashes` reports them for a run."""
    return network_hash(graph), devices_hash(devices)


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
    seeding: dict | None = None  # the initial mappings a search started from (--init), as the CLI reports them

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


# What damage raises while SQLite reads a file: its own errors, and (from Python's sqlite3, which decodes
# SQLite's error messages strictly) a UnicodeDecodeError when a message quotes garbage from a damaged page.
DAMAGE = (sqlite3.DatabaseError, UnicodeDecodeError)


def strict_text(raw: bytes) -> str:
    """SQLite text as Python reads it, for a connection's ``text_factory``: bytes that are not UTF-8 (a damaged
    page) are a DatabaseError like any other damage, not a UnicodeDecodeError that nothing expects."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise sqlite3.DataError(f"a text value is not UTF-8 (byte {e.start})") from None


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
        except DAMAGE:
            continue
        ids.update(found)
        listed = listed or sql.startswith("SELECT id FROM runs")
    if not listed:
        try:
            row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name='runs'").fetchone()
            ids.update(range(1, min(int(row[0]), 1_000_000) + 1) if row else ())
        except (*DAMAGE, TypeError, ValueError):
            pass
    return ids


def _finite_or_none(x) -> float | None:
    return None if x is None else _finite(x)


def _finite(x) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None
