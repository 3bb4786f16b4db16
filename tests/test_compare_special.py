"""The noise model's special functions against scipy on fresh random arguments."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import special, stats

from pipeline.compare.special import MAX_DF, digamma, inverse_trigamma, t_isf, t_sf, trigamma


def test_t_tail_probabilities() -> None:
    rng = np.random.default_rng()
    df = np.concatenate([rng.uniform(0.5, 5, 300), rng.uniform(5, 100, 300), rng.uniform(100, MAX_DF, 100)])
    t = np.concatenate([rng.uniform(-4, 4, 350), rng.uniform(0, 60, 350)])
    reference = stats.t.sf(t, df)
    assert t_sf(t, df) == pytest.approx(reference, rel=1e-10, abs=1e-300)
    assert t_sf(2.0, 5.0) == pytest.approx(stats.t.sf(2.0, 5.0), rel=1e-12)  # scalars too
    assert t_sf(3.0, 1e9) == pytest.approx(stats.t.sf(3.0, MAX_DF), rel=1e-12)  # df capped


def test_t_quantiles() -> None:
    rng = np.random.default_rng()
    df = np.concatenate([rng.uniform(1, 5, 200), rng.uniform(5, MAX_DF, 200)])
    p = np.exp(rng.uniform(np.log(1e-12), np.log(0.5), df.size))
    assert t_isf(p, df) == pytest.approx(stats.t.isf(p, df), rel=1e-9)
    assert t_isf(0.5, 3.0) == 0.0
    with pytest.raises(ValueError, match=r"tail probabilities must be in \(0, 0.5\], got \[0.7\]"):
        t_isf(0.7, 3.0)
    with pytest.raises(ValueError, match=r"degrees of freedom must be >= 1, got \[0.5\]"):
        t_isf(0.1, 0.5)


def test_digamma_trigamma_and_the_inverse() -> None:
    x = np.exp(np.random.default_rng().uniform(-7, 8, 2000))
    assert digamma(x) == pytest.approx(special.digamma(x), rel=1e-12, abs=1e-12)
    assert trigamma(x) == pytest.approx(special.polygamma(1, x), rel=1e-10)
    assert inverse_trigamma(special.polygamma(1, x)) == pytest.approx(x, rel=1e-8)
    with pytest.raises(ValueError, match=r"trigamma takes only positive values, got \[0.0\]"):
        inverse_trigamma(0.0)
