"""argparse with one-line usage errors, for the ``placement`` command and the experiments it runs.

A usage mistake is bad input like any other: one ``error:`` line and exit status 2 (the CLI's
``run_safely`` prints it), never argparse's usage block. The experiments parse the rest of their
command line themselves, so the parser lives here, below every layer that parses arguments.
"""

from __future__ import annotations

import argparse


class UsageError(Exception):
    pass


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one ``error:`` line (exit 2), like every other bad input."""

    def error(self, message: str):  # noqa: D401 - argparse API
        raise UsageError(f"{message} (see `{self.prog} --help`)")


MAX_INT = 2**63 - 1  # SQLite's INTEGER and numpy's seeds stop here


def int_in(low: int, high: int = MAX_INT):
    """An argparse type: an integer from ``low`` to ``high`` (ASCII digits; '٣' and '1e3' are refused)."""
    def parse(text: str) -> int:
        t = text.strip()
        body = t[1:] if t[:1] in "+-" else t
        if not (body.isascii() and body.isdigit() and len(body) <= 19) or not low <= int(t) <= high:
            raise argparse.ArgumentTypeError(f"expected an integer from {low:,} to {high:,}, got {text[:40]!r}")
        return int(t)
    parse.__name__ = "integer"  # argparse names the type in its messages
    return parse


MAX_BUDGET = 10**12  # evaluations an experiment's option takes: beyond it a run would not end in a lifetime
