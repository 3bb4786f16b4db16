"""Closed-form overflow and empty slots of Normal(1, sigma) loads against numerical integration."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from scipy import integrate, stats

from pipeline.tools.model.normal_load import (
    expected_empty,
    expected_overflow,
    hastings_quantile,
    quantile_midpoints,
)


def _integrated(capacity: float, sigma: float) -> tuple[float, float]:
    """E[(L-c)+] and E[(c-L)+] by quadrature of the normal density (an independent formulation)."""
    pdf = stats.norm(loc=1.0, scale=sigma).pdf
    over, _ = integrate.quad(lambda x: (x - capacity) * pdf(x), capacity, np.inf, epsabs=1e-13, epsrel=1e-11)
    empty, _ = integrate.quad(
        lambda x: (capacity - x) * pdf(x), -np.inf, capacity, epsabs=1e-13, epsrel=1e-11
    )
    return over, empty


def test_closed_forms_match_quadrature_on_random_cases():
    rng = np.random.default_rng(20261129)
    for capacity, sigma in zip(rng.uniform(0.2, 4.5, 30), rng.uniform(0.02, 1.5, 30), strict=True):
        over, empty = _integrated(capacity, sigma)
        assert expected_overflow(capacity, sigma) == pytest.approx(over, rel=1e-8, abs=1e-12)
        assert expected_empty(capacity, sigma) == pytest.approx(empty, rel=1e-8, abs=1e-12)


def test_closed_forms_match_sampled_loads():
    rng = np.random.default_rng(5)
    loads = rng.normal(1.0, 0.3, 2_000_000)
    for capacity in (0.7, 1.0, 1.25, 2.0):
        assert expected_overflow(capacity, 0.3) == pytest.approx(
            np.maximum(loads - capacity, 0).mean(), abs=1e-3
        )
        assert expected_empty(capacity, 0.3) == pytest.approx(
            np.maximum(capacity - loads, 0).mean(), abs=1e-3
        )


def test_far_tail_keeps_precision():
    # 12 sigma above the mean: 1 - Phi would cancel to zero; erfc keeps the tiny positive value.
    got = expected_overflow(1.0 + 12 * 0.1, 0.1)
    want = 0.1 * (stats.norm.pdf(12.0) - 12.0 * stats.norm.sf(12.0))
    assert 0 < got == pytest.approx(want, rel=1e-6)


def test_zero_spread_is_the_deterministic_limit():
    for capacity in (0.5, 1.0, 1.25, 3.0):
        assert expected_overflow(capacity, 0.0) == max(1 - capacity, 0)
        assert expected_empty(capacity, 0.0) == max(capacity - 1, 0)
        assert expected_overflow(capacity, 1e-9) == pytest.approx(max(1 - capacity, 0), abs=1e-9)
    assert quantile_midpoints(0.0, 5, hastings_quantile) == [1.0] * 5


def test_quantile_midpoints_match_scipy():
    sigma = 0.37
    got = quantile_midpoints(sigma, 40, NormalDist().inv_cdf)
    want = stats.norm(1.0, sigma).ppf((np.arange(40) + 0.5) / 40)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert math.fsum(got) / 40 == pytest.approx(1.0, abs=1e-12)  # symmetric about the mean


def test_hastings_quantile_is_the_approximation_within_its_bound():
    """Abramowitz & Stegun 26.2.23: |error| < 4.5e-4 over (0, 1), symmetric, and not the exact
    quantile (its error reaches 4.4e-4 near p = 0.0125, where the published largest load lies)."""
    p = np.concatenate([np.linspace(1e-9, 1e-3, 200), np.linspace(1e-3, 1 - 1e-3, 4001)])
    p = np.concatenate([p, 1 - p[:200]])
    err = np.array([hastings_quantile(float(x)) for x in p]) - stats.norm.ppf(p)
    assert np.abs(err).max() < 4.5e-4
    assert np.abs(err).max() > 4.0e-4
    for x in (0.0125, 0.2, 0.4):
        assert hastings_quantile(1 - x) == pytest.approx(-hastings_quantile(x), abs=1e-12)
    assert hastings_quantile(0.9875) - stats.norm.ppf(0.9875) == pytest.approx(4.43e-4, abs=1e-6)
    with pytest.raises(ValueError, match="probability"):
        hastings_quantile(1.0)
