"""The run store: every optimization, its history, archive, checkpoints and benchmarks, in SQLite.

One file (``runs.sqlite`` in the user data directory: ``$PLACEMENT_HOME`` or
``~/.placement``) in WAL mode, so the dashboard can read while a run writes
and a killed process leaves a readable store. A run records everything needed
to rebuild its Problem (the network and device graph as JSON, stored once by
content hash), so archives can be reopened and runs resumed days later.
Checkpoints hold the optimizer's full state (population or archive, RNG,
counters), zlib-compressed.
"""

from .connection import StoreFile
from .records import (DOCTOR, JSON_COLUMNS, SCHEMA_VERSION, STATUSES, STOP_IT_FIRST, DamagedRun, RunRecord,
                      StoreError, home_dir, machine_info, problem_hashes, process_start, run_ids, store_error)
from .run_store import RunStore

__all__ = ["DOCTOR", "JSON_COLUMNS", "SCHEMA_VERSION", "STATUSES", "STOP_IT_FIRST", "DamagedRun", "RunRecord",
           "RunStore", "StoreError", "StoreFile", "home_dir", "machine_info", "problem_hashes", "process_start",
           "run_ids", "store_error"]
