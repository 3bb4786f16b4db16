"""Holm and Benjamini-Hochberg adjusted p-values against the procedures as their papers state them."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.tools.compare.family import ALPHA, adjusted, promise


def _holm_rejects(p: np.ndarray, alpha: float) -> set[int]:
    """Holm (1979): step down through the sorted p-values while p_(k) <= alpha / (m - k + 1)."""
    order, m, out = np.argsort(p, kind="stable"), p.size, set()
    for k, i in enumerate(order, start=1):
        if p[i] > alpha / (m - k + 1):
            break
        out.add(int(i))
    return out


def _bh_rejects(p: np.ndarray, alpha: float) -> set[int]:
    """Benjamini and Hochberg (1995): reject the k smallest for the largest k with p_(k) <= k alpha / m."""
    order, m = np.argsort(p, kind="stable"), p.size
    passing = [k for k in range(1, m + 1) if p[order[k - 1]] <= k * alpha / m]
    return {int(i) for i in order[: max(passing, default=0)]}


@pytest.mark.parametrize("method,reference", [("holm", _holm_rejects), ("bh", _bh_rejects)])
def test_adjusted_p_values_reject_what_the_procedure_rejects(
    method, reference, rng: np.random.Generator
) -> None:
    for _ in range(300):
        m = int(rng.integers(1, 60))
        p = np.where(rng.random(m) < 0.3, rng.uniform(0, 0.01, m), rng.uniform(0, 1, m))
        adj = np.array(adjusted(p, method))
        assert (adj >= p - 1e-15).all() and (adj <= 1).all()
        for alpha in (ALPHA, 0.01, 0.2):
            assert {int(i) for i in np.flatnonzero(adj <= alpha)} == reference(p, alpha)


def test_empty_family_and_bad_method() -> None:
    assert adjusted([], "holm") == []
    assert "P(any time flagged) <= 5%" in promise("holm", "time")
    with pytest.raises(ValueError, match="unknown multiplicity control 'bonferroni'; allowed: holm, bh"):
        adjusted([0.1], "bonferroni")
