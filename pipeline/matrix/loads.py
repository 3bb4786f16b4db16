"""The rows each rank of a shape's layer sends every other, and whether ranks can realize them: the
part of a routing plan that is arithmetic. It needs no torch, so the launcher refuses a workload its
ranks cannot realize before submitting anything, in a process that never imports torch;
:class:`pipeline.moe.routing.RoutingPlan` adds the seeded draw of the experts themselves.

Rank 0 receives ``round(f x T x K)`` rows (f = load factor; T x K is the balanced share), the other
ranks split the rest evenly; every row slot of the whole step gets a destination label, interleaved
by fractional position, so that each source's contiguous share of slots holds each destination in
proportion.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from pipeline.matrix.scale import Shape


def _even_split(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (i < extra) for i in range(parts)]


@dataclass(frozen=True)
class Loads:
    """``world_size`` ranks of ``num_tokens`` tokens each, K = ``top_k`` experts a token, rank 0 at
    ``load_factor`` times the balanced share. Refuses, in one line, loads no routing can realize."""

    num_tokens: int
    num_experts: int
    top_k: int
    world_size: int
    load_factor: float

    def __post_init__(self) -> None:
        for name in ("num_tokens", "num_experts", "top_k", "world_size"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k={self.top_k} exceeds num_experts={self.num_experts}")
        if self.num_experts % self.world_size:
            raise ValueError(
                f"num_experts={self.num_experts} is not divisible by world_size={self.world_size}"
            )
        if not 0 < self.load_factor <= self.world_size:
            raise ValueError(
                f"load_factor={self.load_factor} is not feasible for {self.world_size} ranks; "
                f"allowed: 0 < f <= {self.world_size}"
            )
        if self.world_size == 1 and self.received_rows[0] != self.num_tokens * self.top_k:
            raise ValueError(
                f"load_factor={self.load_factor} needs more than one rank; allowed with 1 rank: 1.0"
            )
        cap = self.num_tokens * min(self.top_k, self.num_experts // self.world_size)
        worst = int(self.sent.max())
        if worst > cap:
            raise ValueError(
                f"load_factor={self.load_factor} is not feasible: a rank would send {worst} rows to one "
                f"destination, but {self.num_tokens} tokens with distinct experts can send at most {cap}"
            )

    @property
    def local_experts(self) -> int:
        return self.num_experts // self.world_size

    @cached_property
    def received_rows(self) -> list[int]:
        """Rows each destination rank receives: rank 0 gets round(f x T x K), the rest split evenly."""
        balanced = self.num_tokens * self.top_k
        hot = round(self.load_factor * balanced)
        if self.world_size == 1:
            return [hot]
        return [hot, *_even_split(self.world_size * balanced - hot, self.world_size - 1)]

    @cached_property
    def sent(self) -> np.ndarray:
        """[source, destination] row counts (int64): rows sum to T x K, columns to ``received_rows``.
        The step's slots, sorted stably by each label's fractional position (i + 0.5) / count, are
        dealt to the sources in contiguous shares of T x K."""
        counts = np.array(self.received_rows, dtype=np.int64)
        labels = np.repeat(np.arange(self.world_size), counts)
        rank_in_dest = np.concatenate([np.arange(c) for c in counts])
        position = (rank_in_dest + 0.5) / counts[labels].astype(np.float64)
        slots = labels[np.argsort(position, kind="stable")].reshape(self.world_size, -1)
        return np.stack([np.bincount(s, minlength=self.world_size) for s in slots])


def layer_loads(shape: Shape) -> list[Loads]:
    """The loads of each timed layer of ``shape``: ``shape.layer_tokens[l]`` tokens per rank, rank 0
    receiving ``shape.tracked_rows[l]`` rows."""
    return [
        Loads(
            num_tokens=tokens,
            num_experts=shape.layer_experts,
            top_k=shape.top_k,
            world_size=shape.ranks,
            load_factor=rows / (tokens * shape.top_k),
        )
        for tokens, rows in zip(shape.layer_tokens, shape.tracked_rows, strict=True)
    ]
