"""Expert weights, drawn one expert at a time from a seed of (seed, layer, expert).

Every expert's values depend only on its own seed, so every rank of every EP size draws the same
values for the same expert, and a rank can draw only its own experts (``ExpertWeights.local``) — at
full scale the whole layer would not fit on one GPU, let alone the host. ``ExpertWeights.random``
draws all of them (the layer API's full-weights form, for tests), the same values expert for expert.
Draws run on the target device with its own generator, in the layer dtype (one expert's draw at a
time beyond the weights), then scaled by 1/sqrt(fan-in) so activations stay O(1) through the layer.
The values depend on the device type's generator (a GPU draws other values than a CPU), never on the
EP size.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pipeline.moe.config import MoEConfig

_LAYER_STRIDE = 1_000_003  # seeds of layers and experts stay apart for any seed < 2^40


def expert_seed(seed: int, layer: int, expert: int) -> int:
    """The generator seed of one expert (the shared experts follow the E routed ones)."""
    return (seed * _LAYER_STRIDE + layer) * _LAYER_STRIDE + expert


def expert_weights(
    cfg: MoEConfig, expert: int, seed: int = 0, device: torch.device | str = "cpu", layer: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Routed expert ``expert``'s (w1 [2F, D], w2 [D, F]) of layer ``layer``: the values its owner holds,
    drawn anywhere (a rank checking rows it sent to another rank's expert draws that expert)."""
    w1, w2 = _draw_one(cfg, expert_seed(seed, layer, expert), torch.device(device))
    return w1.mul_(cfg.d_model**-0.5), w2.mul_(cfg.d_ff**-0.5)


def _draw_one(cfg: MoEConfig, seed: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """One expert's unscaled draw, w1 then w2, from its own generator."""
    gen = torch.Generator(device=device).manual_seed(seed)
    w1 = torch.randn(2 * cfg.d_ff, cfg.d_model, generator=gen, device=device, dtype=cfg.dtype)
    return w1, torch.randn(cfg.d_model, cfg.d_ff, generator=gen, device=device, dtype=cfg.dtype)


@dataclass
class ExpertWeights:
    """w1 [n, 2F, D] (gate rows, then up rows), w2 [n, D, F], shared_w1 [S, 2F, D], shared_w2 [S, D, F].

    ``first`` None: all E routed experts, which a layer slices and clones its own out of; else one
    rank's experts ``first`` .. ``first + n - 1``, which its layer takes as they are (no copy)."""

    w1: torch.Tensor
    w2: torch.Tensor
    shared_w1: torch.Tensor
    shared_w2: torch.Tensor
    first: int | None = None

    @classmethod
    def random(
        cls, cfg: MoEConfig, seed: int = 0, device: torch.device | str = "cpu", layer: int = 0
    ) -> ExpertWeights:
        """All E routed experts (and the shared ones) of layer ``layer``."""
        return cls._draw(cfg, range(cfg.num_experts), seed, device, layer, first=None)

    @classmethod
    def local(
        cls,
        cfg: MoEConfig,
        rank: int,
        ranks: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
        layer: int = 0,
    ) -> ExpertWeights:
        """The routed experts rank ``rank`` of ``ranks`` owns, [rank E/W, (rank+1) E/W), and the
        shared ones: the same values as those experts of :meth:`random`."""
        local = cfg.local_experts(ranks)
        if not 0 <= rank < ranks:
            raise ValueError(f"rank {rank} out of range; allowed: 0..{ranks - 1}")
        experts = range(rank * local, (rank + 1) * local)
        return cls._draw(cfg, experts, seed, device, layer, first=experts.start)

    @classmethod
    def _draw(
        cls,
        cfg: MoEConfig,
        experts: range,
        seed: int,
        device: torch.device | str,
        layer: int,
        first: int | None,
    ) -> ExpertWeights:
        """Routed experts ``experts`` (consecutive ids) and the shared ones, drawn on ``device``."""
        d, f, e, s = cfg.d_model, cfg.d_ff, cfg.num_experts, cfg.num_shared
        device = torch.device(device)

        def fill(first_id: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
            w1 = torch.empty(count, 2 * f, d, dtype=cfg.dtype, device=device)
            w2 = torch.empty(count, d, f, dtype=cfg.dtype, device=device)
            for i in range(count):
                one1, one2 = _draw_one(cfg, expert_seed(seed, layer, first_id + i), device)
                w1[i].copy_(one1)
                w2[i].copy_(one2)
            return w1.mul_(d**-0.5), w2.mul_(f**-0.5)

        w1, w2 = fill(experts.start, len(experts))
        shared_w1, shared_w2 = fill(e, s)
        return cls(w1, w2, shared_w1, shared_w2, first)
