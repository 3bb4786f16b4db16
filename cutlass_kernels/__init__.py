"""Grouped-GEMM kernels for MoE experts: CuTe DSL backends for sm90 / sm100 and a torch reference,
behind one dispatch module (:mod:`cutlass_kernels.api`)."""

from cutlass_kernels.api import (
    BACKENDS,
    grouped_gemm,
    grouped_gemm_dgrad,
    grouped_gemm_mx,
    grouped_gemm_wgrad,
    resolve_backend,
)
from cutlass_kernels.mxfp8 import MXTensor, fake_quantize, quantize_mx

__all__ = [
    "BACKENDS",
    "MXTensor",
    "fake_quantize",
    "grouped_gemm",
    "grouped_gemm_dgrad",
    "grouped_gemm_mx",
    "grouped_gemm_wgrad",
    "quantize_mx",
    "resolve_backend",
]
