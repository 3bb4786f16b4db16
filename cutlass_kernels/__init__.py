"""Grouped-GEMM kernels for MoE experts: CuTe DSL backends for sm90 / sm100 and a torch reference,
behind one dispatch module (:mod:`cutlass_kernels.api`).

The names below load on first use, so that ``cutlass_kernels.formats`` (the MXFP8 constants) can be
imported without torch. ``quantize_mx`` and ``fake_quantize`` are :mod:`cutlass_kernels.quantize`'s:
the torch form (:mod:`cutlass_kernels.mxfp8`), or the one-pass kernel where it is the chosen one;
``swiglu`` and ``swiglu_mx`` (the SwiGLU forward, alone or quantized for the down projection) are
:mod:`cutlass_kernels.swiglu_forward`'s, by the same rule.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cutlass_kernels.api import (
        BACKENDS,
        grouped_gemm,
        grouped_gemm_dgrad,
        grouped_gemm_mx,
        grouped_gemm_wgrad,
        resolve_backend,
    )
    from cutlass_kernels.mxfp8 import MXTensor, MXValues
    from cutlass_kernels.quantize import fake_quantize, quantize_mx
    from cutlass_kernels.swiglu_forward import swiglu, swiglu_mx

_HOMES = {
    "BACKENDS": "api",
    "grouped_gemm": "api",
    "grouped_gemm_dgrad": "api",
    "grouped_gemm_mx": "api",
    "grouped_gemm_wgrad": "api",
    "resolve_backend": "api",
    "MXTensor": "mxfp8",
    "MXValues": "mxfp8",
    "fake_quantize": "quantize",
    "quantize_mx": "quantize",
    "swiglu": "swiglu_forward",
    "swiglu_mx": "swiglu_forward",
}
__all__ = [
    "BACKENDS",
    "MXTensor",
    "MXValues",
    "fake_quantize",
    "grouped_gemm",
    "grouped_gemm_dgrad",
    "grouped_gemm_mx",
    "grouped_gemm_wgrad",
    "quantize_mx",
    "resolve_backend",
    "swiglu",
    "swiglu_mx",
]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'cutlass_kernels' has no attribute {name!r}")
    return getattr(importlib.import_module(f"cutlass_kernels.{_HOMES[name]}"), name)
