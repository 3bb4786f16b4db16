"""The timed work of one execution on this rank: its layers, inputs and routing.

Inference is one layer forward (no autograd), training one layer forward + backward, packing ten
independent layers: all ten forwards, then the ten backwards in reverse order (``build_stack``).
Weights (each rank draws its own experts, the same values for an expert at every EP size), inputs
and routing plans are seeded, so every attempt of an execution runs the same numbers.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from pipeline.base.saved_state import Policy, SavedState
from pipeline.base.vocabulary import has_backward
from pipeline.bench.steps import Steps
from pipeline.data.meta import EmulationCopies
from pipeline.matrix import Execution
from pipeline.matrix.loads import layer_loads
from pipeline.matrix.scale import Shape
from pipeline.moe import ExpertWeights, LayerStack, MoEConfig, RoutingPlan, build_stack, routing_plan
from pipeline.moe.config import TORCH_DTYPES


def layer_config(execution: Execution, shape: Shape) -> MoEConfig:
    """Layer config of the launched ranks; budgets sized for the nominal T whatever T'_l a layer gets."""
    v = execution.variant
    return MoEConfig(
        d_model=shape.d_model,
        d_ff=shape.d_ff,
        num_experts=shape.layer_experts,
        top_k=shape.top_k,
        num_shared=shape.num_shared,
        implementation=v.implementation,
        pipeline=v.pipeline,
        precision=v.precision,
        dtype=TORCH_DTYPES[shape.dtype],
        budget_tokens=shape.nominal_tokens,
    )


def routing_plans(shape: Shape, seed: int) -> list[RoutingPlan]:
    """One plan per timed layer, of its loads (:func:`pipeline.matrix.loads.layer_loads`: rank 0
    receives ``shape.tracked_rows[l]`` rows in layer l), seeded per layer."""
    loads = layer_loads(shape)
    return [routing_plan(**asdict(layer), seed=seed * 1000 + i) for i, layer in enumerate(loads)]


@dataclass
class Work:
    """Forward and backward of this rank's layers on fixed inputs."""

    stack: LayerStack
    xs: list[torch.Tensor]
    routes: list[tuple[torch.Tensor, torch.Tensor]]
    grads: list[torch.Tensor] | None  # None: inference (forward only, no autograd)

    def forward(self) -> list[torch.Tensor]:
        if self.grads is None:
            with torch.inference_mode():
                return self.stack.forward(self.xs, self.routes)
        return self.stack.forward(self.xs, self.routes)

    def backward(self, ys: list[torch.Tensor]) -> None:
        if self.grads is None:
            raise ValueError("an inference execution has no backward")
        self.stack.backward(ys, self.grads)
        for p in self.stack.parameters():
            p.grad = None  # every iteration computes fresh gradients, as one training step would

    def steps(self) -> Steps:
        """The eager steps of this work."""
        return Steps(self.forward, self.backward if self.grads is not None else None)

    @property
    def config(self) -> MoEConfig:
        """The config every layer of the stack shares."""
        return self.stack.layers[0].cfg

    def emulation_copies(self) -> EmulationCopies:
        """Bytes only these layers hold (after a forward): the dequantized MXFP8 weight values kept
        beside the quantized weights, and, with a backward, the dispatched rows each layer's routed
        GEMMs save for it (the last forward's routed rows x D)."""
        values = sum(layer.mx_value_bytes() for layer in self.stack.layers)
        rows = 0
        if self.grads is not None:
            element = torch.empty((), dtype=self.config.dtype).element_size()
            rows = sum(s.routed_rows for s in self.stack.saved_state) * self.config.d_model * element
        return EmulationCopies(mx_weight_values=values, saved_dispatched_rows=rows)

    def policy(self) -> Policy:
        """The stack's allocation policy at the nominal T (what its budgets are sized for)."""
        layer = self.stack.layers[0]
        return self.stack.policy.describe(layer.cfg.budget_tokens or self.xs[0].shape[0], layer.cfg.top_k)

    def saved_state(self) -> list[SavedState]:
        """Evidence of one forward (the backward follows, releasing what the forward reserved)."""
        ys = self.forward()
        state = self.stack.saved_state
        if self.grads is not None:
            self.backward(ys)
        return state


class Shared:
    """What the executions of one job share: each rank's BF16 expert weights, drawn once per (layer
    shape, dtype, seed, rank, layer) and kept while the next execution draws the same (MoK and
    Dist-MoE, BF16 and MXFP8, draw identical per-expert values); each execution builds only what is
    its own from them (MX prepared forms, policy buffers). Layers never write their weights."""

    def __init__(self) -> None:
        self.weights: dict[tuple[object, ...], ExpertWeights] = {}

    def local_weights(
        self, cfg: MoEConfig, rank: int, ranks: int, seed: int, device: torch.device, layers: int
    ) -> list[ExpertWeights]:
        """This rank's weights of ``layers`` layers; any others drawn before are let go."""
        base = (cfg.d_model, cfg.d_ff, cfg.num_experts, cfg.num_shared, str(cfg.dtype), rank, ranks, seed)
        keys = [(*base, str(device), layer) for layer in range(layers)]
        self.weights = {k: w for k, w in self.weights.items() if k in keys}
        for layer, k in enumerate(keys):
            if k not in self.weights:
                self.weights[k] = ExpertWeights.local(cfg, rank, ranks, seed, device, layer)
        return [self.weights[k] for k in keys]


def build_work(
    execution: Execution,
    shape: Shape,
    rank: int,
    device: torch.device,
    seed: int,
    shared: Shared | None = None,
) -> Work:
    cfg = layer_config(execution, shape)
    plans = routing_plans(shape, seed)
    training = has_backward(execution.workload.kind)
    # This rank's experts only, drawn on the device (every EP size draws the same values for an
    # expert). Building a layer prepares its quantized weights, and the stack its policy's buffers,
    # so they exist before any timing.
    weights = (shared or Shared()).local_weights(cfg, rank, shape.ranks, seed, device, len(plans))
    stack = build_stack(cfg, weights, backward=training)
    gen = torch.Generator(device=device).manual_seed(seed * 1_000_003 + rank)

    def tensor(tokens: int) -> torch.Tensor:
        return torch.randn(tokens, shape.d_model, generator=gen, device=device).to(cfg.dtype)

    xs = [tensor(tokens).requires_grad_(training) for tokens in shape.layer_tokens]
    routes = [(idx.to(device), weight.to(device)) for idx, weight in (p.for_rank(rank) for p in plans)]
    grads = [tensor(tokens) for tokens in shape.layer_tokens] if training else None
    return Work(stack, xs, routes, grads)
