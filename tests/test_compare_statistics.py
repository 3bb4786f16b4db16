"""The comparison's statistics against independent references: brute-force enumeration of rank orders,
scipy's exact Mann-Whitney test (inverted numerically), coverage on the random samples of fixed seeds
(whose outcome each test gives; the comparison's error rates over thousands of draws are the Monte
Carlo study of ``benchmarks/compare_error_rates.py``), the slowest rank's samples against a naive
per-rank median, and the tests of a ratio against scipy's t."""

from __future__ import annotations

import itertools
import math
import statistics

import numpy as np
import pytest
from scipy import stats

from pipeline.base.intervals import (
    critical_count,
    rank_sum_distribution,
    ratio_interval,
    ratio_of_ratios_interval,
)
from pipeline.base.metrics import slowest_rank
from pipeline.tools.compare.classify import (
    bounds,
    direction,
    noise_intervals,
    p_values,
    speedup_change,
    time_change,
)


def _brute_force_counts(n: int, m: int) -> list[int]:
    """U over every placement of the n first-sample values among n + m ranks."""
    counts = [0] * (n * m + 1)
    for first in itertools.combinations(range(n + m), n):
        second = [r for r in range(n + m) if r not in first]
        counts[sum(s > f for f in first for s in second)] += 1
    return counts


@pytest.mark.parametrize("n,m", [(1, 1), (1, 4), (2, 3), (3, 2), (4, 5), (5, 5), (3, 7), (6, 6)])
def test_rank_sum_distribution_matches_enumeration(n: int, m: int) -> None:
    counts = rank_sum_distribution(n, m) * math.comb(n + m, n)
    assert counts.tolist() == pytest.approx(_brute_force_counts(n, m), rel=1e-13, abs=1e-9)


