"""Torch backend of the grouped GEMMs: the reference, the CPU path and the GPU fallback.

``torch._grouped_mm`` does the work where its layout rule holds for the operands exactly as it receives
them (views included: dgrad's ``b`` untransposed, wgrad's ``dy.T``); elsewhere a loop over groups does,
which syncs the host on CUDA and is only a fallback.
"""

from __future__ import annotations

import contextlib

import torch
import torch.autograd.profiler as autograd_profiler

from cutlass_kernels.mxfp8 import MXTensor, MXValues

_ALIGN_BYTES = 16
# A profiled range around the GEMM itself inside an MX product on the CPU (after the operands'
# exact dequantization), so that a profile tells the product from the conversion.
GEMM_RANGE = "cutlass_kernels:grouped_gemm"


def _takes(*operands: torch.Tensor) -> bool:
    """Whether ``torch._grouped_mm`` takes these operands as they are: in each, one of the last two
    dimensions is contiguous and the other's stride is a multiple of 16 bytes, and the data starts on
    a 16-byte boundary (checked on CUDA; judged from the storage offset, allocations being aligned,
    so that it also holds for fake tensors)."""
    for t in operands:
        rows, cols = t.stride(-2), t.stride(-1)
        if cols == 1 and rows >= max(1, t.shape[-1]):
            lead = rows
        elif rows == 1 and cols >= max(1, t.shape[-2]):
            lead = cols
        else:
            return False
        if (lead * t.element_size()) % _ALIGN_BYTES or (t.storage_offset() * t.element_size()) % _ALIGN_BYTES:
            return False
    return True


def _group_bounds(offs: torch.Tensor) -> list[tuple[int, int]]:
    ends = offs.tolist()
    return list(zip([0, *ends[:-1]], ends, strict=True))


def grouped_gemm(
    a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """out[rows of g] = a[rows of g] @ b[g]^T with a [M, K], b [G, N, K]."""
    return _row_grouped(a, b.transpose(1, 2), offs, out_dtype)


def grouped_gemm_dgrad(
    dy: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """out[rows of g] = dy[rows of g] @ b[g] with dy [M, N], b [G, N, K]."""
    return _row_grouped(dy, b, offs, out_dtype)


def _row_grouped(
    a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """out[rows of g] = a[rows of g] @ b[g] with a [M, K], b [G, K, N] (any strides)."""
    if not a.shape[0]:  # no rows (a recompute of nothing): no group bounds read, no host sync
        return a.new_empty(0, b.shape[2], dtype=out_dtype)
    if _takes(a, b):
        out = torch._grouped_mm(a, b, offs=offs)
        return out if out.dtype == out_dtype else out.to(out_dtype)
    out = a.new_zeros(a.shape[0], b.shape[2], dtype=out_dtype)
    for g, (start, end) in enumerate(_group_bounds(offs)):
        if end > start:
            out[start:end] = (a[start:end] @ b[g]).to(out_dtype)
    return out


def grouped_gemm_wgrad(
    dy: torch.Tensor, x: torch.Tensor, offs: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """out[g] = dy[rows of g]^T @ x[rows of g] with dy [M, N], x [M, K]; empty groups give zeros."""
    if not dy.shape[0]:  # no rows: every group is empty, and no host sync reads their bounds
        return dy.new_zeros(offs.shape[0], dy.shape[1], x.shape[1], dtype=out_dtype)
    if _takes(dy.T, x):
        out = torch._grouped_mm(dy.T, x, offs=offs)
        return out if out.dtype == out_dtype else out.to(out_dtype)
    out = dy.new_zeros(offs.shape[0], dy.shape[1], x.shape[1], dtype=out_dtype)
    for g, (start, end) in enumerate(_group_bounds(offs)):
        if end > start:
            out[g] = (dy[start:end].T @ x[start:end]).to(out_dtype)
    return out


def grouped_gemm_mx(
    a: MXTensor | MXValues,
    b: MXTensor,
    offs: torch.Tensor,
    out_dtype: torch.dtype,
    b_values: torch.Tensor | None = None,
) -> torch.Tensor:
    """The MX semantics exactly: dequantize both operands (exact in float32), then a float32 GEMM. On
    CUDA, whose grouped GEMM takes BF16 operands only, the BF16 values (exact while the scales stay in
    BF16's exponent range; ``b_values`` when the caller keeps them in BF16) with float32
    accumulation, as the sm90 kernels multiply them. An A given as its values is multiplied as
    they are."""
    if not b.data.is_cuda:
        a_values = a.values.float() if isinstance(a, MXValues) else a.dequantize(torch.float32)
        b_values32 = b.dequantize(torch.float32)
        with _gemm_range():
            return grouped_gemm(a_values, b_values32, offs, out_dtype)
    b_bf16 = (
        b_values
        if b_values is not None and b_values.dtype == torch.bfloat16
        else b.dequantize(torch.bfloat16)
    )
    a_bf16 = a.values if isinstance(a, MXValues) else a.dequantize(torch.bfloat16)
    return grouped_gemm(a_bf16, b_bf16, offs, out_dtype)


def _gemm_range() -> contextlib.AbstractContextManager[object]:
    """:data:`GEMM_RANGE` while a profiler runs, else nothing."""
    if not autograd_profiler._is_profiler_enabled:
        return contextlib.nullcontext()
    return autograd_profiler.record_function(GEMM_RANGE)
