"""The comparison's statistics against independent references: brute-force enumeration of rank orders,
scipy's exact Mann-Whitney test (inverted numerically), coverage on fresh random samples, and the
slowest rank's samples against a naive per-rank median."""

from __future__ import annotations

import itertools
import math
import statistics
from statistics import NormalDist

import numpy as np
import pytest
from scipy import stats

from pipeline.compare.classify import (
    bound,
    direction,
    run_to_run_sigma,
    speedup_change,
    time_change,
)
from pipeline.compare.statistics import (
    critical_count,
    rank_sum_counts,
    ratio_interval,
    ratio_of_ratios_interval,
)
from pipeline.metrics import slowest_rank_ms, slowest_rank_samples


def _brute_force_counts(n: int, m: int) -> list[int]:
    """U over every placement of the n first-sample values among n + m ranks."""
    counts = [0] * (n * m + 1)
    for first in itertools.combinations(range(n + m), n):
        second = [r for r in range(n + m) if r not in first]
        counts[sum(s > f for f in first for s in second)] += 1
    return counts


@pytest.mark.parametrize("n,m", [(1, 1), (1, 4), (2, 3), (3, 2), (4, 5), (5, 5), (3, 7), (6, 6)])
def test_rank_sum_counts_match_enumeration(n: int, m: int) -> None:
    assert list(rank_sum_counts(n, m)) == _brute_force_counts(n, m)


def test_critical_counts_match_published_tables() -> None:
    # Two-sided 5% critical values of U (reject when U <= u): n = m = 4: 0, 5: 2, 6: 5, 10: 23, 20: 127.
    for n, u in ((4, 0), (5, 2), (6, 5), (10, 23), (20, 127)):
        assert critical_count(n, n, 0.95) == u + 1
    assert critical_count(3, 3, 0.95) == 0  # 1/20 per tail: no 95% interval from three windows
    assert critical_count(5, 5, 0.99) == 1


def test_interval_inverts_scipys_exact_test() -> None:
    """The ends are where scipy's exact two-sided Mann-Whitney test of NEW / c against BASE stops
    rejecting: just inside them it accepts, just outside it rejects (at the interval's exact level)."""
    rng = np.random.default_rng()
    for n, m in ((5, 5), (4, 6), (8, 5)):
        base, new = rng.lognormal(0, 0.3, n), rng.lognormal(0.2, 0.3, m)
        low, high = ratio_interval(base, new)
        k = critical_count(n, m, 0.95)
        counts = rank_sum_counts(n, m)
        level = 2 * sum(counts[:k]) / sum(counts)  # the exact size of the test the interval inverts

        for end in (low, high):
            inside, outside = (end * 1.0001, end / 1.0001) if end == low else (end / 1.0001, end * 1.0001)
            assert _p_value(base, new / inside) > level and _p_value(base, new / outside) <= level + 1e-12


def _p_value(base: np.ndarray, new: np.ndarray) -> float:
    return stats.mannwhitneyu(new, base, alternative="two-sided", method="exact").pvalue


@pytest.mark.parametrize("windows", [5, 8])
def test_interval_covers_the_true_ratio(windows: int) -> None:
    rng = np.random.default_rng()
    trials, covered = 3000, 0
    for _ in range(trials):
        sigma, ratio = rng.uniform(0.02, 0.5), rng.uniform(0.5, 2.0)
        base = rng.lognormal(1.0, sigma, windows)
        new = ratio * rng.lognormal(1.0, sigma, windows)
        low, high = ratio_interval(base, new)
        covered += low <= ratio <= high
    counts = rank_sum_counts(windows, windows)
    exact = 1 - 2 * sum(counts[: critical_count(windows, windows, 0.95)]) / sum(counts)
    assert exact >= 0.95
    assert abs(covered / trials - exact) < 4 * math.sqrt(exact * (1 - exact) / trials)


def test_ratio_of_ratios_interval_covers_at_least_the_confidence() -> None:
    rng = np.random.default_rng()
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


