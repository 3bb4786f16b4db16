"""Torch backend of the grouped GEMMs: the reference, the CPU path and the GPU fallback.

``torch._grouped_mm`` does the work where its layout rules hold (row strides that are multiples of
16 bytes); elsewhere a loop over groups does, which syncs the host on CUDA and is only a fallback.
"""

from __future__ import annotations

import torch

from cutlass_kernels.mxfp8 import MXTensor


def _aligned(*tensors: torch.Tensor) -> bool:
    return all(t.shape[-1] * t.element_size() % 16 == 0 for t in tensors)


def _group_bounds(offs: torch.Tensor) -> list[tuple[int, int]]:
    ends = offs.tolist()
    return list(zip([0, *ends[:-1]], ends, strict=True))


def grouped_gemm(
    a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """out[rows of g] = a[rows of g] @ b[g]^T with a [M, K], b [G, N, K]."""
    if not a.shape[0]:  # no rows (a recompute of nothing): no group bounds read, no host sync
        return a.new_empty(0, b.shape[1], dtype=out_dtype)
    if _aligned(a, b):
        out = torch._grouped_mm(a, b.transpose(1, 2), offs=offs)
        return out if out.dtype == out_dtype else out.to(out_dtype)
    out = a.new_zeros(a.shape[0], b.shape[1], dtype=out_dtype)
    for g, (start, end) in enumerate(_group_bounds(offs)):
        if end > start:
            out[start:end] = (a[start:end] @ b[g].T).to(out_dtype)
    return out


def grouped_gemm_dgrad(
    dy: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """out[rows of g] = dy[rows of g] @ b[g] with dy [M, N], b [G, N, K]."""
    return grouped_gemm(dy, b.transpose(1, 2), offs, out_dtype)


def grouped_gemm_wgrad(
    dy: torch.Tensor, x: torch.Tensor, offs: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """out[g] = dy[rows of g]^T @ x[rows of g] with dy [M, N], x [M, K]; empty groups give zeros."""
    if not dy.shape[0]:  # no rows: every group is empty, and no host sync reads their bounds
        return dy.new_zeros(offs.shape[0], dy.shape[1], x.shape[1], dtype=out_dtype)
    if _aligned(dy, x):
        out = torch._grouped_mm(dy.T, x, offs=offs)
        return out if out.dtype == out_dtype else out.to(out_dtype)
    out = dy.new_zeros(offs.shape[0], dy.shape[1], x.shape[1], dtype=out_dtype)
    for g, (start, end) in enumerate(_group_bounds(offs)):
        if end > start:
            out[g] = (dy[start:end].T @ x[start:end]).to(out_dtype)
    return out


def grouped_gemm_mx(
    a: MXTensor, b: MXTensor, offs: torch.Tensor, out_dtype: torch.dtype, b_values: torch.Tensor | None = None
) -> torch.Tensor:
    """The MX semantics exactly: dequantize both operands (exact in float32), then a float32 GEMM. On
    CUDA, whose grouped GEMM takes BF16 operands only, the BF16 values (exact while the scales stay in
    BF16's exponent range; ``b_values`` when the caller keeps them in BF16) with float32
    accumulation, as the sm90 kernels multiply them."""
    if not a.data.is_cuda:
        return grouped_gemm(a.dequantize(torch.float32), b.dequantize(torch.float32), offs, out_dtype)
    b_bf16 = (
        b_values
        if b_values is not None and b_values.dtype == torch.bfloat16
        else b.dequantize(torch.bfloat16)
    )
    return grouped_gemm(a.dequantize(torch.bfloat16), b_bf16, offs, out_dtype)
