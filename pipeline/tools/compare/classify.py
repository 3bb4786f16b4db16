"""What counts as a change, and the tests behind it.

A ratio is a change (``slower`` / ``faster`` for times, ``higher`` / ``lower`` for speedups) only
when all three hold:

- it is beyond ``1 + threshold`` (below ``1 / (1 + threshold)``): the smallest change worth
  reporting, 5% by default;
- it is significant against its own noise (``pipeline/tools/compare/noise.py``: its windows plus its
  stratum's run-to-run scatter, a t test with the noise's degrees of freedom), after the family's
  multiplicity control (``pipeline/tools/compare/family.py``);
- its windows alone tell the two sides apart: the exact rank interval of the windows
  (``pipeline/base/intervals.py``) excludes 1. Exact for independent windows of any
  distribution, it cannot see run-to-run noise, so it is a guard, not the test.

The bound a ratio had to pass is the larger of ``1 + threshold`` and what its noise allows at the
family's strictest level (Holm's and Benjamini-Hochberg's first step: ``ALPHA`` / the family size,
two-sided), so a change beyond it with a significant window interval is always flagged. A time
whose noise allows no finite ratio (in simulation, CPU-like t3 windows once gave a time sigma 21 in
log units at 2.5 df) gets the largest float as its bound and interval end, which still publishes.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence

import numpy as np

from pipeline.base.intervals import Interval
from pipeline.tools.compare.family import ALPHA
from pipeline.tools.compare.special import t_isf, t_sf

DEFAULT_THRESHOLD = 0.05
TIME_CLASSES = ("slower", "faster", "unchanged")  # ratios of times: above 1 is worse
SPEEDUP_CLASSES = ("higher", "lower", "unchanged")  # ratios of MoK / Dist-MoE speedups
_LOG_MAX = math.log(sys.float_info.max)  # exp of more overflows


def p_values(log_ratios: Sequence[float], var: Sequence[float], df: Sequence[float]) -> list[float]:
    """Two-sided p-values of log ratios against 0 (no change), given each one's noise variance and
    degrees of freedom (a ratio without noise: 1 if it is exactly 1, else 0)."""
    d, v, f = (np.asarray(a, np.float64) for a in (log_ratios, var, df))
    noisy = v > 0
    t = np.abs(d) / np.sqrt(np.where(noisy, v, 1.0))
    p = np.where(noisy, 2 * t_sf(t, np.where(noisy, f, 1.0)), np.where(d == 0, 1.0, 0.0))
    return np.minimum(p, 1.0).tolist()


def noise_intervals(
    log_ratios: Sequence[float], var: Sequence[float], df: Sequence[float], confidence: float
) -> list[Interval]:
    """Each ratio's interval at ``confidence`` from its noise (not adjusted for multiplicity)."""
    d, v = np.asarray(log_ratios, np.float64), np.asarray(var, np.float64)
    half = t_isf(np.full(d.size, (1 - confidence) / 2), np.asarray(df, np.float64)) * np.sqrt(v)
    return list(zip(np.exp(d - half).tolist(), np.exp(np.minimum(d + half, _LOG_MAX)).tolist(), strict=True))


def bounds(
    threshold: float, var: Sequence[float], df: Sequence[float], tests: int
) -> list[tuple[float, str]]:
    """Per ratio, the smallest ratio (>= 1) that can count among ``tests``, and which term set it:
    ``threshold``, or ``noise`` (the two-sided t quantile at ALPHA / tests times its noise sigma)."""
    check_threshold(threshold)
    v = np.asarray(var, np.float64)
    q = t_isf(np.full(v.size, ALPHA / (2 * max(1, tests))), np.asarray(df, np.float64))
    noise = q * np.sqrt(v)
    least = math.log1p(threshold)
    return [
        (math.exp(min(n, _LOG_MAX)), "noise") if n > least else (1 + threshold, "threshold")
        for n in noise.tolist()
    ]


def direction(ratio: float, p_adjusted: float | None, window: Interval | None, threshold: float) -> int:
    """+1 (a significant increase beyond 1 + threshold), -1 (a decrease below its inverse), 0."""
    if p_adjusted is None or window is None or p_adjusted > ALPHA:
        return 0
    low, high = window
    if ratio > 1 + threshold and low > 1:
        return 1
    if ratio < 1 / (1 + threshold) and high < 1:
        return -1
    return 0


def time_change(ratio: float, p_adjusted: float | None, window: Interval | None, threshold: float) -> str:
    """``slower`` / ``faster`` / ``unchanged`` for a NEW / BASE ratio of times."""
    return _label(TIME_CLASSES, direction(ratio, p_adjusted, window, threshold))


def speedup_change(ratio: float, p_adjusted: float | None, window: Interval | None, threshold: float) -> str:
    """``higher`` / ``lower`` / ``unchanged`` for a NEW / BASE ratio of speedups."""
    return _label(SPEEDUP_CLASSES, direction(ratio, p_adjusted, window, threshold))


def check_threshold(threshold: float) -> None:
    if not (isinstance(threshold, int | float) and math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold must be a finite number >= 0 (a fraction, 0.05 = 5%), got {threshold!r}")


def _label(classes: tuple[str, str, str], sign: int) -> str:
    """(increase, decrease, neither) names picked by the sign of a change."""
    return classes[{1: 0, -1: 1, 0: 2}[sign]]
