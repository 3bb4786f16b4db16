"""The project's MoE layer in model terms: logical HBM bytes and a predicted iteration time.

The layer: SwiGLU experts (W1 gate+up [2F, D], W2 [D, F]), top-K routing over E experts split over EP
ranks, ``num_shared`` BF16 shared experts over every token, routed GEMMs in BF16 or MXFP8. The tracked
GPU (rank 0) receives a load factor f times the balanced routed rows, f*T*K, for each timed layer.

Byte model (logical, not measured traffic) of one forward on a GPU, per expert group with ``rows``
token-rows and ``sets`` weight sets: read the input rows [rows, D]; read W1 and W2; write the SwiGLU
activation [rows, F] (fused into the first GEMM) and read it back for the second; write the output
rows [rows, D] in BF16. Inputs, weights and activation are in the GEMM precision: BF16 is 2 bytes per
element, MXFP8 one E4M3 byte per element plus one E8M0 scale byte per 32 elements along K. Training
and each packing layer count 3x the forward bytes (forward + two backward GEMMs per forward GEMM).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline.model.checks import choice, experts_layout, integer, real
from pipeline.vocabulary import FORWARD_EQUIVALENTS, KINDS, MX_BLOCK, PRECISIONS


@dataclass(frozen=True)
class LayerShape:
    """A layer shape on one GPU, validated on construction; ``layer_loads`` holds the tracked GPU's
    load factor per timed layer (one, or ten for packing). Every bad value raises ValueError naming it
    and what is allowed."""

    kind: str
    tokens: int
    d_model: int
    d_ff: int
    num_experts: int
    top_k: int
    ep: int
    precision: str
    layer_loads: tuple[float, ...]
    num_shared: int = 1

    def __post_init__(self) -> None:
        choice("kind", self.kind, KINDS)
        choice("precision", self.precision, PRECISIONS)
        for name in ("tokens", "d_model", "d_ff", "num_experts", "top_k", "ep"):
            object.__setattr__(self, name, integer(name, getattr(self, name), low=1))
        object.__setattr__(self, "num_shared", integer("num_shared", self.num_shared, low=0))
        experts_layout(self.num_experts, self.top_k, self.ep, names=("num_experts", "top_k", "ep"))
        loads = tuple(self.layer_loads)
        if self.kind == "packing" and not loads:
            raise ValueError("layer_loads must hold one load factor per packing layer, got none")
        if self.kind != "packing" and len(loads) != 1:
            raise ValueError(
                f"layer_loads must hold exactly one load factor for {self.kind}, got {len(loads)}"
            )
        for i, load in enumerate(loads):
            real(f"layer_loads[{i}]", load, low=0.0, strict=False)
            if load > self.ep:
                raise ValueError(
                    f"layer_loads[{i}]={load} exceeds ep={self.ep}: one GPU cannot get more rows"
                )
        object.__setattr__(self, "layer_loads", tuple(float(x) for x in loads))

    @property
    def forward_equivalents(self) -> int:
        """Forward passes' worth of GEMM work per timed layer."""
        return FORWARD_EQUIVALENTS[self.kind]


def row_bytes(elements: int, precision: str) -> float:
    """Bytes of one row of ``elements`` values along K in ``precision``."""
    if precision == "bf16":
        return 2.0 * elements
    return float(elements + math.ceil(elements / MX_BLOCK))


def expert_bytes(rows: float, sets: float, d_model: int, d_ff: int, precision: str) -> float:
    """Logical bytes of one forward of SwiGLU experts: ``rows`` token-rows through ``sets`` weight sets."""
    activations = rows * (row_bytes(d_model, precision) + 2 * row_bytes(d_ff, precision) + 2.0 * d_model)
    weights = sets * (2 * d_ff * row_bytes(d_model, precision) + d_model * row_bytes(d_ff, precision))
    return activations + weights


def forward_bytes(s: LayerShape, load: float) -> float:
    """Logical bytes of one layer forward on a GPU whose routed rows are ``load`` x T x K."""
    routed = expert_bytes(load * s.tokens * s.top_k, s.num_experts / s.ep, s.d_model, s.d_ff, s.precision)
    shared = expert_bytes(s.num_shared * s.tokens, s.num_shared, s.d_model, s.d_ff, "bf16")
    return routed + shared


def iteration_bytes(s: LayerShape) -> float:
    """Analytical logical HBM bytes of one timed iteration on the tracked GPU (rank 0): the numerator
    of the report's "HBM model" rate. Inference: one forward; training: 3x forward; packing: 3x
    forward summed over the layers of ``layer_loads``."""
    return s.forward_equivalents * sum(forward_bytes(s, load) for load in s.layer_loads)
