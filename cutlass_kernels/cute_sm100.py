"""The ``cute-sm100`` grouped-GEMM backend: the sm_100a CuTe kernels behind the backend interface of
:mod:`cutlass_kernels.api` (what they do not cover runs on the torch backend; see
:mod:`cutlass_kernels.cute_backend`)."""

from cutlass_kernels.cute_backend import CuteBackend

_BACKEND = CuteBackend("sm_100a")
grouped_gemm = _BACKEND.grouped_gemm
grouped_gemm_dgrad = _BACKEND.grouped_gemm_dgrad
grouped_gemm_wgrad = _BACKEND.grouped_gemm_wgrad
grouped_gemm_mx = _BACKEND.grouped_gemm_mx
