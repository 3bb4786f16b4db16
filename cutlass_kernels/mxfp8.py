"""MXFP8 in torch: E4M3 values with one E8M0 (power-of-two) scale per 32 contiguous elements.

Blocks run along the last dimension, which is always the GEMM reduction dimension here. This is the
CPU path of the layers and the reference the GPU kernels are checked against.

Scale selection:
- ``exact`` (MoK's native policy): the smallest power of two ``s`` with ``amax / s <= 448``, found with
  integer exponent arithmetic (no float division), so no element saturates.
- ``fast`` (Dist-MoE's fast math, the OCP MX v1.0 rule): ``s = 2^(floor(log2 amax) - 8)`` read off the
  exponent bits alone; up to the top eighth of a block's range saturates to +-448.
Elements are rounded to nearest-even into E4M3.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from cutlass_kernels.formats import E4M3_MAX, E8M0_BIAS, SCALE_MODES
from cutlass_kernels.formats import MX_BLOCK as BLOCK


@dataclass(frozen=True)
class MXTensor:
    """An MXFP8 tensor: ``data`` (float8_e4m3fn, source shape) and ``scale`` (uint8 biased E8M0
    exponents, shape ``[..., K // 32]``)."""

    data: torch.Tensor
    scale: torch.Tensor

    @property
    def shape(self) -> torch.Size:
        return self.data.shape

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Exact reconstruction of the represented values (every E4M3 x E8M0 product fits float32)."""
        values = self.data.to(torch.float32).unflatten(-1, (-1, BLOCK))
        return (values * scale_values(self.scale).unsqueeze(-1)).flatten(-2).to(dtype)

    def index_rows(self, index: torch.Tensor | slice) -> MXTensor:
        """Row gather along the first dimension (quantization is per row, so rows move whole)."""
        return MXTensor(self.data[index], self.scale[index])


@dataclass(frozen=True)
class MXValues:
    """An MXFP8 tensor held as the BF16 values it represents (:func:`fake_quantize`'s), without its
    E4M3 codes and E8M0 scales: the A operand as a GEMM without block-scaled MMA multiplies it, made
    once by its producer rather than quantized again by the GEMM."""

    values: torch.Tensor

    @property
    def shape(self) -> torch.Size:
        return self.values.shape


def scale_values(scale: torch.Tensor) -> torch.Tensor:
    """float32 powers of two of biased E8M0 exponents."""
    return torch.ldexp(torch.ones_like(scale, dtype=torch.float32), scale.to(torch.int32) - E8M0_BIAS)


def _block_exponent(amax: torch.Tensor, mode: str) -> torch.Tensor:
    mantissa, exp = torch.frexp(amax)  # amax = mantissa * 2^exp, mantissa in [0.5, 1)
    # 448 * 2^(exp-9) = 0.875 * 2^exp: the smallest s with amax/s <= 448 is 2^(exp-9) iff mantissa <= 0.875
    if mode == "exact":
        e = torch.where(mantissa <= 0.875, exp - 9, exp - 8)
    else:  # fast: floor(log2 amax) - emax(E4M3) = (exp - 1) - 8
        e = exp - 9
    e = torch.where(amax > 0, e, torch.full_like(e, -E8M0_BIAS))
    return e.clamp(-E8M0_BIAS, E8M0_BIAS)


def _check_quantizable(x: torch.Tensor, mode: str) -> None:
    if mode not in SCALE_MODES:
        raise ValueError(f"MXFP8 scale mode {mode!r} is not allowed; allowed: {', '.join(SCALE_MODES)}")
    if x.dim() == 0 or x.shape[-1] % BLOCK:
        raise ValueError(f"MXFP8 needs a last dimension divisible by {BLOCK}, got shape {tuple(x.shape)}")
    if not x.is_floating_point():
        raise ValueError(f"MXFP8 quantizes floating-point tensors, got {x.dtype}")


def _quantized_blocks(x: torch.Tensor, mode: str) -> tuple[torch.Tensor, torch.Tensor]:
    """E4M3 blocks of 32 along the last dimension and each block's scale exponent."""
    _check_quantizable(x, mode)
    blocks = x.detach().to(torch.float32).unflatten(-1, (-1, BLOCK))
    e = _block_exponent(blocks.abs().amax(dim=-1), mode)
    scaled = blocks * torch.ldexp(torch.ones_like(e, dtype=torch.float32), -e).unsqueeze(-1)
    return scaled.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn), e


def quantize_mx(x: torch.Tensor, mode: str = "exact") -> MXTensor:
    """Quantize along the last dimension (its size must be a multiple of 32)."""
    data, e = _quantized_blocks(x, mode)
    return MXTensor(data.flatten(-2), (e + E8M0_BIAS).to(torch.uint8))


def fake_quantize(x: torch.Tensor, mode: str = "exact", dtype: torch.dtype | None = None) -> torch.Tensor:
    """The values an MXFP8 GEMM actually multiplies, in ``dtype`` (default ``x.dtype``): equal to
    ``quantize_mx(x, mode).dequantize(dtype)`` bit for bit, without building the E8M0 scale tensor or
    keeping the E4M3 one."""
    data, e = _quantized_blocks(x, mode)
    scale = torch.ldexp(torch.ones_like(e, dtype=torch.float32), e).unsqueeze(-1)
    return (data.to(torch.float32) * scale).flatten(-2).to(dtype or x.dtype)
