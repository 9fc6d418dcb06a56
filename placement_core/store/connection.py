"""Opening, creating and guarding the store file; blobs stored once by content hash."""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from ..base.jsonio import compact as _dumps
from ..base.jsonio import content_hash
from .records import DOCTOR, SCHEMA_VERSION, StoreError, home_dir, store_error, strict_text
from .schema import _SCHEMA

class StoreFile:
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
        except UnicodeDecodeError:  # SQLite's message quoted garbage from a damaged schema page
            self._conn.close()
            raise store_error(sqlite3.DatabaseError("database disk image is malformed"), self.path, "open") from None
        except BaseException:
            self._conn.close()
            raise
        self._conn.row_factory = sqlite3.Row
        self._conn.text_factory = strict_text  # garbage text on a damaged page: a damaged run, not a crash

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
    _ADDED_COLUMNS = {"runs": {"initial_hash": "TEXT REFERENCES blobs(hash)", "pid_start": "TEXT",
                               "seeding": "TEXT"},
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
