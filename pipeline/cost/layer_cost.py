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
(the report's coarse model). Communication counts only where it ran: on one launched rank (``ranks``
1) rows go to no other rank, so the all-to-all staging of the dispatch and the combine is no pass.

The phase account's work (:func:`phase_work`) splits the same passes by the layer's phases
(:data:`pipeline.base.vocabulary.LAYER_PHASES`) for one rank's tokens and received rows, with the
backward's passes of its own (data- and weight-gradient GEMMs, the SwiGLU backward, the gradients'
all-to-alls and scatters) and the useful FLOPs of each GEMM phase.

One convention, the report's for useful TFLOP/s: ``iteration_bytes`` is the **cluster-average GPU**'s,
whose routed rows are T x K in every layer (the tracked GPU's f and the others' (EP - f) / (EP - 1)
average to 1), so the HBM rate and useful TFLOP/s divide the same GPU's work by the slowest GPU's
time. The prediction uses the busiest GPU's bytes (``forward_bytes`` at its load), as it predicts
that GPU's time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pipeline.base.checks import choice, experts_layout, integer, real
from pipeline.base.vocabulary import FORWARD_EQUIVALENTS, KINDS, LAYER_PHASES, MX_BLOCK, PRECISIONS


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
    ranks: int = 0  # ranks launched (0: ep): rows cross to ranks - 1 others, none on one

    def __post_init__(self) -> None:
        choice("kind", self.kind, KINDS)
        choice("precision", self.precision, PRECISIONS)
        for name in ("tokens", "d_model", "d_ff", "num_experts", "top_k", "ep"):
            object.__setattr__(self, name, integer(name, getattr(self, name), low=1))
        object.__setattr__(self, "num_shared", integer("num_shared", self.num_shared, low=0))
        if self.element_bytes not in (2, 4):
            raise ValueError(f"element_bytes must be 2 (bfloat16) or 4 (float32), got {self.element_bytes!r}")
        experts_layout(self.num_experts, self.top_k, self.ep, names=("num_experts", "top_k", "ep"))
        ranks = integer("ranks", self.ranks, low=0) or self.ep
        if ranks > self.ep:
            raise ValueError(f"ranks must be at most ep={self.ep}, got {ranks}")
        object.__setattr__(self, "ranks", ranks)
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

    @property
    def communicates(self) -> bool:
        """Whether rows cross between ranks (more than one rank launched)."""
        return self.ranks > 1

    @property
    def remote_share(self) -> float:
        """The share of a rank's routed rows that another rank holds the experts of."""
        return (self.ranks - 1) / self.ranks


def row_bytes(elements: int, precision: str) -> float:
    """Bytes of one row of ``elements`` values along K in ``precision``."""
    if precision == "bf16":
        return 2.0 * elements
    return float(elements + math.ceil(elements / MX_BLOCK))


def forward_terms(s: LayerShape, load: float, dispatch: str = "bf16") -> dict[str, float]:
    """Logical bytes of one layer forward on a GPU whose routed rows are ``load`` x T x K, per pass
    (the module docstring lists them); ``dispatch`` is the wire precision ("mxfp8" for FP8 payloads)."""
    return _terms(s, float(s.tokens), load * s.tokens * s.top_k, dispatch)


def _terms(s: LayerShape, tokens: float, rows: float, dispatch: str) -> dict[str, float]:
    """:func:`forward_terms` of ``tokens`` token rows and ``rows`` received rows."""
    choice("dispatch", dispatch, PRECISIONS)
    d, f, e = s.d_model, s.d_ff, float(s.element_bytes)
    sets = s.num_experts / s.ep
    wire = row_bytes(d, dispatch) if dispatch == "mxfp8" else e * d
    operand_d, operand_f = _operand(d, s.precision, e), _operand(f, s.precision, e)
    mx = s.precision == "mxfp8"
    shared = float(s.num_shared)
    staged = 1.0 if s.communicates else 0.0
    return {
        "dispatch_gather": tokens * d * e + rows * wire,
        "dispatch_all_to_all": staged * (2 * rows * wire + 2 * rows * wire),  # send + receive, regroup
        "quantize_rows": rows * (d * e + operand_d) if mx and dispatch != "mxfp8" else 0.0,
        "gemm1": rows * operand_d + sets * 2 * f * operand_d + rows * 2 * f * e,
        "swiglu": rows * (2 * f * e + f * e),
        "quantize_activation": rows * (f * e + operand_f) if mx else 0.0,
        "gemm2": rows * operand_f + sets * d * operand_f + rows * d * e,
        "combine": staged * 2 * rows * d * e + rows * d * e + tokens * d * 4.0,
        "shared_expert": shared * (
            tokens * d * e + 2 * f * d * e + tokens * 2 * f * e  # GEMM-1
            + tokens * 3 * f * e  # SwiGLU
            + tokens * f * e + d * f * e + tokens * d * e  # GEMM-2
        ),
    }  # fmt: skip


