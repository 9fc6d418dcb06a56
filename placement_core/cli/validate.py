"""Checks of command-line values before any work starts.

Files the CLI writes (``--out``, ``--trace``) are checked up front and written
atomically; integers that end up in SQLite or a random generator are
range-checked when parsed. A bad value must fail at once with one ``error:``
line (exit 2), not after a long optimization, and never as exit 1.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from ..base import outputs


def check_output_file(spec: str, option: str, example: str = "result.json") -> Path:
    """``spec`` as a Path that can be written (see :mod:`placement_core.base.outputs`: regular files or new paths)."""
    return outputs.check_output_file(spec, option, example)


def check_output_dir(spec: str, option: str) -> Path:
    """``spec`` as a folder that exists or can be created (its nearest existing ancestor is a writable folder)."""
    return outputs.check_output_dir(spec, option)


def write_output_bytes(path: str | os.PathLike, data: bytes, option: str) -> None:
    """Write atomically, refusing special files and links; OSError (a full disk) becomes an InputError."""
    outputs.write_output(path, data, option)


# -- argparse types ------------------------------------------------------------------------------------

MAX_INT = 2**63 - 1  # SQLite's INTEGER and numpy's seeds stop here


def _int_in(text: str, lo: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not lo <= value <= MAX_INT:
        raise argparse.ArgumentTypeError(f"expected {what} from {lo} to {MAX_INT}, got {text!r}")
    return value


def seed_int(text: str) -> int:
    """A random seed: 0 .. 2**63 - 1."""
    return _int_in(text, 0, "an integer")


def count_int(text: str) -> int:
    """A positive count that is stored (a budget in evaluations): 1 .. 2**63 - 1."""
    return _int_in(text, 1, "a positive integer")


def run_id(text: str) -> int:
    """A stored run's id: 1 .. 2**63 - 1."""
    return _int_in(text, 1, "a run id, an integer")


def positive_seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive, finite number of seconds, got {text!r}")
    return value


MAX_WORKERS = 1024


def workers_int(text: str) -> int:
    """Local worker processes: 1 .. 1024 (each is a whole Python process)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"expected a number of worker processes from 1 to {MAX_WORKERS}, "
                                         f"got {text!r}")
    return value
