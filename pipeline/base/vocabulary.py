"""The words every stage shares, defined once and free of heavy imports.

What a kind of workload times (its phases, layers and multiple of the forward GEMM work), the
precisions, the dtypes a scale may name, the forms of the fused SwiGLU backward, and the MXFP8 block
(owned by the kernels' format module, re-exported here). The implementations, with the pipelines each
has, are records of their own (:mod:`pipeline.base.implementations`).
"""

from __future__ import annotations

from cutlass_kernels.formats import MX_BLOCK

__all__ = [
    "COMMUNICATION_PHASES",
    "DTYPES",
    "DTYPE_BYTES",
    "FORWARD_EQUIVALENTS",
    "GEMM_PHASES",
    "KINDS",
    "LAYERS",
    "LAYER_PHASES",
    "LAYER_RANGE",
    "MX_BLOCK",
    "PHASES",
    "PRECISIONS",
    "RANGE_PREFIX",
    "SWIGLU_FORMS",
    "UNCLAIMED",
    "WORK_MULTIPLE",
    "has_backward",
    "layer_phase",
    "kind_phases",
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

PRECISIONS = ("bf16", "mxfp8")
# Activation / weight dtypes a scale may run in (torch names), and their bytes per element.
DTYPES = ("bfloat16", "float32")
DTYPE_BYTES = {"bfloat16": 2, "float32": 4}
# The forms of the fused SwiGLU backward (pipeline/moe/swiglu.py): a CPU's, a GPU's in torch ops, the
# CuTe DSL kernel's.
DEVICES = ("auto", "cpu", "cuda")  # what a config's ``device`` may say
SWIGLU_FORMS = ("blocked", "whole-tensor", "cute-kernel")

# The layer's phases, where an iteration's time goes (the phase account, pipeline/bench/account.py):
# the routed GEMMs by op, the shared expert, the dispatch's and the combine's communication, MXFP8
# quantization, the routed SwiGLU, the gathers, scatters and permutations of rows, and the rest of the
# layer; what no phase claims is the account's unclaimed time. The layer names each as a profiler
# range (pipeline/moe/ranges.py): ``moe:<phase>``, ``moe:<op>:mx`` for an MXFP8 GEMM (whose operand
# conversions are quantization), and ``moe:layer`` around a whole layer (its unnamed work: other).
LAYER_PHASES = (
    "fprop",
    "dgrad",
    "wgrad",
    "shared",
    "dispatch",
    "combine",
    "quantize",
    "swiglu",
    "permute",
    "other",
)
GEMM_PHASES = ("fprop", "dgrad", "wgrad")
COMMUNICATION_PHASES = ("dispatch", "combine")
UNCLAIMED = "unclaimed"
RANGE_PREFIX = "moe:"
LAYER_RANGE = "moe:layer"


def range_name(phase: str, mx: bool = False) -> str:
    """The profiler range of a layer phase (``moe:fprop``; an MXFP8 GEMM's ``moe:fprop:mx``)."""
    if phase not in LAYER_PHASES or (mx and phase not in GEMM_PHASES):
        raise ValueError(f"no range for phase {phase!r} (mx={mx}); phases: {', '.join(LAYER_PHASES)}")
    return f"{RANGE_PREFIX}{phase}" + (":mx" if mx else "")


def layer_phase(name: str) -> tuple[str, bool] | None:
    """The phase a range names and whether it is an MXFP8 GEMM's (``moe:layer``: other); None for a
    name that is no layer range."""
    if name == LAYER_RANGE:
        return "other", False
    if not name.startswith(RANGE_PREFIX):
        return None
    phase, _, mx = name[len(RANGE_PREFIX) :].partition(":")
    if phase not in LAYER_PHASES or mx not in ("", "mx") or (mx and phase not in GEMM_PHASES):
        return None
    return phase, mx == "mx"


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
