"""Saved-state policies: how many of a layer's routed rows keep their activations for backward.

Rows beyond what a policy retains are recomputed in backward (see :mod:`pipeline.moe.experts`).

- MoK: a per-layer budget, the requested factor x T x K rounded up to a power of two
  (2.5 x 2048 x 6 = 30,720 -> 32,768 rows, ~2.67).
- Dist-MoE: one activation slot shared by all layers of a stack (factor x T x K rows per layer,
  pooled), receive scratch for ``scratch_factor`` x T x K rows, zero host scratch. Its capacity flag
  is raised when the slot or the scratch would overflow.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from pipeline.moe.config import MoEConfig


@dataclass(frozen=True)
class SavedState:
    """Evidence of one layer's forward, as the shards record it."""

    factor: float  # budget rows / (T x K)
    budget_rows: int
    routed_rows: int
    retained_rows: int
    recomputed_rows: int
    overflow: bool

    def as_dict(self) -> dict[str, float | int | bool]:
        return asdict(self)


def power_of_two_ceil(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


class MoKBudget:
    """MoK's native per-layer allocation: nothing is shared between layers."""

    def __init__(self, cfg: MoEConfig) -> None:
        self.factor = cfg.activation_factor

    def budget_rows(self, tokens: int, top_k: int) -> int:
        return power_of_two_ceil(math.ceil(self.factor * tokens * top_k))

    def reserve(self, routed_rows: int, tokens: int, top_k: int, hold: bool) -> SavedState:
        budget = self.budget_rows(tokens, top_k)
        retained = min(routed_rows, budget)
        return SavedState(
            factor=budget / max(tokens * top_k, 1),
            budget_rows=budget,
            routed_rows=routed_rows,
            retained_rows=retained,
            recomputed_rows=routed_rows - retained,
            overflow=routed_rows > budget,
        )

    def release(self, rows: int) -> None:
        """Per-layer budgets hold nothing across layers."""


class SharedSlot:
    """Dist-MoE's activation slot, shared by ``layers`` layers: rows are taken in forward order and
    given back as each backward finishes."""

    def __init__(self, cfg: MoEConfig, layers: int = 1) -> None:
        self.factor, self.scratch_factor, self.layers = cfg.activation_factor, cfg.scratch_factor, layers
        self.used = 0

    def capacity_rows(self, tokens: int, top_k: int) -> int:
        return math.floor(self.factor * tokens * top_k) * self.layers

    def reserve(self, routed_rows: int, tokens: int, top_k: int, hold: bool) -> SavedState:
        capacity = self.capacity_rows(tokens, top_k)
        retained = min(routed_rows, max(capacity - self.used, 0))
        scratch_overflow = routed_rows > self.scratch_factor * tokens * top_k
        if hold:
            self.used += retained
        return SavedState(
            factor=self.factor,
            budget_rows=capacity,
            routed_rows=routed_rows,
            retained_rows=retained,
            recomputed_rows=routed_rows - retained,
            overflow=retained < routed_rows or scratch_overflow,
        )

    def release(self, rows: int) -> None:
        self.used = max(self.used - rows, 0)


def make_policy(cfg: MoEConfig, layers: int = 1) -> MoKBudget | SharedSlot:
    """The policy of ``cfg.implementation``; ``layers`` sizes Dist-MoE's shared slot."""
    return MoKBudget(cfg) if cfg.implementation == "mok" else SharedSlot(cfg, layers)
