"""Distribution-free confidence intervals for time ratios, from two samples of window times: what a
comparison of two datasets (``pipeline.compare``) and the published page's speedups both state.

A timing sample here is the per-iteration window times of one execution's slowest rank: five
windows at the report's scale, more where a scale asks for them. The interval for the ratio
NEW / BASE inverts the Mann-Whitney rank test on log times (the Hodges-Lehmann interval of the log
shift): it is exact for any continuous distribution of window times, needs no seed and no
resampling, and at five windows per side still has its stated coverage, which a bootstrap of
medians of five does not.

Written here because no library offers either piece: scipy's exact Mann-Whitney test
(``scipy.stats.mannwhitneyu``) gives the p-value of two samples, not the count distribution whose
quantile sets the interval's ends, and no well-kept library gives the Hodges-Lehmann interval. The
tests check both against brute force and against scipy's exact test.
"""

from __future__ import annotations

from functools import cache

import numpy as np

CONFIDENCE = 0.95
Interval = tuple[float, float]


@cache
def rank_sum_distribution(n: int, m: int) -> np.ndarray:
    """P(U = u), u = 0 .. n*m, for the Mann-Whitney count U (pairs with the second sample's value
    above the first's) of n + m distinct values in random order: the coefficients of the Gaussian
    binomial [n+m choose n]_q over C(n+m, n), built as prod_i (1 - q^(m+i)) / (1 - q^i) in float64
    (each factor's division a cumulative sum along the residues mod i; exact integers while the
    counts stay below 2^53, i.e. up to about 27 windows a side, a relative 1e-15 beyond)."""
    if n < 1 or m < 1:
        raise ValueError(f"both samples need at least one value, got {n} and {m}")
    coefficients = np.ones(1)
    for i in range(1, n + 1):
        grown = np.zeros(coefficients.size + m + i)
        grown[: coefficients.size] = coefficients
        grown[m + i :] -= coefficients  # times (1 - q^(m+i))
        rows = -(-grown.size // i)
        padded = np.zeros(rows * i)
        padded[: grown.size] = grown
        coefficients = np.cumsum(padded.reshape(rows, i), axis=0).ravel()[: i * m + 1]  # over (1 - q^i)
        coefficients /= coefficients.max()  # keep the scale finite for any n, m
    return coefficients / coefficients.sum()


@cache
def critical_count(n: int, m: int, confidence: float) -> int:
    """Largest k with P(U <= k - 1) <= (1 - confidence) / 2 under no change: the interval's ends are
    the k-th smallest and k-th largest of the n*m pairwise differences (0: no interval at this
    confidence, e.g. three windows per side at 95%)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be between 0 and 1, got {confidence!r}")
    tail = (1 - confidence) / 2
    below = np.cumsum(rank_sum_distribution(n, m))
    return int(np.searchsorted(below, tail * (1 + 1e-12), side="right"))


def ratio_interval(base: np.ndarray, new: np.ndarray, confidence: float = CONFIDENCE) -> Interval | None:
    """Interval for the ratio of NEW's to BASE's typical window time, at ``confidence``, or ``None``
    where the samples are too few for one. Both samples must be positive."""
    log_base, log_new = _logs(base, "base"), _logs(new, "new")
    k = critical_count(log_base.size, log_new.size, confidence)
    if k == 0:
        return None
    differences = np.sort(np.subtract.outer(log_new, log_base), axis=None)
    return float(np.exp(differences[k - 1])), float(np.exp(differences[-k]))


def ratio_of_ratios_interval(
    top: tuple[np.ndarray, np.ndarray], bottom: tuple[np.ndarray, np.ndarray], confidence: float = CONFIDENCE
) -> Interval | None:
    """Interval for (top NEW / top BASE) / (bottom NEW / bottom BASE), each sample given as (BASE,
    NEW): e.g. a pair's speedup change, MoK's ratio over Dist-MoE's. The two ratio intervals are
    taken at 1 - (1 - confidence) / 2 each and combined end to end, so by the union bound the result
    covers with at least ``confidence`` (conservative, still exact-free of any distribution)."""
    each = 1 - (1 - confidence) / 2
    upper, lower = ratio_interval(*top, confidence=each), ratio_interval(*bottom, confidence=each)
    if upper is None or lower is None:
        return None
    return upper[0] / lower[1], upper[1] / lower[0]


def _logs(sample: np.ndarray, name: str) -> np.ndarray:
    values = np.asarray(sample, dtype=np.float64).ravel()
    if values.size == 0:
        raise ValueError(f"the {name} sample is empty; at least one window is required")
    if not (np.isfinite(values) & (values > 0)).all():
        raise ValueError(f"the {name} sample must be positive and finite, got {values[:5].tolist()}")
    return np.log(values)