@pytest.mark.parametrize("n,m", [(9, 9), (20, 20), (5, 30), (23, 41), (60, 60)])
def test_rank_sum_distribution_matches_scipys_exact_test(n: int, m: int, rng: np.random.Generator) -> None:
    """P(U <= u) against scipy's exact two-sided p-value (2 P(U <= u) below the mean) at counts
    across the lower half, the 2.5% tail included; samples built to have exactly that count."""
    below = np.cumsum(rank_sum_distribution(n, m))
    for u in sorted({*rng.integers(0, n * m // 2, 6).tolist(), critical_count(n, m, 0.95)}):
        first, second = _samples_with_count(n, m, u)
        p = stats.mannwhitneyu(second, first, alternative="two-sided", method="exact").pvalue
        assert 2 * below[u] == pytest.approx(p, rel=1e-9, abs=1e-300)


def _samples_with_count(n: int, m: int, u: int) -> tuple[np.ndarray, np.ndarray]:
    """First sample 0 .. n-1 shifted so that exactly u (second, first) pairs have second > first."""
    first = np.arange(n, dtype=float) * (m + 1)
    second = np.empty(m)
    remaining = u
    for j in range(m):  # each second-sample value beats k first-sample values, k <= n
        k = min(n, remaining)
        second[j] = first[k - 1] + 0.5 if k > 0 else -1.0
        remaining -= k
    assert remaining == 0
    return first, second


def test_critical_counts_match_published_tables() -> None:
    # Two-sided 5% critical values of U (reject when U <= u): n = m = 4: 0, 5: 2, 6: 5, 10: 23, 20: 127.
    for n, u in ((4, 0), (5, 2), (6, 5), (10, 23), (20, 127)):
        assert critical_count(n, n, 0.95) == u + 1
    assert critical_count(3, 3, 0.95) == 0  # 1/20 per tail: no 95% interval from three windows
    assert critical_count(5, 5, 0.99) == 1


def test_interval_inverts_scipys_exact_test(rng: np.random.Generator) -> None:
    """The ends are where scipy's exact two-sided Mann-Whitney test of NEW / c against BASE stops
    rejecting: just inside them it accepts, just outside it rejects (at the interval's exact level)."""
    for n, m in ((5, 5), (4, 6), (8, 5)):
        base, new = rng.lognormal(0, 0.3, n), rng.lognormal(0.2, 0.3, m)
        low, high = ratio_interval(base, new)
        k = critical_count(n, m, 0.95)
        level = 2 * float(np.sum(rank_sum_distribution(n, m)[:k]))  # the exact size of the test inverted

        for end in (low, high):
            inside, outside = (end * 1.0001, end / 1.0001) if end == low else (end / 1.0001, end * 1.0001)
            assert _p_value(base, new / inside) > level and _p_value(base, new / outside) <= level + 1e-12


def _p_value(base: np.ndarray, new: np.ndarray) -> float:
    return stats.mannwhitneyu(new, base, alternative="two-sided", method="exact").pvalue


@pytest.mark.parametrize("windows, seeded", [(5, 2895), (8, 2858)])
def test_interval_covers_the_true_ratio(windows: int, seeded: int) -> None:
    """The property: the interval covers the true ratio at its exact level (96.8% at five windows a
    side, 95.0% at eight), within 4 binomial sds over 3,000 samples. Seeds (8, windows): it covers
    ``seeded`` of them, 1.0 sd under the level at five, 0.6 over at eight."""
    rng = np.random.default_rng((8, windows))
    trials, covered = 3000, 0
    for _ in range(trials):
        sigma, ratio = rng.uniform(0.02, 0.5), rng.uniform(0.5, 2.0)
        base = rng.lognormal(1.0, sigma, windows)
        new = ratio * rng.lognormal(1.0, sigma, windows)
        low, high = ratio_interval(base, new)
        covered += low <= ratio <= high
    exact = 1 - 2 * float(
        np.sum(rank_sum_distribution(windows, windows)[: critical_count(windows, windows, 0.95)])
    )
    assert exact >= 0.95
    assert abs(covered / trials - exact) < 4 * math.sqrt(exact * (1 - exact) / trials)
    assert covered == seeded


def test_ratio_of_ratios_interval_covers_at_least_the_confidence() -> None:
    """The property: the union-bound interval of a ratio of ratios covers the truth at least 95% of the
    time (less 3 binomial sds of 2,000 samples); it is conservative. Seed 9: all 2,000."""
    rng = np.random.default_rng(9)
    trials, covered = 2000, 0
    for _ in range(trials):
        sigma = rng.uniform(0.02, 0.4)
        top, bottom = rng.uniform(0.5, 2.0, 2)
        samples = [rng.lognormal(0.0, sigma, 5) for _ in range(4)]
        low, high = ratio_of_ratios_interval(
            (samples[0], top * samples[1]), (samples[2], bottom * samples[3])
        )
        covered += low <= top / bottom <= high
    assert covered / trials >= 0.95 - 3 * math.sqrt(0.95 * 0.05 / trials)
    assert covered == 2000


def test_identical_samples_hold_one_and_shifted_ones_do_not(rng: np.random.Generator) -> None:
    base = rng.lognormal(0, 0.2, 5)
    low, high = ratio_interval(base, base.copy())
    assert low < 1 < high
    new = 1.3 * base
    low, high = ratio_interval(base, new)
    inversions = int(sum(n <= b for n in new for b in base))  # pairs that speak against "slower"
    assert bool(low > 1) is (inversions < critical_count(5, 5, 0.95))


def test_too_few_windows_and_bad_samples() -> None:
    assert ratio_interval(np.ones(3), np.ones(3) * 2) is None
    assert ratio_of_ratios_interval((np.ones(3), np.ones(3)), (np.ones(5), np.ones(5))) is None
    with pytest.raises(ValueError, match="the new sample must be positive and finite, got \\[1.0, -2.0\\]"):
        ratio_interval(np.ones(5), np.array([1.0, -2.0]))
    with pytest.raises(ValueError, match="the base sample is empty"):
        ratio_interval(np.array([]), np.ones(5))
    with pytest.raises(ValueError, match="confidence must be between 0 and 1, got 1.5"):
        ratio_interval(np.ones(5), np.ones(5), confidence=1.5)


@pytest.mark.parametrize("ranks,windows", [(1, 5), (2, 5), (8, 4), (64, 5)])
def test_slowest_rank_windows_are_the_naive_slowest_ranks(
    ranks: int, windows: int, rng: np.random.Generator
) -> None:
    rank = np.repeat(np.arange(ranks), windows)
    window_ms = rng.lognormal(3.0, 0.4, rank.size)
    iterations = np.full(rank.size, 30)
    order = rng.permutation(rank.size)  # rows arrive in any order
    rank, window_ms = rank[order], window_ms[order]
    per_rank = {r: [w / 30 for q, w in zip(rank, window_ms, strict=True) if q == r] for r in range(ranks)}
    medians = {r: statistics.median(v) for r, v in per_rank.items()}
    slowest = max(medians, key=lambda r: (medians[r], -r))
    reduced = slowest_rank(rank, window_ms, iterations)
    assert sorted(reduced.windows.tolist()) == pytest.approx(sorted(per_rank[slowest]), rel=1e-15)
    assert statistics.median(reduced.windows.tolist()) == reduced.ms
    assert reduced.spread == (min(per_rank[slowest]), max(per_rank[slowest]))


def test_slowest_rank_ties_go_to_the_lowest_rank() -> None:
    rank = np.array([0, 0, 0, 1, 1, 1])
    window = np.array([1.0, 2.0, 3.0, 2.0, 2.0, 2.5])  # both medians 2.0
    assert slowest_rank(rank, window, np.ones(6, int)).windows.tolist() == [1.0, 2.0, 3.0]


def test_slowest_rank_windows_keep_the_row_order(rng: np.random.Generator) -> None:
    rank = np.repeat([0, 1, 2], 7)
    window_ms = rng.lognormal(2.0, 0.3, rank.size)
    window_ms[rank == 1] *= 3  # rank 1 is the slowest
    windows = slowest_rank(rank, window_ms, np.full(rank.size, 4)).windows
    assert windows.tolist() == (window_ms[7:14] / 4).tolist()  # as listed, not sorted


def test_p_values_and_intervals_are_scipys_t(rng: np.random.Generator) -> None:
    d = rng.normal(0, 0.2, 200)
    var = rng.uniform(1e-4, 0.05, 200)
    df = np.exp(rng.uniform(0, np.log(1000), 200))
    t = np.abs(d) / np.sqrt(var)
    assert p_values(d, var, df) == pytest.approx(2 * stats.t.sf(t, df), rel=1e-9, abs=1e-300)
    intervals = noise_intervals(d, var, df, 0.95)
    half = stats.t.isf(0.025, df) * np.sqrt(var)
    assert [i[0] for i in intervals] == pytest.approx(np.exp(d - half), rel=1e-9)
    assert [i[1] for i in intervals] == pytest.approx(np.exp(d + half), rel=1e-9)
    assert p_values([0.0, 0.1], [0.0, 0.0], [5, 5]) == [1.0, 0.0]  # no noise: only exactly 1 is no change


def test_bounds_are_the_threshold_or_the_first_steps_noise() -> None:
    var, df = [0.0, 1e-6, 0.01, 0.04], [10.0, 30.0, 12.0, 1000.0]
    out = bounds(0.05, var, df, 290)
    q = stats.t.isf(0.05 / 580, df)  # two-sided 5% / 290
    assert out[0] == (1.05, "threshold") and out[1] == (1.05, "threshold")  # 1e-3 x q < log 1.05
    assert out[2][1] == "noise" and out[2][0] == pytest.approx(math.exp(q[2] * 0.1), rel=1e-9)
    assert out[3][0] == pytest.approx(math.exp(q[3] * 0.2), rel=1e-9)
    assert bounds(0.5, [0.001], [12.0], 290) == [(1.5, "threshold")]
    with pytest.raises(ValueError, match="threshold must be a finite number >= 0 .* got -0.1"):
        bounds(-0.1, [0.01], [3.0], 1)


def test_noise_that_allows_no_finite_ratio_gives_the_largest_float_not_an_overflow() -> None:
    """A time whose noise sigma times its t quantile passes log(float max) (sigma 21 in log units at
    2.5 degrees of freedom, once seen): its bound and its interval's upper end are the largest float,
    which JSON can hold, and the lower end stays the exact exp (the reader bounds window times, so
    only such a sigma from few windows can bring this about)."""
    import sys

    (bound,) = bounds(0.05, [21.0**2], [2.5], 290)
    assert bound == (pytest.approx(sys.float_info.max, rel=1e-12), "noise")
    ((low, high),) = noise_intervals([0.3], [300.0**2], [2.5], 0.95)  # the 95% quantile needs more
    half = stats.t.isf(0.025, 2.5) * 300.0
    assert high == pytest.approx(sys.float_info.max, rel=1e-12) and math.isfinite(high)
    assert low == pytest.approx(math.exp(0.3 - half), rel=1e-9)


def test_a_change_needs_size_significance_and_its_windows() -> None:
    window = (1.1, 1.5)
    assert direction(1.3, 0.01, window, 0.05) == 1 and time_change(1.3, 0.01, window, 0.05) == "slower"
    assert time_change(1.3, 0.2, window, 0.05) == "unchanged"  # not significant after the family's control
    assert time_change(1.3, 0.01, (0.9, 1.5), 0.05) == "unchanged"  # the windows alone overlap
    assert time_change(1.03, 1e-6, (1.01, 1.05), 0.05) == "unchanged"  # significant, but small
    assert time_change(1 / 1.3, 0.01, (0.7, 0.9), 0.05) == "faster"
    assert time_change(0.96, 0.001, (0.9, 0.99), 0.05) == "unchanged"  # 1 / 0.96 < 1.05
    assert time_change(2.0, None, None, 0.05) == "unchanged"  # too few windows: never a change
    assert speedup_change(1.3, 0.01, window, 0.05) == "higher"
    assert speedup_change(0.7, 0.01, (0.6, 0.8), 0.05) == "lower"
