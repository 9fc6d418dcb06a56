"""Human-readable quantities (decimal prefixes: memory GB = 1e9 bytes, as device specs and the thesis use)."""

from __future__ import annotations

import math

_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def _scaled(value: float, unit: str, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    a = abs(value)
    for factor, prefix in _PREFIXES:
        if a >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def fmt_bytes(n: float) -> str:
    """``fmt_bytes(2.5e9) == '2.5 GB'``."""
    return _scaled(float(n), "B")


def fmt_flops(n: float) -> str:
    """``fmt_flops(4.1e9) == '4.1 GFLOP'`` (a count, not a rate)."""
    return _scaled(float(n), "FLOP")


def fmt_seconds(t: float) -> str:
    """Seconds with a unit that keeps 3 significant digits readable: 0.0123 -> '12.3 ms'."""
    t = float(t)
    if math.isnan(t):
        return "–"
    if math.isinf(t):
        return "∞"
    a = abs(t)
    if a == 0:
        return "0 s"
    if a >= 1:
        return f"{t:.3g} s"
    if a >= 1e-3:
        return f"{t * 1e3:.3g} ms"
    if a >= 1e-6:
        return f"{t * 1e6:.3g} µs"
    return f"{t * 1e9:.3g} ns"
