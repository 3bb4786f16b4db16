"""MXFP8 quantization as the layers call it: the CUDA kernel (:mod:`cutlass_kernels.mx_quant_kernel`)
where the measured choice names it and it takes the tensor, else the torch form
(:mod:`cutlass_kernels.mxfp8`, the reference and the CPU path). Both give the same bits (NaN's sign
aside), so the choice is one of time only: :data:`cutlass_kernels.choices.MX_QUANTIZER` keeps the
torch form until a device run has checked the kernel bit for bit and timed it faster; the
environment (:data:`QUANTIZER_ENV`) overrides it, for the device run that checks it."""

from __future__ import annotations

import torch

from cutlass_kernels import choices, mxfp8
from cutlass_kernels.gating import MX_QUANTIZER_ENV as QUANTIZER_ENV
from cutlass_kernels.mxfp8 import MXTensor


def quantizer() -> str:
    """``torch`` or ``kernel``: the environment's choice where set, else the measured one."""
    return choices.implementation(QUANTIZER_ENV, choices.MX_QUANTIZER)


def _kernel_takes(x: torch.Tensor) -> bool:
    if quantizer() != "kernel" or not x.is_cuda:
        return False
    from cutlass_kernels import mx_quant_kernel

    return not mx_quant_kernel.unsupported_reason(x)


def quantize_mx(x: torch.Tensor, mode: str = "exact") -> MXTensor:
    """:func:`cutlass_kernels.mxfp8.quantize_mx`, by the kernel where it is chosen and takes ``x``."""
    if _kernel_takes(x):
        from cutlass_kernels import mx_quant_kernel

        return mx_quant_kernel.quantize(x, mode)
    return mxfp8.quantize_mx(x, mode)


def fake_quantize(x: torch.Tensor, mode: str = "exact", dtype: torch.dtype | None = None) -> torch.Tensor:
    """:func:`cutlass_kernels.mxfp8.fake_quantize`, by the kernel where it is chosen, takes ``x`` and
    the values are wanted in BF16."""
    if (dtype or x.dtype) == torch.bfloat16 and _kernel_takes(x):
        from cutlass_kernels import mx_quant_kernel

        return mx_quant_kernel.fake_quantize(x, mode)
    return mxfp8.fake_quantize(x, mode, dtype)