def test_identical_samples_hold_one_and_shifted_ones_do_not() -> None:
    rng = np.random.default_rng()
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
def test_slowest_rank_samples_are_the_naive_slowest_ranks_windows(ranks: int, windows: int) -> None:
    rng = np.random.default_rng()
    rank = np.repeat(np.arange(ranks), windows)
    window_ms = rng.lognormal(3.0, 0.4, rank.size)
    iterations = np.full(rank.size, 30)
    order = rng.permutation(rank.size)  # rows arrive in any order
    rank, window_ms = rank[order], window_ms[order]
    per_rank = {r: [w / 30 for q, w in zip(rank, window_ms, strict=True) if q == r] for r in range(ranks)}
    medians = {r: statistics.median(v) for r, v in per_rank.items()}
    slowest = max(medians, key=lambda r: (medians[r], -r))
    samples = slowest_rank_samples(rank, window_ms, iterations)
    assert samples.tolist() == pytest.approx(sorted(per_rank[slowest]), rel=1e-15)
    assert statistics.median(samples.tolist()) == slowest_rank_ms(rank, window_ms, iterations)


def test_slowest_rank_ties_go_to_the_lowest_rank() -> None:
    rank = np.array([0, 0, 0, 1, 1, 1])
    window = np.array([1.0, 2.0, 3.0, 2.0, 2.0, 2.5])  # both medians 2.0
    assert slowest_rank_samples(rank, window, np.ones(6, int)).tolist() == [1.0, 2.0, 3.0]


def test_run_to_run_sigma_is_a_robust_normal_scale() -> None:
    rng = np.random.default_rng()
    values = rng.normal(0.1, 0.15, 4000)
    values[:200] += 1.0  # 5% real changes move it by about 7% (the standard deviation by 70%)
    assert run_to_run_sigma(values) == pytest.approx(0.15, rel=0.15)
    assert run_to_run_sigma(values[200:]) == pytest.approx(0.15, rel=0.06)
    assert run_to_run_sigma(np.zeros(8)) == 0.0
    assert run_to_run_sigma(rng.normal(0, 1, 7)) is None


def test_bound_is_the_threshold_or_the_bonferroni_scatter() -> None:
    assert bound(0.05, None, 300) == 1.05 and bound(0.05, 0.0, 300) == 1.05
    assert bound(0.05, 0.1, 1) == pytest.approx(math.exp(1.959964 * 0.1), rel=1e-6)
    assert bound(0.05, 0.1, 25) == pytest.approx(math.exp(3.090232 * 0.1), rel=1e-6)  # 0.1% per tail
    z = NormalDist().inv_cdf(1 - 0.05 / 660)
    assert bound(0.05, 0.1, 330, math.sqrt(2)) == pytest.approx(math.exp(z * 0.1 * math.sqrt(2)))
    assert bound(0.5, 0.01, 330) == 1.5
    with pytest.raises(ValueError, match="threshold must be a finite number >= 0 .* got -0.1"):
        bound(-0.1, None, 1)


def test_a_change_needs_both_size_and_significance() -> None:
    assert direction(1.3, (1.1, 1.5), 1.05) == 1 and time_change(1.3, (1.1, 1.5), 1.05) == "slower"
    assert time_change(1.3, (0.9, 1.5), 1.05) == "unchanged"  # large, but the interval holds 1
    assert time_change(1.03, (1.01, 1.05), 1.05) == "unchanged"  # significant, but small
    assert time_change(1.3, (1.1, 1.5), 1.4) == "unchanged"  # inside the run-to-run bound
    assert time_change(1 / 1.3, (0.7, 0.9), 1.05) == "faster"
    assert time_change(0.96, (0.9, 0.99), 1.05) == "unchanged"  # 1 / 0.96 < 1.05
    assert time_change(2.0, None, 1.05) == "unchanged"  # no interval: never a change
    assert speedup_change(1.3, (1.1, 1.5), 1.05) == "higher"
    assert speedup_change(0.7, (0.6, 0.8), 1.05) == "lower"