@dataclass(frozen=True)
class PhaseWork:
    """One phase's work in one iteration on one rank: useful FLOPs (no padding, no recompute), logical
    HBM bytes, the bytes that cross to other ranks, and what its FLOPs run on (``routed``: the routed
    GEMMs' product, ``dense``: the layer dtype's; None for a phase of bytes only)."""

    flops: float = 0.0
    bytes: float = 0.0
    link_bytes: float = 0.0
    tensor: str | None = None

    def __add__(self, other: PhaseWork) -> PhaseWork:
        return PhaseWork(
            self.flops + other.flops,
            self.bytes + other.bytes,
            self.link_bytes + other.link_bytes,
            self.tensor or other.tensor,
        )


def phase_work(
    s: LayerShape, tokens: Sequence[float], rows: Sequence[float], dispatch: str = "bf16"
) -> dict[str, PhaseWork]:
    """Each layer phase's work in one iteration on a rank fed ``tokens[l]`` token rows whose experts
    receive ``rows[l]`` rows in timed layer l (forward, and the backward where the kind has one):
    the forward's passes of :func:`forward_terms` by phase, the backward's own (each GEMM's data and
    weight gradient, 6 x rows x D x F FLOPs each; the SwiGLU backward reading dA and H, writing dH and
    A; MXFP8's fake quantization of A; the gradients' all-to-alls in the layer dtype and their
    scatters; the shared expert's 12 x T x D x F FLOPs). ``other`` has no work of its own."""
    if len(tokens) != len(s.layer_loads) or len(rows) != len(s.layer_loads):
        raise ValueError(
            f"need tokens and rows for {len(s.layer_loads)} layer(s), got {len(tokens)}, {len(rows)}"
        )
    out = {p: PhaseWork() for p in LAYER_PHASES}
    for t, r in zip(tokens, rows, strict=True):
        for phase, work in _layer_work(s, float(t), float(r), dispatch).items():
            out[phase] = out[phase] + work
    return out


def _layer_work(s: LayerShape, t: float, r: float, dispatch: str) -> dict[str, PhaseWork]:
    d, f, e, shared = s.d_model, s.d_ff, float(s.element_bytes), float(s.num_shared)
    sets = s.num_experts / s.ep
    terms = _terms(s, t, r, dispatch)
    wire = row_bytes(d, dispatch) if dispatch == "mxfp8" else e * d
    remote = s.remote_share if s.communicates else 0.0
    gemm_flops = 6.0 * r * d * f
    work = {
        "fprop": PhaseWork(gemm_flops, terms["gemm1"] + terms["gemm2"], tensor="routed"),
        "swiglu": PhaseWork(bytes=terms["swiglu"]),
        "quantize": PhaseWork(bytes=terms["quantize_rows"] + terms["quantize_activation"]),
        "permute": PhaseWork(bytes=terms["dispatch_gather"] + r * d * e + t * d * 4.0),
        "dispatch": PhaseWork(bytes=terms["dispatch_all_to_all"], link_bytes=remote * r * wire),
        "combine": PhaseWork(bytes=terms["combine"] - r * d * e - t * d * 4.0, link_bytes=remote * r * d * e),
        "shared": PhaseWork(6.0 * t * d * f * shared, terms["shared_expert"], tensor="dense"),
    }
    if not FORWARD_EQUIVALENTS[s.kind] > 1:
        return work
    staged = 1.0 if s.communicates else 0.0
    backward = {
        "dgrad": PhaseWork(
            gemm_flops,
            r * d * e + sets * d * f * e + r * f * e + r * 2 * f * e + sets * 2 * f * d * e + r * d * e,
            tensor="dense",
        ),
        "wgrad": PhaseWork(
            gemm_flops,
            r * d * e + r * f * e + sets * d * f * e + r * 2 * f * e + r * d * e + sets * 2 * f * d * e,
            tensor="dense",
        ),
        "swiglu": PhaseWork(bytes=6 * r * f * e),
        "quantize": PhaseWork(bytes=2 * r * f * e if s.precision == "mxfp8" else 0.0),
        "permute": PhaseWork(bytes=2 * r * d * e + t * d * (4.0 + e)),
        "dispatch": PhaseWork(bytes=staged * 4 * r * d * e, link_bytes=remote * r * d * e),
        "combine": PhaseWork(bytes=staged * 2 * r * d * e, link_bytes=remote * r * d * e),
        "shared": PhaseWork(12.0 * t * d * f * shared, 2 * terms["shared_expert"], tensor="dense"),
    }
    return {p: work.get(p, PhaseWork()) + backward.get(p, PhaseWork()) for p in {*work, *backward}}


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
