"""Packing: ten independent layers, all forwards issued before the backwards in reverse order, with
the memory policy applied across the stack (MoK: a budget per layer; Dist-MoE: one shared slot)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist

from pipeline.moe.comm import Group
from pipeline.moe.config import MoEConfig
from pipeline.moe.layer import MoELayer
from pipeline.moe.policy import SavedState, SavedStatePolicy, make_policy
from pipeline.moe.weights import ExpertWeights

Route = tuple[torch.Tensor, torch.Tensor]


class LayerStack(torch.nn.Module):
    """Independent layers sharing one policy object."""

    layers: Sequence[MoELayer]

    def __init__(self, layers: Sequence[MoELayer]) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)  # type: ignore[assignment]  # holds MoELayers only

    def forward(self, xs: Sequence[torch.Tensor], routes: Sequence[Route]) -> list[torch.Tensor]:
        if len(xs) != len(self.layers) or len(routes) != len(self.layers):
            raise ValueError(f"need {len(self.layers)} inputs and routes, got {len(xs)} and {len(routes)}")
        return [
            layer(x, idx, weight) for layer, x, (idx, weight) in zip(self.layers, xs, routes, strict=True)
        ]

    def backward(self, ys: Sequence[torch.Tensor], grads: Sequence[torch.Tensor]) -> None:
        """Backward of each layer, last layer first."""
        for i in reversed(range(len(ys))):
            torch.autograd.backward(ys[i], grads[i])

    @property
    def policy(self) -> SavedStatePolicy:
        """The one policy object every layer of the stack shares."""
        return self.layers[0].policy

    @property
    def saved_state(self) -> list[SavedState]:
        """Evidence of each layer's last forward."""
        states = [layer.saved_state for layer in self.layers]
        if any(s is None for s in states):
            raise ValueError("saved state exists only after a forward of every layer")
        return [s for s in states if s is not None]


def build_stack(
    cfg: MoEConfig,
    weights: Sequence[ExpertWeights],
    group: dist.ProcessGroup | Group | None = None,
    *,
    backward: bool = True,
) -> LayerStack:
    """Layers built from ``weights`` (one per layer), sharing the policy of ``cfg.implementation``.
    With a known T (``cfg.budget_tokens``) the policy's buffers are allocated here, on the weights'
    device, once for every iteration (saved-activation storage only when there is a ``backward``)."""
    if not weights:
        raise ValueError("a stack needs at least one layer's weights")
    policy = make_policy(cfg, len(weights), weights[0].w1.device, saves=backward)
    return LayerStack([MoELayer(cfg, w, group, policy, index) for index, w in enumerate(weights)])
