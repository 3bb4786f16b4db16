"""The noise model of a ratio against independent references: naive window summaries, simulated
AR(1) windows (pooled dependence, the variance of a median), simulated strata (the run-to-run
component, its robustness to real changes), the Satterthwaite sum and which stratum a ratio uses.

A simulated property is checked on the draws of a fixed seed, whose outcome each test's docstring
gives (determined once), so no draw can fail it by chance; how often the comparison built on this
model flags a rerun or catches a change, over thousands of draws, is the Monte Carlo study of
``benchmarks/compare_error_rates.py``."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from scipy import stats

from pipeline.tools.compare.noise import (
    MAX_DEPENDENCE,
    MIN_STRATUM,
    Part,
    _dependence,
    combined,
    dependence,
    dependences,
    median_variance,
    ratio_noise,
    windows,
)


def _ar1(rng: np.random.Generator, count: int, n: int, rho: float) -> np.ndarray:
    """``count`` stationary AR(1) series of ``n`` values with unit variance."""
    x = np.empty((count, n))
    x[:, 0] = rng.normal(size=count)
    for t in range(1, n):
        x[:, t] = rho * x[:, t - 1] + math.sqrt(1 - rho * rho) * rng.normal(size=count)
    return x


def test_window_summaries_match_a_naive_computation(rng: np.random.Generator) -> None:
    samples = [rng.lognormal(1.0, 0.3, int(n)) for n in rng.integers(1, 30, 40)]
    for sample, summary in zip(samples, windows(samples), strict=True):
        x = [math.log(v) for v in sample]
        median, n = statistics.median(x), len(x)
        assert summary.n == n and summary.median == pytest.approx(median, rel=1e-12)
        if n < 2:
            assert summary.scale == 0.0
            continue
        scale = math.sqrt(math.pi / 2 * n / (n - 1)) * sum(abs(v - median) for v in x) / n
        assert summary.scale == pytest.approx(scale, rel=1e-12)
        z = [min(3 * scale, max(-3 * scale, v - median)) for v in x]
        mean = sum(z) / n
        successive = sum((z[i + 1] - z[i]) ** 2 for i in range(n - 1))
        assert summary.successive == pytest.approx(successive, rel=1e-10)
        assert summary.spread == pytest.approx(sum((v - mean) ** 2 for v in z), rel=1e-10)


@pytest.mark.parametrize("n", [5, 9, 40])
@pytest.mark.parametrize("rho", [0.0, 0.3, 0.6])
def test_pooled_dependence_recovers_the_autocorrelation(n: int, rho: float) -> None:
    """The pooled AR(1) coefficient of 64,000 windows is within 0.04 of rho (the estimate's sd is at
    most 0.007 over 300 draws each). Seeds (1, n, 10 rho): it misses by 0.012 at most (n 5, rho 0.3),
    and is exactly 0 (clipped) at rho 0."""
    rng = np.random.default_rng((1, n, round(rho * 10)))
    series = np.exp(0.1 * _ar1(rng, 64000 // n + 40, n, rho))
    estimate = dependence(windows(list(series)))
    assert estimate == pytest.approx(rho, abs=0.04)


def _t3_ar1(rng: np.random.Generator, count: int, n: int, rho: float) -> np.ndarray:
    """``count`` AR(1) series of ``n`` windows with t3 innovations, each x2 either way in scale."""
    e = rng.standard_t(3, size=(count, n))
    x = np.empty_like(e)
    x[:, 0] = e[:, 0]
    for t in range(1, n):
        x[:, t] = rho * x[:, t - 1] + math.sqrt(1 - rho * rho) * e[:, t]
    return np.exp(0.01 * x * np.exp(rng.uniform(-math.log(2), math.log(2), (count, 1))))


def test_jackknife_variance_of_the_dependence_matches_its_scatter() -> None:
    """The jackknife sd of a stratum's dependence matches the scatter of 300 estimates (whose own error
    is about 4%) within x1.33 either way. Seed 2: 1.040 of it."""
    rng = np.random.default_rng(2)
    estimates = [_dependence(windows(list(np.exp(0.1 * _ar1(rng, 40, 30, 0.5))))) for _ in range(300)]
    scatter = float(np.std([r for r, _ in estimates]))
    jackknife = math.sqrt(float(np.mean([v for _, v in estimates])))
    assert 0.75 < jackknife / scatter < 1.33


def test_moderated_dependence_matches_a_naive_dersimonian_laird(rng: np.random.Generator) -> None:
    groups = [windows(list(_t3_ar1(rng, 40, 5, rho))) for rho in (0.3, 0.5, 0.5, 0.6, 0.7, 0.4)]
    estimates = [_dependence(g) for g in groups]
    w = [1 / v for _, v in estimates]
    mean = sum(wi * r for wi, (r, _) in zip(w, estimates, strict=True)) / sum(w)
    q = sum(wi * (r - mean) ** 2 for wi, (r, _) in zip(w, estimates, strict=True))
    tau2 = max(0.0, (q - (len(w) - 1)) / (sum(w) - sum(wi * wi for wi in w) / sum(w)))
    naive = [mean if tau2 == 0 else (r / v + mean / tau2) / (1 / v + 1 / tau2) for r, v in estimates]
    assert dependences(groups) == pytest.approx(naive, rel=1e-9, abs=1e-12)


def test_moderated_dependence_is_closer_when_strata_agree_and_apart_when_they_differ() -> None:
    """Eight strata of 40 five-window t3 series at one rho: the moderated estimates miss it by much
    less than each stratum's own (median absolute error: 0.38 to 0.60 of it in 40 comparisons, 0.45
    typical over 120). Four at 0.1 and four at 0.7, 120 series of 30 windows (each estimate's sd
    0.02): each keeps its own. Seed 3: the moderated median error is 0.44 of the own, and the eight
    apart estimates miss by 0.057 at most."""
    rng = np.random.default_rng(3)
    own, moderated = [], []
    for _ in range(120):
        groups = [windows(list(_t3_ar1(rng, 40, 5, 0.5))) for _ in range(8)]
        own += [dependence(g) - 0.5 for g in groups]
        moderated += [r - 0.5 for r in dependences(groups)]
    assert float(np.median(np.abs(moderated))) < 0.7 * float(np.median(np.abs(own)))
    truth = [0.1] * 4 + [0.7] * 4
    apart = dependences([windows(list(_t3_ar1(rng, 120, 30, rho))) for rho in truth])
    assert apart == pytest.approx(truth, abs=0.1)
    assert all(0 <= r <= MAX_DEPENDENCE for r in apart)


@pytest.mark.parametrize("n", [5, 9, 40])
@pytest.mark.parametrize("rho", [0.0, 0.5])
def test_median_variance_matches_simulation(n: int, rho: float) -> None:
    """The estimate, averaged over 20,000 samples, against the variance of the log median over them:
    within 12%. Seeds (4, n, 10 rho): within 2.2%."""
    rng = np.random.default_rng((4, n, round(rho * 10)))
    series = np.exp(0.2 * _ar1(rng, 20000, n, rho))
    summaries = windows(list(series))
    true = float(np.var([w.median for w in summaries]))
    estimated = float(np.mean(median_variance(summaries, rho)))
    assert estimated == pytest.approx(true, rel=0.12)


def _stratum(rng, tau: float, ratios: int = 40, n: int = 9, spread: float = 2.0, rho: float = 0.0):
    """A stratum's windows and log ratios: window sigma 0.05 x2 either way, a run effect tau."""
    scale = 0.05 * np.exp(rng.uniform(-math.log(spread), math.log(spread), ratios))
    sides = [
        np.exp(scale[:, None] * _ar1(rng, ratios, n, rho) + rng.normal(0, tau / math.sqrt(2), (ratios, 1)))
        for _ in range(2)
    ]
    base, new = windows(list(sides[0])), windows(list(sides[1]))
    d = [b_new.median - b_base.median for b_base, b_new in zip(base, new, strict=True)]
    return d, base, new


