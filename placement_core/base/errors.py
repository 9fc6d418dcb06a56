"""One exception type for everything a user can get wrong.

Every loader, validator and CLI command raises :class:`InputError` with the
place the problem was found (file, field) and what to do about it, so the CLI
and the dashboard can show one readable line instead of a traceback.
"""

from __future__ import annotations

import difflib
import math
import re
from typing import Any

# Characters that must never reach a terminal raw: C0/C1 controls and DEL (ANSI escapes start with ESC),
# lone surrogates (undecodable bytes; printing them fails), line and paragraph separators, bidi overrides.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff\u2028\u2029\u200e\u200f\u061c"
                     "\u202a-\u202e\u2066-\u2069]")
# How much of one user string an error message shows; the rest is counted, not printed.
MAX_SHOWN = 500


def escape(text: str) -> str:
    """``text`` with every unsafe character written as ``repr`` would (``\\x1b``, ``\\n``, ``\\ud800``)."""
    return _UNSAFE.sub(_escape_char, text) if _UNSAFE.search(text) else text


def _escape_char(m: re.Match) -> str:
    return repr(m.group())[1:-1]


def shown(text: Any, limit: int = MAX_SHOWN) -> str:
    """A user string fit for one line of a terminal: escaped, and cut after ``limit`` characters
    with an ellipsis that says how many more there were (a 20,000-op cycle is not a 189,000-character line)."""
    text = str(text)
    if len(text) <= limit and not _UNSAFE.search(text):
        return text
    out, used = [], 0
    for i, ch in enumerate(text):
        piece = escape(ch)
        if used + len(piece) > limit:
            return "".join(out) + f"... ({len(text) - i:,} more characters)"
        out.append(piece)
        used += len(piece)
    return "".join(out)


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
        """One line: every part escaped (no raw terminal control) and capped (paths and fields at 200
        characters, the problem and the fix at 500)."""
        where = ": ".join(shown(p, 200) for p in (self.source, self.field) if p)
        problem = shown(self.problem)
        text = f"{where}: {problem}" if where else problem
        if self.fix:
            text = f"{text.rstrip('.')}. {shown(self.fix)}"
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
                   allow_zero: bool = True, maximum: float = MAX_QUANTITY, minimum: float | None = None) -> float:
    """A finite, non-negative (or positive) number; booleans are not numbers.

    ``minimum`` bounds a positive number from below: rates and sizes that divide (FLOP/s, bytes/s) must
    not be subnormal (5e-324 turned every time into inf or NaN).
    """
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
    if minimum is not None and 0 < value < minimum:
        raise InputError(f"is implausibly small ({value!r} < {_fmt(minimum)})", source=source, field=field,
                         fix="Check the unit: sizes are bytes, times seconds, rates per second")
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
