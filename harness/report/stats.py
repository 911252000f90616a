"""The statistics every verdict and every interval cell rests on: a two-sided 95 % Student-t interval of a mean over
seeds (mean ± t(0.975, n-1) · s / sqrt(n)). Plain Python."""

from __future__ import annotations

import math

_T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042]   # two-sided 95 % quantiles of Student's t, df = 1..30 (then the normal's 1.960)


def t975(df: int) -> float:
    return _T975[df - 1] if df <= len(_T975) else 1.960


def interval(values) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of a 95 % t-interval; low = high = NaN for fewer than two values."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(xs)
    if n == 0:
        return float("nan"), float("nan"), float("nan"), 0
    mean = sum(xs) / n
    if n < 2:
        return mean, float("nan"), float("nan"), n
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t975(n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half, n
