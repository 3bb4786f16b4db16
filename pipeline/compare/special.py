"""Student's t tail probabilities and quantiles, digamma and trigamma, in numpy.

The noise model needs them at run time and scipy is a test-only dependency (the tests check these
against it). Degrees of freedom are capped at ``MAX_DF``, where t is a normal to within 0.1%.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from statistics import NormalDist

import numpy as np

MAX_DF = 1000.0
_TINY = 1e-300


def t_sf(t: np.ndarray | float, df: np.ndarray | float) -> np.ndarray:
    """P(T > t) for Student's t with ``df`` degrees of freedom (elementwise, df > 0)."""
    t, df = np.broadcast_arrays(np.asarray(t, np.float64), np.minimum(np.asarray(df, np.float64), MAX_DF))
    # x and 1 - x each from its own quotient: near t = 0, 1 - x by subtraction would lose digits
    # (t^2 capped so that an infinite t gives 1 - x = 1, not inf / inf)
    t2 = np.minimum(t * t, 1e300)
    tail = 0.5 * _betainc(df / 2, np.full_like(df, 0.5), df / (df + t2), t2 / (df + t2))
    tail = tail.reshape(t.shape)
    return np.where(t >= 0, tail, 1 - tail)


def t_isf(p: np.ndarray | float, df: np.ndarray | float) -> np.ndarray:
    """The t with P(T > t) = p, for 0 < p <= 0.5 and df >= 1 (elementwise): Newton steps on log sf
    against log t (nearly straight in the tails, so a few steps do) from the normal quantile."""
    p, df = np.broadcast_arrays(np.asarray(p, np.float64), np.minimum(np.asarray(df, np.float64), MAX_DF))
    if np.any((p <= 0) | (p > 0.5)):
        raise ValueError(
            f"tail probabilities must be in (0, 0.5], got {p[(p <= 0) | (p > 0.5)][:3].tolist()}"
        )
    if np.any(df < 1):
        raise ValueError(f"degrees of freedom must be >= 1, got {df[df < 1][:3].tolist()}")
    shape, p, df = p.shape, p.ravel(), df.ravel()
    z = np.array([-NormalDist().inv_cdf(v) for v in p])
    u = np.log(np.maximum(z * (1 + (z * z + 1) / (4 * df)), 1e-3))  # log t
    todo = np.flatnonzero(p < 0.5)
    for _ in range(100):
        if todo.size == 0:
            break
        t, dd = np.exp(u[todo]), df[todo]
        sf = t_sf(t, dd)
        slope = -_t_pdf(t, dd) * t / sf  # d log sf / d log t
        step = np.clip((np.log(sf) - np.log(p[todo])) / slope, -1.0, 1.0)
        u[todo] -= step
        todo = todo[np.abs(step) > 1e-12]
    return np.where(p < 0.5, np.exp(u), 0.0).reshape(shape)


def digamma(x: np.ndarray | float) -> np.ndarray:
    """psi(x) for x > 0 (elementwise): the recurrence up to x >= 10, then the asymptotic series."""
    y, shift = _shifted(x, lambda v: -1 / v)
    f = 1 / (y * y)
    series = f * (1 / 12 - f * (1 / 120 - f * (1 / 252 - f * (1 / 240 - f / 132))))
    return shift + np.log(y) - 0.5 / y - series


def trigamma(x: np.ndarray | float) -> np.ndarray:
    """psi'(x) for x > 0 (elementwise): the recurrence up to x >= 10, then the asymptotic series."""
    y, shift = _shifted(x, lambda v: 1 / (v * v))
    f = 1 / (y * y)
    return shift + 1 / y + f / 2 + f / y * (1 / 6 - f * (1 / 30 - f * (1 / 42 - f / 30)))


def inverse_trigamma(y: np.ndarray | float) -> np.ndarray:
    """The x > 0 with psi'(x) = y (elementwise, y > 0): Newton's method on 1 / psi'(x), which is
    nearly linear in x, from x = 0.5 + 1 / y (the iteration limma uses)."""
    y = np.asarray(y, np.float64)
    if np.any(~(y > 0)):
        raise ValueError(f"trigamma takes only positive values, got {y[~(y > 0)][:3].tolist()}")
    x = 0.5 + 1 / y
    for _ in range(50):
        tri = trigamma(x)
        step = tri * (1 - tri / y) / _tetragamma(x)
        x = x + step
        if np.all(-step / x < 1e-10):
            break
    return x


