"""Saved-state policies: how many of a layer's routed rows keep their activations for backward.

Rows beyond what a policy retains are recomputed in backward (see :mod:`pipeline.moe.experts`).

The implementation's record names its policy class (``Implementation.policy``); the two here are:

- MoK: a per-layer budget, the requested factor x T x K rounded up to a power of two
  (2.5 x 2048 x 6 = 30,720 -> 32,768 rows, ~2.67). A layer over its budget keeps part of its state
  and recomputes the rest; MoK has no capacity flag.
- Dist-MoE: one activation slot shared by all layers of a stack (factor x T x K rows per layer,
  pooled), receive scratch for ``scratch_factor`` x T x K rows, zero host scratch. Its capacity flag
  is raised when the slot or the scratch would overflow (rows the slot cannot hold are recomputed).

Evidence has one meaning per field: per layer (:class:`SavedState`) ``budget_rows`` is what the policy
allocates for that layer (Dist-MoE: its share of the pooled slot) and ``factor`` the same in T x K
units; ``recomputes`` says that some of its rows are recomputed; ``capacity_flag`` is Dist-MoE's flag
(None for MoK, which has none). Per stack, ``describe()`` gives the pool, the scratch and host
scratch, and what overflow means for the implementation.

The policies are real allocations: ``allocate`` creates their device tensors once, before timing,
and every iteration reuses them (as CUDA graphs need): MoK one saved-activation buffer of its budget
rows per layer, Dist-MoE one slot for the stack and a receive scratch; GEMM-1 outputs that a layer
retains are written into them, Dist-MoE's all-to-all receives into its scratch. ``buffers()`` lists
each with its bytes. A policy whose T is unknown (``MoEConfig.budget_tokens`` unset) only counts.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Protocol

import torch

from pipeline.base.implementations import implementation
from pipeline.base.saved_state import Buffer, Policy, SavedState
from pipeline.moe.config import MoEConfig


@dataclass(frozen=True)
class Reservation:
    """One forward's grant: its evidence, and where its retained GEMM-1 rows go (None: a fresh
    tensor, when the policy has no buffers or nothing is held)."""

    state: SavedState
    store: torch.Tensor | None


class SavedStatePolicy(Protocol):
    """What a layer asks of its implementation's policy; one object serves every layer of a stack."""

    OVERFLOW: str  # what overflow means for the implementation
    layers: int
    factor: float  # the requested factor, in units of T x K rows
    receive_scratch: torch.Tensor | None  # where the dispatch receives rows, when it has one

    def allocate(self, cfg: MoEConfig, tokens: int, device: torch.device, saves: bool) -> None: ...

    def buffers(self) -> list[Buffer]: ...

    def reserve(self, layer: int, routed_rows: int, tokens: int, top_k: int, hold: bool) -> Reservation: ...

    def release(self, rows: int) -> None: ...

    def describe(self, tokens: int, top_k: int) -> Policy: ...


