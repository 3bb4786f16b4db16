"""Routing: seeded plans that realize a tracked-GPU load exactly, and validation of given routing.

A plan fixes how many routed rows each source rank sends to each destination rank
(:mod:`pipeline.matrix.loads`: rank 0 receives ``round(f x T x K)`` rows, f = load factor, T x K the
balanced share, and the other ranks split the rest evenly). Each source deals its rows to its tokens
so that every token gets K distinct experts, then picks the experts inside each destination at random
(seeded per rank).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import torch

from pipeline.matrix.loads import Loads


def validate_routing(
    topk_idx: torch.Tensor, topk_weight: torch.Tensor, num_tokens: int, num_experts: int, top_k: int
) -> None:
    """Raise ValueError naming what is wrong with caller-given routing."""
    if topk_idx.dtype != torch.int64:
        raise ValueError(f"topk_idx must be int64, got {topk_idx.dtype}")
    if topk_weight.dtype != torch.float32:
        raise ValueError(f"topk_weight must be float32, got {topk_weight.dtype}")
    for name, t in (("topk_idx", topk_idx), ("topk_weight", topk_weight)):
        if tuple(t.shape) != (num_tokens, top_k):
            raise ValueError(f"{name} must have shape [{num_tokens}, {top_k}], got {list(t.shape)}")
    if topk_idx.numel() == 0:
        return
    lo, hi = int(topk_idx.min()), int(topk_idx.max())
    if lo < 0 or hi >= num_experts:
        bad = lo if lo < 0 else hi
        raise ValueError(f"expert id {bad} out of range; allowed: 0..{num_experts - 1}")
    ordered = topk_idx.sort(dim=1).values
    repeats = (ordered[:, 1:] == ordered[:, :-1]).any(dim=1)
    if bool(repeats.any()):
        token = int(repeats.nonzero()[0, 0])
        raise ValueError(
            f"token {token} routes to expert ids {topk_idx[token].tolist()}: ids must be distinct per token"
        )


@dataclass(frozen=True)
class RoutingPlan(Loads):
    """Deterministic routing for ``world_size`` ranks of ``num_tokens`` tokens each: the loads
    (:class:`~pipeline.matrix.loads.Loads`, checked there) and the seeded draw of the experts."""

    seed: int

    @cached_property
    def send_matrix(self) -> torch.Tensor:
        """[source, destination] row counts (:attr:`Loads.sent`)."""
        return torch.from_numpy(self.sent)

    def for_rank(self, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(topk_idx [T, K] int64 global expert ids, topk_weight [T, K] float32) of source ``rank``."""
        t, k, local = self.num_tokens, self.top_k, self.local_experts
        dest, nth = self._deal(rank)
        # Within a destination, a token's j-th slot takes the j-th expert of a random local permutation.
        perms = torch.stack([self._permutations(rank, d) for d in range(self.world_size)], dim=1)
        local_id = perms[torch.arange(t)[:, None], dest, nth]
        topk_idx = dest * local + local_id
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + rank)
        return topk_idx, torch.softmax(torch.randn(t, k, generator=gen), dim=-1)

    def sent_to(self, rank: int, dest: int) -> torch.Tensor:
        """Rows source ``rank`` sends to each local expert of rank ``dest`` [E/W], as :meth:`for_rank`
        routes them, drawing that destination's permutations only (host-side planning of what one
        rank receives, without every source's whole routing)."""
        dest_of, nth = self._deal(rank)
        tokens, slots = (dest_of == dest).nonzero(as_tuple=True)
        chosen = self._permutations(rank, dest)[tokens, nth[tokens, slots]]
        return torch.bincount(chosen, minlength=self.local_experts)

    def _deal(self, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Source ``rank``'s destination per slot [T, K], and each slot's rank among the token's slots
        to the same destination [T, K]."""
        if not 0 <= rank < self.world_size:
            raise ValueError(f"rank {rank} out of range; allowed: 0..{self.world_size - 1}")
        t, k = self.num_tokens, self.top_k
        # Deal this source's destination labels, sorted, with stride T: token i gets slots i, i+T, ...
        # A destination with n rows then lands at most ceil(n / T) <= local times on one token.
        dest = torch.repeat_interleave(
            torch.arange(self.world_size), self.send_matrix[rank], output_size=t * k
        )
        dest = dest.view(k, t).T  # [T, K]
        nth = torch.zeros_like(dest)
        for j in range(1, k):
            nth[:, j] = (dest[:, :j] == dest[:, j : j + 1]).sum(dim=1)
        return dest, nth

    def _permutations(self, rank: int, dest: int) -> torch.Tensor:
        """Per token, a random order of ``dest``'s local experts [T, E/W], seeded per (source, dest)."""
        seed = (self.seed * 1_000_003 + rank) * 65_537 + 1 + dest
        gen = torch.Generator().manual_seed(seed)
        return torch.rand(self.num_tokens, self.local_experts, generator=gen).argsort(dim=-1)


@lru_cache(maxsize=256)
def routing_plan(
    num_tokens: int, num_experts: int, top_k: int, world_size: int, load_factor: float = 1.0, seed: int = 0
) -> RoutingPlan:
    """A seeded plan; see :class:`RoutingPlan`. The same arguments give the same (immutable) plan
    object, so its send matrix is computed once per process."""
    return RoutingPlan(num_tokens, num_experts, top_k, world_size, float(load_factor), seed)