def _tetragamma(x: np.ndarray) -> np.ndarray:
    y, shift = _shifted(x, lambda v: -2 / (v * v * v))
    f = 1 / (y * y)
    return shift - f - f / y - f * f * (1 / 2 - f * (1 / 6 - f * (1 / 6 - 3 * f / 10)))


def _shifted(
    x: np.ndarray | float, term: Callable[[np.ndarray], np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """x raised by whole steps to at least 10, and the sum of ``term`` over the values stepped past."""
    y = np.array(x, np.float64, copy=True)
    shift = np.zeros_like(y)
    while True:
        small = y < 10
        if not small.any():
            return y, shift
        shift = shift + np.where(small, term(np.where(small, y, 1.0)), 0.0)
        y = np.where(small, y + 1, y)


def _t_pdf(t: np.ndarray, df: np.ndarray) -> np.ndarray:
    log_norm = _lgamma((df + 1) / 2) - _lgamma(df / 2) - 0.5 * np.log(df * math.pi)
    return np.exp(log_norm - (df + 1) / 2 * np.log1p(t * t / df))


def _betainc(a: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Regularized incomplete beta I_x(a, b), given x and y = 1 - x (each computed without the
    other's rounding), by its continued fraction on the side where it converges fast (x below
    (a + 1) / (a + b + 2)), else by I_x(a, b) = 1 - I_y(b, a)."""
    a, b, x, y = (np.atleast_1d(np.asarray(v, np.float64)) for v in np.broadcast_arrays(a, b, x, y))
    x, y = np.clip(x, 0.0, 1.0), np.clip(y, 0.0, 1.0)
    inner = (x > 0) & (y > 0)
    safe_x, safe_y = np.where(inner, x, 0.5), np.where(inner, y, 0.5)
    log_front = _lgamma(a + b) - _lgamma(a) - _lgamma(b) + a * np.log(safe_x) + b * np.log(safe_y)
    front = np.exp(log_front)
    direct = safe_x < (a + 1) / (a + b + 2)
    value = np.empty_like(safe_x)
    value[direct] = front[direct] * _continued_fraction(a[direct], b[direct], safe_x[direct]) / a[direct]
    flip = ~direct
    value[flip] = 1 - front[flip] * _continued_fraction(b[flip], a[flip], safe_y[flip]) / b[flip]
    return np.where(inner, value, np.where(x > 0, 1.0, 0.0))  # I_0 = 0, I_1 = 1


def _continued_fraction(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Modified Lentz evaluation of the incomplete beta's continued fraction (stops when every
    element has converged to 1e-15)."""
    c = np.ones_like(x)
    if x.size == 0:
        return c
    d = _nonzero(1 - (a + b) * x / (a + 1))
    d = 1 / d
    h = d.copy()
    for m in range(1, 2000):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 / _nonzero(1 + numerator * d)
            c = _nonzero(1 + numerator / c)
            delta = c * d
            h = h * delta
        if np.all(np.abs(delta - 1) < 1e-15):
            break
    return h


def _lgamma(x: np.ndarray) -> np.ndarray:
    """log Gamma(x) for x > 0, elementwise: shifted up to x >= 7, then Stirling's series to 1/y^11
    (within 1e-13 of ``math.lgamma`` relative, 4e-12 absolute at 2,000; to 1/y^7 it was 2e-11
    absolute, which a t tail near 1 - I amplified past 1e-10 relative)."""
    y = np.asarray(x, np.float64).copy()
    shift = np.zeros_like(y)
    for _ in range(7):
        small = y < 7
        shift -= np.where(small, np.log(np.where(small, y, 1.0)), 0.0)
        y = np.where(small, y + 1, y)
    f = 1 / (y * y)
    series = (
        1 / 12 - f * (1 / 360 - f * (1 / 1260 - f * (1 / 1680 - f * (1 / 1188 - f * 691 / 360360))))
    ) / y
    return shift + (y - 0.5) * np.log(y) - y + 0.5 * math.log(2 * math.pi) + series


def _nonzero(v: np.ndarray) -> np.ndarray:
    return np.where(np.abs(v) < _TINY, _TINY, v)


def _normal_isf(p: float) -> float:
    return -NormalDist().inv_cdf(p)
