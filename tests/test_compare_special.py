"""The noise model's distributions (scipy's, with the project's conventions) against naive float64
formulations on random arguments of each test's own seed: Student's t tails by integrating its
density written out, quantiles by their tails, digamma and trigamma by their series, and
trigamma's inverse (a root the module finds) by plain bisection."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate

from pipeline.tools.compare.special import MAX_DF, digamma, inverse_trigamma, t_isf, t_sf, trigamma


def _t_tail(t: float, df: float) -> float:
    """P(T > t) by integrating Student's density, written out with math.lgamma; the tail beyond
    |t| as an integral over u in (0, 1] of x = |t| / u, a finite interval (0.5 minus the middle
    for |t| < 1)."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def density(x: float) -> float:
        return math.exp(log_norm - (df + 1) / 2 * math.log1p(x * x / df))

    a = abs(t)
    if a < 1:
        tail = 0.5 - integrate.quad(density, 0, a, epsabs=0, epsrel=1e-13)[0]
    else:
        tail = integrate.quad(
            lambda u: density(a / u) * a / (u * u), 0, 1, epsabs=0, epsrel=1e-13, limit=200
        )[0]
    return tail if t >= 0 else 1 - tail


def test_t_tail_probabilities(rng: np.random.Generator) -> None:
    df = np.concatenate([rng.uniform(0.5, 5, 20), rng.uniform(5, 100, 20), rng.uniform(100, MAX_DF, 10)])
    t = np.concatenate([rng.uniform(-4, 4, 25), rng.uniform(0, 30, 25)])
    got = t_sf(t, df)
    for value, ti, di in zip(got.tolist(), t.tolist(), df.tolist(), strict=True):
        assert value == pytest.approx(_t_tail(ti, di), rel=1e-8, abs=1e-300)
    assert float(t_sf(2.0, 5.0)) == pytest.approx(_t_tail(2.0, 5.0), rel=1e-10)  # scalars too
    assert float(t_sf(3.0, 1e9)) == pytest.approx(_t_tail(3.0, MAX_DF), rel=1e-9)  # df capped


def test_t_quantiles_are_their_tails_inverse(rng: np.random.Generator) -> None:
    df = np.concatenate([rng.uniform(1, 5, 200), rng.uniform(5, 3 * MAX_DF, 200)])
    p = np.exp(rng.uniform(np.log(1e-12), np.log(0.5), df.size))
    q = t_isf(p, df)
    assert t_sf(q, df) == pytest.approx(p, rel=1e-9)
    for k in range(0, df.size, 40):  # and against the density itself
        assert _t_tail(float(q[k]), min(float(df[k]), MAX_DF)) == pytest.approx(float(p[k]), rel=1e-7)
    assert t_isf(0.5, 3.0) == 0.0
    with pytest.raises(ValueError, match=r"tail probabilities must be in \(0, 0.5\], got \[0.7\]"):
        t_isf(0.7, 3.0)
    with pytest.raises(ValueError, match=r"tail probabilities must be in \(0, 0.5\], got \[nan\]"):
        t_isf(math.nan, 3.0)
    with pytest.raises(ValueError, match=r"degrees of freedom must be >= 1, got \[0.5\]"):
        t_isf(0.1, 0.5)


def _trigamma_series(x: float, terms: int = 2000) -> float:
    """sum_k 1 / (x + k)^2: the first ``terms`` exactly, the rest by Euler-Maclaurin."""
    y = x + terms
    head = math.fsum(1 / (x + k) ** 2 for k in range(terms))
    return head + 1 / y + 1 / (2 * y * y) + 1 / (6 * y**3) - 1 / (30 * y**5)


def _digamma_series(x: float, terms: int = 2000) -> float:
    """psi(x) = psi(x + terms) - sum_k 1 / (x + k), psi of a large argument by its asymptotic series."""
    y = x + terms
    tail = math.log(y) - 1 / (2 * y) - 1 / (12 * y * y) + 1 / (120 * y**4)
    return tail - math.fsum(1 / (x + k) for k in range(terms))


def test_digamma_and_trigamma(rng: np.random.Generator) -> None:
    x = np.exp(rng.uniform(-7, 8, 60))
    for got, xi in zip(digamma(x).tolist(), x.tolist(), strict=True):
        assert got == pytest.approx(_digamma_series(xi), rel=1e-11, abs=1e-11)
    for got, xi in zip(trigamma(x).tolist(), x.tolist(), strict=True):
        assert got == pytest.approx(_trigamma_series(xi), rel=1e-11)


def _bisected(y: float) -> float:
    """The x with trigamma(x) = y by bisection in log x (trigamma falls with x)."""
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _trigamma_series(math.exp(mid), 200) > y else (lo, mid)
    return math.exp((lo + hi) / 2)


def test_the_inverse_of_trigamma(rng: np.random.Generator) -> None:
    y = np.exp(rng.uniform(-12, 12, 2000))
    x = inverse_trigamma(y)
    assert trigamma(x) == pytest.approx(y, rel=1e-10)
    for k in range(0, y.size, 100):
        assert float(x[k]) == pytest.approx(_bisected(float(y[k])), rel=1e-8)
    assert inverse_trigamma(np.array([[1.0, 2.0]])).shape == (1, 2)
    with pytest.raises(ValueError, match=r"trigamma takes only positive values, got \[0.0\]"):
        inverse_trigamma(0.0)
