"""MXFP8 quantization as the CUDA kernel computes it (:mod:`cutlass_kernels.mx_quant_kernel`), step by
step, and the same steps in torch on any device: the kernel's mirror, which the tests hold against
the float reference (:mod:`cutlass_kernels.mxfp8`) exhaustively, one step at a time.

Per block of 32 BF16 values ``x``:

1. ``amax``: the largest ``|x|`` as integer bits (``x``'s bits with the sign cleared). Non-negative
   BF16 bits order as their values, and every NaN's bits exceed +Inf's, so a block holding a NaN has
   a NaN ``amax``, as torch's ``amax`` has.
2. The scale exponent ``e`` from ``amax``'s bits alone, integer arithmetic only
   (:func:`block_exponent`, written once: the kernel traces it, torch runs it).
3. ``v = float32(x) * 2^-e``: one float32 multiply by a power of two (a normal float32 for every
   ``e`` that step 2 gives), the very operation of the reference.
4. The E4M3 code of ``v``: ``cvt.rn.satfinite.e4m3x2.f32``, round to nearest even saturating at
   +-448 (the reference's clamp, then its cast), NaN to 0x7F (:func:`e4m3_satfinite` models it).
   The scale byte is ``e + 127``.
5. Values form (what an arch without block-scaled MMA multiplies): the code's value (exact in
   float32) times ``2^e`` as a float32 (``2^-127`` is subnormal: no flush to zero anywhere), rounded
   to BF16 to nearest even.

NaN: CUDA's float32 arithmetic returns the canonical NaN (positive), so the kernel's E4M3 NaN is
0x7F and its BF16 NaN 0x7FFF whatever the input's sign; torch on a CPU keeps a NaN's sign (0xFF).
Only the sign of NaN outputs may differ between devices; every other bit is the reference's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from cutlass_kernels.formats import E8M0_BIAS, SCALE_MODES
from cutlass_kernels.formats import MX_BLOCK as BLOCK

BF16_INF = 0x7F80  # +Inf's bits; any larger magnitude bits are a NaN
E4M3_NAN = 0x7F
E4M3_MAX_CODE = 0x7E  # 448
EXACT_MANTISSA_LIMIT = 96  # exact mode: amax = 1.m x 2^E fits 448 x 2^(E - 8 - 127) iff m <= 96 / 128


class Ops(NamedTuple):
    """What :func:`block_exponent` needs beyond operators: a select and a max with a constant."""

    where: Callable[[Any, Any, Any], Any]
    max: Callable[[Any, Any], Any]


TORCH = Ops(torch.where, lambda a, b: torch.clamp(a, min=b))


def block_exponent(amax: Any, exact: bool, ops: Ops) -> Any:
    """The unbiased scale exponent of a block whose largest magnitude has BF16 bits ``amax``
    (0..0x7FFF), as the reference's ``frexp`` gives it: for a normal ``amax = 1.m x 2^(E - 127)``,
    ``frexp`` is ``(1 + m) / 2 x 2^(E - 126)``, so ``exact`` takes ``E - 135`` (one more where
    ``m > 96 / 128``, the mantissa above 0.875) and ``fast`` ``E - 135``; clamped below at -127, which
    also covers zero and subnormal maxima (``E = 0``). +Inf: ``frexp`` gives exponent 0, so -8
    (exact) or -9 (fast); NaN: -127 (the reference's ``amax > 0`` is false)."""
    e = (amax >> 7) - 135
    if exact:
        e = e + ops.where((amax & 0x7F) > EXACT_MANTISSA_LIMIT, 1, 0)
    e = ops.max(e, -E8M0_BIAS)
    e = ops.where(amax == BF16_INF, -8 if exact else -9, e)
    return ops.where(amax > BF16_INF, -E8M0_BIAS, e)


def scale_down_bits(e: Any) -> Any:
    """The float32 bits of ``2^-e`` (step 3): a normal float32 for every ``e`` in [-127, 120]."""
    return (127 - e) << 23


def scale_up_bits(e: torch.Tensor) -> torch.Tensor:
    """The float32 bits of ``2^e`` (step 5): ``2^-127`` is the subnormal 0x00400000."""
    return torch.where(e >= -126, (e + 127) << 23, torch.full_like(e, 1 << 22))


def e4m3_satfinite(v: torch.Tensor) -> torch.Tensor:
    """What ``cvt.rn.satfinite.e4m3x2.f32`` makes of float32 ``v``, by integer arithmetic on its bits:
    round to nearest even, magnitudes past 448 to 448, NaN to 0x7F; uint8 codes."""
    u = v.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    sign, a = u >> 31, u & 0x7FFFFFFF
    exp = a >> 23
    significand = (a & 0x7FFFFF) | (1 << 23)  # normal inputs; subnormal ones are zeroed below
    # the E4M3 ulp at v: 2^(exp - 127 - 3) in the normal range, 2^-9 below it; significand ulp 2^(exp - 150)
    shift = torch.clamp(torch.clamp(141 - exp, min=20), max=26)
    half, odd = (1 << (shift - 1)) - 1, (significand >> shift) & 1
    r = (significand + half + odd) >> shift
    code = r + 8 * torch.clamp(exp - 121, min=0)  # exp - 127 + 6: the normal binades above 2^-6
    code = torch.where(exp == 0, torch.zeros_like(code), torch.clamp(code, max=E4M3_MAX_CODE))
    code = torch.where(a > 0x7F800000, torch.full_like(code, E4M3_NAN), code | (sign << 7))
    return code.to(torch.uint8)


def amax_bits(x: torch.Tensor) -> torch.Tensor:
    """Step 1: the largest magnitude bits of each block of 32 along ``x``'s last dimension (BF16)."""
    bits = x.contiguous().view(torch.int16).to(torch.int32) & 0x7FFF
    return bits.unflatten(-1, (-1, BLOCK)).amax(dim=-1)


def _check(x: torch.Tensor, mode: str) -> None:
    if mode not in SCALE_MODES:
        raise ValueError(f"MXFP8 scale mode {mode!r} is not allowed; allowed: {', '.join(SCALE_MODES)}")
    if x.dtype != torch.bfloat16 or x.dim() == 0 or x.shape[-1] % BLOCK:
        raise ValueError(
            f"the MX quantization kernel takes bfloat16 with a last dimension divisible by {BLOCK}, "
            f"got {x.dtype} of shape {tuple(x.shape)}"
        )


def quantize(x: torch.Tensor, mode: str = "exact") -> tuple[torch.Tensor, torch.Tensor]:
    """Steps 1-4 in torch: (E4M3 codes as uint8, shape of ``x``; scale exponents as int32, one per
    block), computed as the kernel computes them."""
    _check(x, mode)
    e = block_exponent(amax_bits(x), mode == "exact", TORCH).to(torch.int32)
    scale = scale_down_bits(e).view(torch.float32).unsqueeze(-1)
    v = x.float().unflatten(-1, (-1, BLOCK)) * scale
    return e4m3_satfinite(v).flatten(-2), e


def values(x: torch.Tensor, mode: str = "exact") -> torch.Tensor:
    """Steps 1-5 in torch: the BF16 values an MXFP8 GEMM multiplies, computed as the kernel does."""
    codes, e = quantize(x, mode)
    decoded = codes.view(torch.float8_e4m3fn).float().unflatten(-1, (-1, BLOCK))
    return (decoded * scale_up_bits(e).view(torch.float32).unsqueeze(-1)).flatten(-2).to(torch.bfloat16)