@pytest.mark.parametrize("tau", [0.0, 0.03, 0.1])
def test_run_to_run_component_recovers_the_run_effect(tau: float) -> None:
    """The median over 120 strata of the run-to-run sigma: under 0.015 without a run effect (half the
    windows' own noise), within 20% of tau with one. Seeds (5, 100 tau): 0 at tau 0, 3% and 4% under
    tau at 0.03 and 0.1."""
    rng = np.random.default_rng((5, round(tau * 100)))
    estimates = []
    for _ in range(120):
        d, base, new = _stratum(rng, tau)
        (noise, *_) = ratio_noise(d, base, new, [("k m", "m", "all")] * len(d))
        assert noise.stratum.name == "k m" and noise.stratum.ratios == len(d)
        estimates.append(noise.between_sigma)
    if tau == 0:
        assert np.median(estimates) < 0.015  # half the windows' own noise (sigma ~ 0.03); sd 0.002
    else:
        assert np.median(estimates) == pytest.approx(tau, rel=0.2)


def test_real_changes_barely_move_the_run_to_run_component() -> None:
    """Three real 2.7x changes among 40 ratios move a stratum's run-to-run sigma (tau 0.1) by a median
    factor within 0.9 to 1.15 over 20 strata. Seed 6: 0.985."""
    rng = np.random.default_rng(6)
    moved = []
    for _ in range(20):
        d, base, new = _stratum(rng, 0.1)
        clean = ratio_noise(d, base, new, [("k m",)] * len(d))[0].between_sigma
        changed = list(d)
        changed[:3] = [x + 1.0 for x in changed[:3]]  # three real 2.7x changes among 40
        moved.append(ratio_noise(changed, base, new, [("k m",)] * len(d))[0].between_sigma / clean)
    assert 0.9 < np.median(moved) < 1.15


