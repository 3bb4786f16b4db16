"""Multiplicity control over a family of ratios (all times, all speedups, all selection flips).

A comparison tests hundreds of ratios at once; at 5% each, a rerun would flag a dozen. The family's
p-values are adjusted so that the promise holds for the family, whatever the noise of each ratio:

- ``holm`` (default): family-wise. With no real change, the chance that any ratio of the family is
  flagged is at most ``ALPHA``; with some real changes, the chance that any other one is flagged is
  too. Holm's step-down is uniformly more powerful than Bonferroni and assumes nothing about the
  dependence between ratios.
- ``bh``: Benjamini-Hochberg, false discovery rate. Of the ratios flagged, at most ``ALPHA`` are
  expected not to be real changes (for independent or positively dependent ratios, as the metrics
  of one execution are); with no real change at all this is the family-wise promise again. More
  powerful when many ratios really changed.

Benjamini-Hochberg's adjusted p-values are scipy's (``scipy.stats.false_discovery_control``). Holm's
step-down is written here: scipy has no Holm, and the library that has (statsmodels'
``multipletests``) would bring pandas and patsy for a cumulative maximum of one line.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

ALPHA = 0.05
MULTIPLICITY = ("holm", "bh")
PROMISES = {
    "holm": "Holm, family-wise: with no real change, P(any {family} flagged) <= {alpha:g}%",
    "bh": "Benjamini-Hochberg, false discovery rate: of the {family} flagged, at most {alpha:g}% "
    "expected false; with no real change, P(any flagged) <= {alpha:g}%",
}


def adjusted(p_values: Sequence[float], method: str) -> list[float]:
    """Adjusted p-values: a ratio is flagged at level ``ALPHA`` when its adjusted value is <= ``ALPHA``."""
    check_method(method)
    p = np.asarray(p_values, np.float64)
    m = p.size
    if m == 0:
        return []
    if method == "bh":
        return [float(v) for v in stats.false_discovery_control(p, method="bh")]
    order = np.argsort(p, kind="stable")
    steps = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = steps
    return out.tolist()


def promise(method: str, family: str) -> str:
    check_method(method)
    return PROMISES[method].format(family=family, alpha=100 * ALPHA)


def check_method(method: str) -> None:
    if method not in MULTIPLICITY:
        raise ValueError(f"unknown multiplicity control {method!r}; allowed: {', '.join(MULTIPLICITY)}")
