"""The project's MoE layer in model terms: logical HBM bytes and a predicted iteration time.

The layer: SwiGLU experts (W1 gate+up [2F, D], W2 [D, F]), top-K routing over E experts split over EP
ranks, ``num_shared`` BF16 shared experts over every token, routed GEMMs in BF16 or MXFP8. The tracked
GPU (rank 0) receives a load factor f times the balanced routed rows, f*T*K, for each timed layer.

Byte model (logical, not measured traffic): ``forward_terms`` lists every pass one layer forward
makes over HBM on one GPU whose experts receive ``load`` x T x K rows (R): the dispatch gather (read
the T token rows, write R send rows at the wire precision), the all-to-all staging (read the send
buffer, write the receive buffer, and the regroup by expert reads and writes it again), the
quantization of the received rows (MXFP8 routed GEMMs without an FP8 wire: read R rows, write them
in MXFP8), GEMM-1 (read R rows and the local W1 [2F, D] sets, write the 2F-wide GEMM-1 output), the
SwiGLU (read 2F, write F), the activation's quantization (MXFP8), GEMM-2 (read R rows of F and the
W2 [D, F] sets, write R output rows of D), the combine (its all-to-all staging reads and writes R rows,
the weighted scatter-add reads them and writes the T float32 token rows), and the shared expert (the
same GEMM passes over T rows, in the layer dtype). Activations in the layer dtype take
``element_bytes`` per element; GEMM operands in MXFP8 one E4M3 byte per element plus one E8M0 scale
byte per 32 along K; the FP8 wire the same for D. Training and each packing layer count 3x forward
(the report's coarse model).

One convention, the report's for useful TFLOP/s: ``iteration_bytes`` is the **cluster-average GPU**'s,
whose routed rows are T x K in every layer (the tracked GPU's f and the others' (EP - f) / (EP - 1)
average to 1), so the HBM rate and useful TFLOP/s divide the same GPU's work by the slowest GPU's
time. The prediction uses the busiest GPU's bytes (``forward_bytes`` at its load), as it predicts
that GPU's time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline.base.checks import choice, experts_layout, integer, real
from pipeline.base.vocabulary import FORWARD_EQUIVALENTS, KINDS, MX_BLOCK, PRECISIONS


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
    element_bytes: int = 2  # the layer dtype's: 2 for bfloat16, 4 for float32

    def __post_init__(self) -> None:
        choice("kind", self.kind, KINDS)
        choice("precision", self.precision, PRECISIONS)
        for name in ("tokens", "d_model", "d_ff", "num_experts", "top_k", "ep"):
            object.__setattr__(self, name, integer(name, getattr(self, name), low=1))
        object.__setattr__(self, "num_shared", integer("num_shared", self.num_shared, low=0))
        if self.element_bytes not in (2, 4):
            raise ValueError(f"element_bytes must be 2 (bfloat16) or 4 (float32), got {self.element_bytes!r}")
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


def forward_terms(s: LayerShape, load: float, dispatch: str = "bf16") -> dict[str, float]:
    """Logical bytes of one layer forward on a GPU whose routed rows are ``load`` x T x K, per pass
    (the module docstring lists them); ``dispatch`` is the wire precision ("mxfp8" for FP8 payloads)."""
    choice("dispatch", dispatch, PRECISIONS)
    d, f, e = s.d_model, s.d_ff, float(s.element_bytes)
    rows, tokens, sets = load * s.tokens * s.top_k, float(s.tokens), s.num_experts / s.ep
    wire = row_bytes(d, dispatch) if dispatch == "mxfp8" else e * d
    operand_d, operand_f = _operand(d, s.precision, e), _operand(f, s.precision, e)
    mx = s.precision == "mxfp8"
    shared = float(s.num_shared)
    return {
        "dispatch_gather": tokens * d * e + rows * wire,
        "dispatch_all_to_all": 2 * rows * wire + 2 * rows * wire,  # send + receive, regroup
        "quantize_rows": rows * (d * e + operand_d) if mx and dispatch != "mxfp8" else 0.0,
        "gemm1": rows * operand_d + sets * 2 * f * operand_d + rows * 2 * f * e,
        "swiglu": rows * (2 * f * e + f * e),
        "quantize_activation": rows * (f * e + operand_f) if mx else 0.0,
        "gemm2": rows * operand_f + sets * d * operand_f + rows * d * e,
        "combine": 2 * rows * d * e + rows * d * e + tokens * d * 4.0,
        "shared_expert": shared * (
            tokens * d * e + 2 * f * d * e + tokens * 2 * f * e  # GEMM-1
            + tokens * 3 * f * e  # SwiGLU
            + tokens * f * e + d * f * e + tokens * d * e  # GEMM-2
        ),
    }  # fmt: skip


def _operand(elements: int, precision: str, element_bytes: float) -> float:
    """Bytes of one GEMM operand row: the layer dtype for BF16 GEMMs, MXFP8 otherwise."""
    return element_bytes * elements if precision == "bf16" else row_bytes(elements, precision)


def forward_bytes(s: LayerShape, load: float, dispatch: str = "bf16") -> float:
    """Logical bytes of one layer forward on a GPU whose routed rows are ``load`` x T x K."""
    return sum(forward_terms(s, load, dispatch).values())


def iteration_bytes(s: LayerShape, dispatch: str = "bf16") -> float:
    """Analytical logical HBM bytes of one timed iteration on the cluster-average GPU (load 1 in every
    layer): the numerator of the report's "HBM model" rate. Inference: one forward; training: 3x
    forward; packing: 3x forward for each of its layers."""
    return s.forward_equivalents * len(s.layer_loads) * forward_bytes(s, 1.0, dispatch)
