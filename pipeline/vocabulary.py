"""The words every stage shares, defined once and free of heavy imports.

What a kind of workload times (its phases, layers and multiple of the forward GEMM work), which
implementation / precision / pipeline combinations exist, the dtypes a scale may name, the forms of
the fused SwiGLU backward, and the MXFP8 block (owned by the kernels' format module, re-exported
here).
"""

from __future__ import annotations

from cutlass_kernels.formats import MX_BLOCK

__all__ = [
    "DTYPES",
    "DTYPE_BYTES",
    "FORWARD_EQUIVALENTS",
    "IMPLEMENTATIONS",
    "KINDS",
    "LAYERS",
    "MX_BLOCK",
    "PHASES",
    "PIPELINES",
    "PRECISIONS",
    "SWIGLU_FORMS",
    "WORK_MULTIPLE",
    "has_backward",
    "kind_phases",
    "pipelines_of",
    "timed_phases",
]

KINDS = ("inference", "training", "packing")
PHASES = ("forward", "backward", "combined")
# Layers one iteration of a kind runs (packing: ten independent layers, forwards then backwards).
LAYERS = {"inference": 1, "training": 1, "packing": 10}
# Forward passes' worth of GEMM work per layer: a backward adds a data- and a weight-gradient GEMM per
# forward GEMM.
FORWARD_EQUIVALENTS = {"inference": 1, "training": 3, "packing": 3}
# Multiple of one layer forward's useful GEMM work that one iteration of a kind does (1, 3, 30).
WORK_MULTIPLE = {kind: LAYERS[kind] * FORWARD_EQUIVALENTS[kind] for kind in KINDS}

IMPLEMENTATIONS = ("mok", "dist-moe")
PRECISIONS = ("bf16", "mxfp8")
# (implementation, precision) -> the pipelines that exist for it; MoK's own is "native".
PIPELINES: dict[tuple[str, str], tuple[str, ...]] = {
    ("mok", "bf16"): ("native",),
    ("mok", "mxfp8"): ("native",),
    ("dist-moe", "bf16"): ("bf16",),
    ("dist-moe", "mxfp8"): ("fp8-dispatch", "bf16-dispatch"),
}
# Activation / weight dtypes a scale may run in (torch names), and their bytes per element.
DTYPES = ("bfloat16", "float32")
DTYPE_BYTES = {"bfloat16": 2, "float32": 4}
# The forms of Dist-MoE's fused SwiGLU backward (pipeline/moe/swiglu.py): a CPU's, a GPU's in torch
# ops, the CuTe DSL kernel's.
DEVICES = ("auto", "cpu", "cuda")  # what a config's ``device`` may say
SWIGLU_FORMS = ("blocked", "whole-tensor", "cute-kernel")


def timed_phases(backward: bool) -> tuple[str, ...]:
    """Phases timed: forward and combined (the whole iteration) always, backward where there is one."""
    return PHASES if backward else ("forward", "combined")


def has_backward(kind: str) -> bool:
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; allowed: {', '.join(KINDS)}")
    return FORWARD_EQUIVALENTS[kind] > 1


def kind_phases(kind: str) -> tuple[str, ...]:
    """Phases one kind times."""
    return timed_phases(has_backward(kind))


def pipelines_of(implementation: str, precision: str) -> tuple[str, ...]:
    """The pipelines of one implementation and precision; a ValueError names what is allowed."""
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(
            f"implementation {implementation!r} is not allowed; allowed: {', '.join(IMPLEMENTATIONS)}"
        )
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not allowed; allowed: {', '.join(PRECISIONS)}")
    return PIPELINES[(implementation, precision)]
