"""What computes an execution's layers on this rank: the grouped-GEMM backend the layers resolve to,
how MXFP8 products are formed there, and the SwiGLU backward's form (the shard's ``kernels``)."""

from __future__ import annotations

import torch

from cutlass_kernels.api import resolve_backend
from pipeline.data.meta import Kernels
from pipeline.moe import MoEConfig
from pipeline.moe.swiglu import backward_form

# How each backend forms an MXFP8 product (cutlass_kernels/api.py, docs/ARCHITECTURE.md).
MX_METHODS = {
    "torch": "operands dequantized exactly to float32, float32 grouped GEMM (the reference)",
    "cute-sm90": "BF16 values of the MXFP8 operands on the BF16 tensor-core kernel (no block-scaled MMA)",
    "cute-sm100": "block-scaled MXFP8 tensor-core kernel: E4M3 operands, an E8M0 scale per 32 along K",
}


def kernels(cfg: MoEConfig, device: torch.device, backward: bool) -> Kernels:
    gemm = resolve_backend(cfg.backend, device)
    return Kernels(
        gemm=gemm,
        mxfp8=MX_METHODS[gemm] if cfg.precision == "mxfp8" else None,
        swiglu_backward=backward_form(cfg.fused_swiglu_backward, device) if backward else None,
    )
