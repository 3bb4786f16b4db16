"""The distributions the noise model tests with, from scipy, with its conventions in one place.

Student's t tails and quantiles (``scipy.stats.t``) with degrees of freedom capped at ``MAX_DF``
(where t is a normal to within 0.1%: ``noise.combined`` gives a noise without estimated parts that
many), digamma and trigamma (``scipy.special``), and trigamma's inverse, which scipy does not offer:
a root found by ``scipy.optimize.newton`` from limma's start.
"""

from __future__ import annotations

import numpy as np
from scipy import optimize, special, stats

MAX_DF = 1000.0


def t_sf(t: np.ndarray | float, df: np.ndarray | float) -> np.ndarray:
    """P(T > t) for Student's t with ``df`` degrees of freedom (elementwise, df > 0, capped at MAX_DF)."""
    return np.asarray(stats.t.sf(t, np.minimum(df, MAX_DF)), np.float64)


def t_isf(p: np.ndarray | float, df: np.ndarray | float) -> np.ndarray:
    """The t with P(T > t) = p, for 0 < p <= 0.5 and df >= 1 (elementwise, df capped at MAX_DF)."""
    p, df = np.broadcast_arrays(np.asarray(p, np.float64), np.minimum(np.asarray(df, np.float64), MAX_DF))
    if np.any(~((p > 0) & (p <= 0.5))):
        raise ValueError(
            f"tail probabilities must be in (0, 0.5], got {p[~((p > 0) & (p <= 0.5))][:3].tolist()}"
        )
    if np.any(~(df >= 1)):
        raise ValueError(f"degrees of freedom must be >= 1, got {df[~(df >= 1)][:3].tolist()}")
    return np.asarray(stats.t.isf(p, df), np.float64)


def digamma(x: np.ndarray | float) -> np.ndarray:
    """psi(x), elementwise."""
    return np.asarray(special.digamma(x), np.float64)


def trigamma(x: np.ndarray | float) -> np.ndarray:
    """psi'(x), elementwise."""
    return np.asarray(special.polygamma(1, x), np.float64)


def inverse_trigamma(y: np.ndarray | float) -> np.ndarray:
    """The x > 0 with psi'(x) = y (elementwise, y > 0). scipy has no inverse of trigamma, so it is a
    root: Newton's method (``scipy.optimize.newton``, vectorized) on 1 / psi'(x) - 1 / y, which is
    nearly linear in x, from x = 0.5 + 1 / y (limma's start), in log x so that its absolute tolerance
    is a relative one on x (from 1e-6 to 1e6 alike)."""
    y = np.asarray(y, np.float64)
    if np.any(~(y > 0)):
        raise ValueError(f"trigamma takes only positive values, got {y[~(y > 0)][:3].tolist()}")
    flat = y.ravel()

    def excess(u: np.ndarray) -> np.ndarray:
        return np.asarray(1 / special.polygamma(1, np.exp(u)) - 1 / flat)

    def slope(u: np.ndarray) -> np.ndarray:
        x = np.exp(u)
        return np.asarray(-x * special.polygamma(2, x) / special.polygamma(1, x) ** 2)

    root = optimize.newton(excess, np.log(0.5 + 1 / flat), fprime=slope, tol=1e-13, maxiter=100)
    return np.exp(np.asarray(root, np.float64)).reshape(y.shape)
