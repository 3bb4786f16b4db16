"""Full expert weights, identical on every rank (each rank then keeps its own slice)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pipeline.moe.config import MoEConfig


@dataclass
class ExpertWeights:
    """w1 [E, 2F, D] (gate rows, then up rows), w2 [E, D, F], shared_w1 [S, 2F, D], shared_w2 [S, D, F]."""

    w1: torch.Tensor
    w2: torch.Tensor
    shared_w1: torch.Tensor
    shared_w2: torch.Tensor

    @classmethod
    def random(cls, cfg: MoEConfig, seed: int = 0, device: torch.device | str = "cpu") -> ExpertWeights:
        """Deterministic for a seed on every rank and device: drawn on the CPU in float32, then moved.
        Scaled by 1/sqrt(fan-in) so activations stay O(1) through the layer."""
        gen = torch.Generator().manual_seed(seed)
        d, f, e, s = cfg.d_model, cfg.d_ff, cfg.num_experts, cfg.num_shared

        def draw(*shape: int, fan_in: int) -> torch.Tensor:
            t = torch.randn(*shape, generator=gen) * fan_in**-0.5
            return t.to(device=device, dtype=cfg.dtype)

        return cls(
            w1=draw(e, 2 * f, d, fan_in=d),
            w2=draw(e, d, f, fan_in=f),
            shared_w1=draw(s, 2 * f, d, fan_in=d),
            shared_w2=draw(s, d, f, fan_in=f),
        )
