"""Expert load normalized to its mean, L ~ Normal(1, sigma): overflow above and empty slots below a
capacity, in closed form (partial expectations of the normal distribution).

With z = (c - 1) / sigma, phi the standard normal density and Phi its distribution function:
    E[(L - c)+] = sigma * phi(z) - (c - 1) * (1 - Phi(z))    (expected overflow)
    E[(c - L)+] = sigma * phi(z) + (c - 1) * Phi(z)          (expected empty slots)
The normal is not truncated at zero, as the model states; sigma = 0 is the deterministic limit.

The published run's expert loads are quantiles of this distribution through the classical rational
approximation of the normal quantile, Abramowitz & Stegun 26.2.23 (Hastings; |error| < 4.5e-4), not
the exact inverse: its largest load at 40 midpoints is 1.6726 where the exact quantile gives 1.6724.
"""

from __future__ import annotations

import math
from collections.abc import Callable

_SQRT2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _pdf(z: float) -> float:
    return _INV_SQRT_2PI * math.exp(-0.5 * z * z)


def expected_overflow(capacity: float, sigma: float) -> float:
    """E[max(L - capacity, 0)] in units of the mean load: the dropped fraction of routed tokens."""
    if sigma == 0.0:
        return max(1.0 - capacity, 0.0)
    z = (capacity - 1.0) / sigma
    upper_tail = 0.5 * math.erfc(z / _SQRT2)  # 1 - Phi(z), accurate far in the tail
    return sigma * _pdf(z) - (capacity - 1.0) * upper_tail


def expected_empty(capacity: float, sigma: float) -> float:
    """E[max(capacity - L, 0)] in units of the mean load: capacity slots left empty (padding)."""
    if sigma == 0.0:
        return max(capacity - 1.0, 0.0)
    z = (capacity - 1.0) / sigma
    lower = 0.5 * math.erfc(-z / _SQRT2)  # Phi(z)
    return sigma * _pdf(z) + (capacity - 1.0) * lower


# Abramowitz & Stegun 26.2.23: x = t - (c0 + c1 t + c2 t^2) / (1 + d1 t + d2 t^2 + d3 t^3), t = sqrt(-2 ln q)
_AS_C = (2.515517, 0.802853, 0.010328)
_AS_D = (1.432788, 0.189269, 0.001308)


def hastings_quantile(p: float) -> float:
    """The standard normal quantile by Abramowitz & Stegun 26.2.23 (|error| < 4.5e-4), applied to the
    smaller tail and mirrored; 0 < p < 1."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"a probability must lie in (0, 1), got {p!r}")
    t = math.sqrt(-2.0 * math.log(min(p, 1.0 - p)))
    (c0, c1, c2), (d1, d2, d3) = _AS_C, _AS_D
    x = t - (c0 + c1 * t + c2 * t * t) / (1.0 + d1 * t + d2 * t * t + d3 * t * t * t)
    return x if p > 0.5 else -x


def quantile_midpoints(sigma: float, count: int, quantile: Callable[[float], float]) -> list[float]:
    """Loads 1 + sigma z at the probability midpoints (i + 1/2) / count (``count`` equally likely
    experts), z = ``quantile`` of the standard normal."""
    if sigma == 0.0:
        return [1.0] * count
    return [1.0 + sigma * quantile((i + 0.5) / count) for i in range(count)]