def test_standardized_null_ratios_are_not_heavier_tailed_than_their_t() -> None:
    """With heterogeneous AR(1) windows and a run effect, |d| / sigma beyond the two-sided 1% t
    quantile of each ratio's df in at most 2% of ratios (the noise is not underestimated). Seed 7:
    54 of the 6,000 ratios (0.9%)."""
    rng = np.random.default_rng(7)
    beyond, total = 0, 0
    for _ in range(150):
        d, base, new = _stratum(rng, 0.05, rho=0.5)
        for x, noise in zip(d, ratio_noise(d, base, new, [("k m",)] * len(d)), strict=True):
            beyond += abs(x) / noise.sigma > stats.t.isf(0.005, noise.df)
            total += 1
    assert beyond / total < 0.02 and (beyond, total) == (54, 6000)


def test_a_small_stratum_uses_the_coarser_one(rng: np.random.Generator) -> None:
    d, base, new = _stratum(rng, 0.05, ratios=MIN_STRATUM + 5)
    strata = [("a m", "m", "all")] * MIN_STRATUM + [("b m", "m", "all")] * 5
    names = [n.stratum.name for n in ratio_noise(d, base, new, strata)]
    assert names == ["a m"] * MIN_STRATUM + ["m"] * 5
    few = ratio_noise(d[:7], base[:7], new[:7], [("a m", "m", "all")] * 7)
    assert all(n.stratum.name == "all" and n.stratum.between is None for n in few)  # fewer than 8 times


def test_satterthwaite_sum() -> None:
    parts = [Part(0.01, 4.0, 0.01), Part(0.02, 10.0, 0.02), Part(0.005, 20.0, 0.03)]
    var, df = combined(parts)
    assert var == pytest.approx(0.035)
    assert df == pytest.approx(0.035**2 / (0.01**2 / 4 + 0.02**2 / 10 + 0.03**2 / 20))
    assert combined([Part(0.0, 5.0, 0.0)]) == (0.0, 1000.0)
