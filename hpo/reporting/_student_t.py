"""Student's t: the two-sided quantile and a paired-difference interval, in plain math (no scipy).

For a whole number of degrees of freedom the t distribution's central probability has a closed
form (Abramowitz & Stegun 26.7.3-4, in theta = atan(t / sqrt(df))); the quantile is found by
bisection on it, exact to 1e-12 for every df a verdict uses.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def central_probability(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with ``df`` (a whole number >= 1) degrees of freedom."""
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 1:
        term, total = math.cos(theta), math.cos(theta) if df > 1 else 0.0
        for k in range(3, df - 1, 2):  # cos + 2/3 cos^3 + 2*4/(3*5) cos^5 + ... up to cos^(df-2)
            term *= c2 * (k - 1) / k
            total += term
        return 2 / math.pi * (theta + s * total)
    term, total = 1.0, 1.0
    for k in range(2, df - 1, 2):  # 1 + 1/2 cos^2 + 1*3/(2*4) cos^4 + ... up to cos^(df-2)
        term *= c2 * (k - 1) / k
        total += term
    return s * total


def t_quantile(confidence: float, df: int) -> float:
    """The t with P(|T| <= t) = ``confidence``: 12.706 for 95% and df 1, 2.262 for df 9."""
    if df < 1 or not 0 < confidence < 1:
        raise ValueError(f"need df >= 1 and 0 < confidence < 1, got df={df}, confidence={confidence}")
    low, high = 0.0, 1.0
    while central_probability(high, df) < confidence:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if central_probability(mid, df) < confidence else (low, mid)
        if high - low < 1e-12:
            break
    return (low + high) / 2


def paired_interval(differences: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float] | None:
    """``(mean, low, high)``: the t-interval of the mean of paired differences; ``None`` for fewer than two."""
    if len(differences) < 2:
        return None
    mean = statistics.fmean(differences)
    half = t_quantile(confidence, len(differences) - 1) * statistics.stdev(differences) / math.sqrt(len(differences))
    return mean, mean - half, mean + half
