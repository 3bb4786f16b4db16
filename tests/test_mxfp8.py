"""MXFP8 quantization against a naive per-element implementation built from the E4M3 value grid."""

from __future__ import annotations

import bisect
import math

import pytest
import torch

from cutlass_kernels.mxfp8 import BLOCK, fake_quantize, quantize_mx


def _e4m3_grid() -> list[tuple[float, int]]:
    """Every non-negative finite E4M3 value with its mantissa bits (for ties-to-even)."""
    values = [(m / 8 * 2.0**-6, m) for m in range(8)]  # subnormals (and zero)
    values += [((1 + m / 8) * 2.0 ** (e - 7), m) for e in range(1, 16) for m in range(8) if (e, m) != (15, 7)]
    return values


GRID = _e4m3_grid()
GRID_VALUES = [v for v, _ in GRID]


def _round_e4m3(v: float) -> float:
    """Round-to-nearest-even onto the grid, saturating at 448."""
    a = min(abs(v), 448.0)
    i = bisect.bisect_left(GRID_VALUES, a)
    if i < len(GRID) and GRID_VALUES[i] == a:
        out = a
    else:
        (lo, lo_m), (hi, _) = GRID[i - 1], GRID[i]
        if a - lo != hi - a:
            out = lo if a - lo < hi - a else hi
        else:
            out = lo if lo_m % 2 == 0 else hi
    return math.copysign(out, v)


def _naive(x: torch.Tensor, mode: str) -> tuple[list[float], list[int]]:
    values, exps = [], []
    for block in x.double().view(-1, BLOCK).tolist():
        amax = max(abs(v) for v in block)
        if amax == 0:
            e = -127
        elif mode == "exact":  # smallest e with amax / 2^e <= 448
            e = math.floor(math.log2(amax)) - 9
            while amax / 2.0**e > 448:
                e += 1
        else:  # OCP: floor(log2(amax)) - emax(E4M3)
            e = math.frexp(amax)[1] - 1 - 8
        exps.append(e)
        values += [_round_e4m3(v / 2.0**e) * 2.0**e for v in block]
    return values, exps


@pytest.mark.parametrize("mode", ["exact", "fast"])
@pytest.mark.parametrize("scale", [1.0, 1e-3, 300.0])
def test_matches_naive_reference(mode: str, scale: float) -> None:
    gen = torch.Generator().manual_seed(int(scale * 1000) + len(mode))
    x = torch.randn(6, 4 * BLOCK, generator=gen) * scale
    x[0, :BLOCK] = 0.0  # an all-zero block
    x[1, 5] = 448.0 * 2.0**3  # a block whose amax sits exactly on a power-of-two boundary
    q = quantize_mx(x, mode)
    values, exps = _naive(x, mode)
    assert (q.scale.to(torch.int64) - 127).flatten().tolist() == exps
    assert q.dequantize(torch.float64).flatten().tolist() == values


def test_exact_never_saturates_and_fast_may() -> None:
    block = torch.full((1, BLOCK), 1.0)
    block[0, 0] = 1.95  # the floor(log2) scale 2^-8 puts 1.95 at 499 > 448: it saturates to 448 * 2^-8
    assert quantize_mx(block, "exact").dequantize()[0, 0].item() == 2.0  # 2^-7 scale: 249.6 -> 256
    assert quantize_mx(block, "fast").dequantize()[0, 0].item() == 448 / 256


def test_relative_error_bound_of_exact_scales(torch_rng: torch.Generator) -> None:
    """|q - x| <= 2^-4 |x| + 2^-10 s (E4M3's half-step, relative in normals, absolute in subnormals)."""
    x = (
        torch.randn(64, 8 * BLOCK, dtype=torch.float32, generator=torch_rng)
        * torch.logspace(-3, 3, 64)[:, None]
    )
    q = quantize_mx(x, "exact")
    s = torch.ldexp(torch.ones(q.scale.shape), q.scale.to(torch.int32) - 127).repeat_interleave(BLOCK, dim=-1)
    err = (q.dequantize() - x).abs()
    assert bool((err <= x.abs() * 2.0**-4 + s * 2.0**-10).all())


def test_bf16_round_trip_dtype(torch_rng: torch.Generator) -> None:
    x = torch.randn(3, BLOCK, dtype=torch.bfloat16, generator=torch_rng)
    assert fake_quantize(x).dtype == torch.bfloat16


CASES = torch.Generator().manual_seed(0)  # the parametrized inputs' values, drawn once at collection


@pytest.mark.parametrize(
    ("x", "mode", "message"),
    [
        (torch.randn(4, 33, generator=CASES), "exact", "last dimension divisible by 32"),
        (
            torch.randn(4, 32, generator=CASES),
            "floor",
            "scale mode 'floor' is not allowed; allowed: exact, fast",
        ),
        (torch.ones(4, 32, dtype=torch.int32), "exact", "floating-point"),
    ],
)
def test_errors(x, mode, message) -> None:
    with pytest.raises(ValueError, match=message):
        quantize_mx(x, mode)
