"""What counts as a change: a ratio beyond a bound whose window interval also excludes 1.

The bound is symmetric on a log scale: with bound b, a ratio above b or below 1 / b is large enough.
It is the larger of two things:

- ``1 + threshold``: the smallest change worth reporting (5% by default);
- the run-to-run scatter of the comparison itself. Window intervals only see the noise inside one
  execution; two runs of the same sweep also differ by whatever else the machine was doing while each
  execution ran (on a shared CPU, often 15-20% per execution). That scatter is estimated from all the
  comparison's time ratios (1.4826 x their median absolute deviation, a normal sigma robust to the few
  real changes) and a change must exceed z x sigma, with z the two-sided normal quantile at 5% / the
  number of ratios tested (Bonferroni: a rerun flags nothing with about 95% probability). Identical
  runs give sigma 0, so then the threshold alone decides.

Either condition alone is not a change: a large ratio whose interval holds 1 is noise within the
execution, a significant ratio inside the bound is too small to matter or within run-to-run noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np

from pipeline.compare.statistics import Interval

DEFAULT_THRESHOLD = 0.05
FAMILY_ALPHA = 0.05  # chance that a rerun flags anything, were the run-to-run scatter normal
MIN_RATIOS = 8  # fewer ratios than this give no usable scatter estimate: the threshold alone decides
TIME_CLASSES = ("slower", "faster", "unchanged")  # ratios of times: above 1 is worse
SPEEDUP_CLASSES = ("higher", "lower", "unchanged")  # ratios of MoK / Dist-MoE speedups


def run_to_run_sigma(log_ratios: Sequence[float]) -> float | None:
    """Normal-equivalent scatter of log ratios between the two runs (1.4826 x MAD), or ``None``
    where there are fewer than ``MIN_RATIOS`` of them."""
    values = np.asarray(log_ratios, dtype=np.float64)
    if values.size < MIN_RATIOS:
        return None
    return float(1.4826 * np.median(np.abs(values - np.median(values))))


def bound(threshold: float, sigma: float | None, tests: int, scale: float = 1.0) -> float:
    """Smallest ratio (>= 1) that can count among ``tests`` ratios: 1 + threshold, raised to
    exp(z x scale x sigma) when the scatter is known. ``scale`` is the ratio's sigma in units of a
    time ratio's (sqrt(2) for a speedup ratio, which divides two time ratios)."""
    check_threshold(threshold)
    if sigma is None or tests < 1:
        return 1 + threshold
    z = NormalDist().inv_cdf(1 - FAMILY_ALPHA / (2 * tests))
    return max(1 + threshold, math.exp(z * scale * sigma))


def direction(ratio: float, interval: Interval | None, least: float) -> int:
    """+1 (a significant increase beyond ``least``), -1 (a decrease below 1 / ``least``), 0."""
    if interval is None:
        return 0
    low, high = interval
    if ratio > least and low > 1:
        return 1
    if ratio < 1 / least and high < 1:
        return -1
    return 0


def time_change(ratio: float, interval: Interval | None, least: float) -> str:
    """``slower`` / ``faster`` / ``unchanged`` for a NEW / BASE ratio of times."""
    return _label(TIME_CLASSES, direction(ratio, interval, least))


def speedup_change(ratio: float, interval: Interval | None, least: float) -> str:
    """``higher`` / ``lower`` / ``unchanged`` for a NEW / BASE ratio of speedups."""
    return _label(SPEEDUP_CLASSES, direction(ratio, interval, least))


def check_threshold(threshold: float) -> None:
    if not (isinstance(threshold, int | float) and math.isfinite(threshold) and threshold >= 0):
        raise ValueError(f"threshold must be a finite number >= 0 (a fraction, 0.05 = 5%), got {threshold!r}")


def _label(classes: tuple[str, str, str], sign: int) -> str:
    """(increase, decrease, neither) names picked by the sign of a change."""
    return classes[{1: 0, -1: 1, 0: 2}[sign]]
