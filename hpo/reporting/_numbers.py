"""How every command prints a measured number (four significant digits, never an exponent for a large one) and a list of trials."""

from __future__ import annotations

import math
from collections.abc import Iterable

SIGNIFICANT = 4


def number_text(value: float) -> str:
    """``0.8125``, ``3e-05``, ``12346`` (a throughput of 12,345.6 samples/s, not ``1.235e+04``), ``nan``."""
    if not math.isfinite(value):
        return str(value)
    if 10**SIGNIFICANT <= abs(value) < 1e15:  # a whole number says it in full; an exponent would hide its size
        return f"{value:.0f}"
    return f"{value:.{SIGNIFICANT}g}"


def trials_text(numbers: Iterable[int]) -> str:
    """``trial 4`` or ``trials 0, 3, 7``: trial numbers as every command names them (a bare ``0`` reads as a count)."""
    listed = list(numbers)
    return f"trial{'s' * (len(listed) != 1)} {', '.join(map(str, listed))}"
