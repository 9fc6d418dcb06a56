"""One exception type for everything a user can get wrong.

Every loader, validator and CLI command raises :class:`InputError` with the
place the problem was found (file, field) and what to do about it, so the CLI
and the dashboard can show one readable line instead of a traceback.
"""

from __future__ import annotations

import difflib
import math
from typing import Any


class InputError(ValueError):
    """Bad user input: names where (``source``, ``field``), what, and the fix."""

    def __init__(self, problem: str, *, source: str | None = None,
                 field: str | None = None, fix: str | None = None):
        self.problem = problem
        self.source = source
        self.field = field
        self.fix = fix
        super().__init__(self.message)

    @property
    def message(self) -> str:
        where = ": ".join(p for p in (self.source, self.field) if p)
        text = f"{where}: {self.problem}" if where else self.problem
        if self.fix:
            text = f"{text.rstrip('.')}. {self.fix}"
        return text

    def __str__(self) -> str:  # pragma: no cover - trivial
        return self.message


def require_mapping(value: Any, *, source: str | None, field: str | None, what: str) -> dict:
    if not isinstance(value, dict):
        raise InputError(f"expected {what} (a JSON object), got {_type_name(value)}",
                         source=source, field=field)
    return value


def require_list(value: Any, *, source: str | None, field: str, what: str) -> list:
    if not isinstance(value, list):
        raise InputError(f"expected {what} (a JSON list), got {_type_name(value)}",
                         source=source, field=field)
    return value


def require_name(value: Any, *, source: str | None, field: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"expected a non-empty name, got {_describe(value)}",
                         source=source, field=field, fix="Give it a non-empty string")
    if len(value) > 512:
        raise InputError(f"name is {len(value)} characters long", source=source, field=field,
                         fix="Use a name of at most 512 characters")
    return value


def check_fields(raw: dict, allowed: set[str], *, source: str | None, at: str) -> None:
    """Reject unknown keys: a typo like ``fwd_flop`` must not silently become 0."""
    for key in raw:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), sorted(allowed), n=1)
            fix = f"Did you mean {close[0]!r}?" if close else "Allowed: " + ", ".join(sorted(allowed))
            raise InputError(f"unknown field {key!r}", source=source, field=at, fix=fix)


# Sizes above this are certainly a unit mistake (an exabyte of activations,
# 10^24 FLOPs for one op); rejecting them keeps the simulator's floats sane.
MAX_QUANTITY = 1e24


def require_number(value: Any, *, source: str | None, field: str, positive: bool = False,
                   allow_zero: bool = True, maximum: float = MAX_QUANTITY) -> float:
    """A finite, non-negative (or positive) number; booleans are not numbers."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"expected a number, got {_describe(value)}", source=source, field=field,
                         fix="Write a plain JSON number")
    if isinstance(value, int) and abs(value) > 1e300:  # beyond a float (~1.8e308): float() would overflow
        if value < 0:
            raise InputError(f"must not be negative, got {_fmt_huge(value)}", source=source, field=field,
                             fix="Give a value of zero or more")
        raise InputError(f"is implausibly large ({_fmt_huge(value)} > {_fmt(maximum)})", source=source,
                         field=field, fix="Check the unit: sizes are bytes, times seconds, rates per second")
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise InputError(f"expected a finite number, got {value}", source=source, field=field,
                         fix="Write a finite JSON number")
    if positive and value <= 0:
        raise InputError(f"must be positive, got {_fmt(value)}", source=source, field=field,
                         fix="Give a value greater than zero")
    if value < 0 or (not allow_zero and value == 0):
        raise InputError(f"must not be negative, got {_fmt(value)}", source=source, field=field,
                         fix="Give a value of zero or more")
    if value > maximum:
        raise InputError(f"is implausibly large ({_fmt(value)} > {_fmt(maximum)})", source=source,
                         field=field, fix="Check the unit: sizes are bytes, times seconds, rates per second")
    return value


def _fmt(value: float) -> str:
    return f"{value:g}"


def _fmt_huge(value: int) -> str:
    """An integer too large for a float, as its order of magnitude (never its thousands of digits)."""
    digits = int(abs(value).bit_length() * 0.30103)  # log10(2): within one of the true digit count
    return f"about {'-' if value < 0 else ''}1e{digits}"


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def _describe(value: Any) -> str:
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {shown!r}"
    return _type_name(value)
