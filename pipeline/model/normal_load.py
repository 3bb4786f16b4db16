"""Expert load normalized to its mean, L ~ Normal(1, sigma): overflow above and empty slots below a
capacity, in closed form (partial expectations of the normal distribution).

With z = (c - 1) / sigma, phi the standard normal density and Phi its distribution function:
    E[(L - c)+] = sigma * phi(z) - (c - 1) * (1 - Phi(z))    (expected overflow)
    E[(c - L)+] = sigma * phi(z) + (c - 1) * Phi(z)          (expected empty slots)
The normal is not truncated at zero, as the model states; sigma = 0 is the deterministic limit.
"""

from __future__ import annotations

import math
from statistics import NormalDist

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


def quantile_midpoints(sigma: float, count: int) -> list[float]:
    """Loads at the probability midpoints (i + 1/2) / count: ``count`` equally likely experts."""
    if sigma == 0.0:
        return [1.0] * count
    dist = NormalDist(1.0, sigma)
    return [dist.inv_cdf((i + 0.5) / count) for i in range(count)]