def power_of_two_ceil(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


class MoKBudget:
    """MoK's native per-layer allocation: nothing is shared between layers."""

    OVERFLOW = "partial retention: rows beyond a layer's budget are recomputed in backward"

    def __init__(self, cfg: MoEConfig, layers: int = 1) -> None:
        self.implementation, self.factor, self.layers = cfg.implementation, cfg.activation_factor, layers
        self.saved: list[torch.Tensor] = []  # per layer [budget rows, 2F], once allocated
        self.receive_scratch: torch.Tensor | None = None  # MoK receives into exactly sized buffers

    def budget_rows(self, tokens: int, top_k: int) -> int:
        return power_of_two_ceil(math.ceil(self.factor * tokens * top_k))

    def allocate(self, cfg: MoEConfig, tokens: int, device: torch.device, saves: bool) -> None:
        """One saved-activation buffer of the budget rows per layer (when the work has a backward)."""
        rows = self.budget_rows(tokens, cfg.top_k)
        width = 2 * cfg.d_ff  # a GEMM-1 output row: gate and up
        layers = self.layers if saves else 0
        self.saved = [torch.empty(rows, width, dtype=cfg.dtype, device=device) for _ in range(layers)]

    def buffers(self) -> list[Buffer]:
        return [
            Buffer(f"saved-activations[{i}]", t.shape[0], t.shape[1] * t.element_size())
            for i, t in enumerate(self.saved)
        ]

    def reserve(self, layer: int, routed_rows: int, tokens: int, top_k: int, hold: bool) -> Reservation:
        budget = self.budget_rows(tokens, top_k)
        retained = min(routed_rows, budget)
        state = SavedState.of(budget, routed_rows, retained, tokens, top_k, None)
        store = self.saved[layer][:retained] if hold and self.saved else None
        return Reservation(state, store)

    def release(self, rows: int) -> None:
        """Per-layer budgets hold nothing across layers."""

    def describe(self, tokens: int, top_k: int) -> Policy:
        """The stack's policy: ``layers`` separate budgets, no receive or host scratch."""
        budget = self.budget_rows(tokens, top_k)
        return _description(
            self.implementation, self, budget, tokens * top_k, pooled=False, scratch_factor=None,
            scratch_rows=0,
        )  # fmt: skip


class SharedSlot:
    """Dist-MoE's activation slot, shared by ``layers`` layers: rows are taken in forward order and
    given back as each backward finishes."""

    OVERFLOW = "capacity flag: raised when the shared slot or the receive scratch would overflow"

    def __init__(self, cfg: MoEConfig, layers: int = 1) -> None:
        self.implementation, self.layers = cfg.implementation, layers
        self.factor, self.scratch_factor = cfg.activation_factor, cfg.scratch_factor
        self.used = 0
        self.slot: torch.Tensor | None = None  # [pooled rows, 2F], once allocated
        self.receive_scratch: torch.Tensor | None = None  # bytes of scratch rows x D, once allocated
        self._scratch_row_bytes = 0

    def allocate(self, cfg: MoEConfig, tokens: int, device: torch.device, saves: bool) -> None:
        """The shared slot (when the work has a backward) and the receive scratch; no host scratch."""
        element = torch.empty((), dtype=cfg.dtype).element_size()
        rows = self.capacity_rows(tokens, cfg.top_k)
        self.slot = torch.empty(rows, 2 * cfg.d_ff, dtype=cfg.dtype, device=device) if saves else None
        self._scratch_row_bytes = cfg.d_model * element
        scratch = self.scratch_rows(tokens, cfg.top_k) * self._scratch_row_bytes
        self.receive_scratch = torch.empty(scratch, dtype=torch.uint8, device=device)

    def buffers(self) -> list[Buffer]:
        found = []
        if self.slot is not None:
            found.append(
                Buffer("activation-slot", self.slot.shape[0], self.slot.shape[1] * self.slot.element_size())
            )
        if self.receive_scratch is not None:
            rows = self.receive_scratch.numel() // self._scratch_row_bytes
            found.append(Buffer("receive-scratch", rows, self._scratch_row_bytes))
        return found

    def layer_rows(self, tokens: int, top_k: int) -> int:
        """One layer's share of the slot: factor x T x K rows."""
        return math.floor(self.factor * tokens * top_k)

    def capacity_rows(self, tokens: int, top_k: int) -> int:
        """The whole slot: every layer's share, pooled."""
        return self.layer_rows(tokens, top_k) * self.layers

    def scratch_rows(self, tokens: int, top_k: int) -> int:
        return math.floor(self.scratch_factor * tokens * top_k)

    def reserve(self, layer: int, routed_rows: int, tokens: int, top_k: int, hold: bool) -> Reservation:
        """Rows are taken from the slot in forward order, whatever the layer."""
        share = self.layer_rows(tokens, top_k)
        retained = min(routed_rows, max(self.capacity_rows(tokens, top_k) - self.used, 0))
        scratch_overflow = routed_rows > self.scratch_rows(tokens, top_k)
        store = None
        if hold:
            if self.slot is not None:
                store = self.slot[self.used : self.used + retained]
            self.used += retained
        state = SavedState.of(
            share, routed_rows, retained, tokens, top_k, retained < routed_rows or scratch_overflow
        )
        return Reservation(state, store)

    def release(self, rows: int) -> None:
        self.used = max(self.used - rows, 0)

    def describe(self, tokens: int, top_k: int) -> Policy:
        """The stack's policy: one pooled slot, receive scratch, zero host scratch."""
        share, scratch = self.layer_rows(tokens, top_k), self.scratch_rows(tokens, top_k)
        return _description(
            self.implementation, self, share, tokens * top_k, pooled=True, scratch_factor=self.scratch_factor,
            scratch_rows=scratch,
        )  # fmt: skip


def _description(
    implementation: str,
    policy: SavedStatePolicy,
    layer_rows: int,
    balanced_rows: int,
    *,
    pooled: bool,
    scratch_factor: float | None,
    scratch_rows: int,
) -> Policy:
    """Per-stack evidence; rows are token-rows, factors in units of T x K (``balanced_rows``)."""
    return Policy(
        implementation=implementation,
        layers=policy.layers,
        requested_factor=policy.factor,
        layer_budget_rows=layer_rows,
        factor=layer_rows / max(balanced_rows, 1),
        pooled=pooled,
        activation_rows=layer_rows * policy.layers,
        scratch_factor=scratch_factor,
        scratch_rows=scratch_rows,
        host_scratch_bytes=0,
        overflow=policy.OVERFLOW,
        buffers=tuple(policy.buffers()),
    )


PolicyFactory = Callable[[MoEConfig, int], SavedStatePolicy]


@cache
def policy_factory(name: str) -> PolicyFactory:
    """The policy class (or factory) the record of implementation ``name`` names, imported once."""
    module, _, attribute = implementation(name).policy.partition(":")
    factory: PolicyFactory = getattr(importlib.import_module(module), attribute)
    return factory


def make_policy(
    cfg: MoEConfig, layers: int = 1, device: torch.device | None = None, saves: bool = True
) -> SavedStatePolicy:
    """The policy of ``cfg.implementation`` for a stack of ``layers`` layers; its buffers are allocated
    on ``device`` when one is given and T is known (``cfg.budget_tokens``), saved-activation storage
    only if the work ``saves`` state for a backward."""
    policy = policy_factory(cfg.implementation)(cfg, layers)
    if device is not None and cfg.budget_tokens is not None:
        policy.allocate(cfg, cfg.budget_tokens, device, saves)
    return policy
