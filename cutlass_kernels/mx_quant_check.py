"""The device checks of the MX quantization kernel (:mod:`cutlass_kernels.mx_quant_kernel`): bit
identity with the torch form (:mod:`cutlass_kernels.mxfp8`) on the same device, and its time against
the torch form's and the HBM bandwidth of the same run. One JSON line per case, appended to a results
file the moment it exists (:mod:`cutlass_kernels.results`), under the gating key
:data:`cutlass_kernels.gating.MX_QUANT_KEY`.

An implementation under test is a :class:`Quantizer`: ``codes(x, mode, data, scale)`` writes E4M3
codes (uint8) and E8M0 scales into the outputs it is given, ``values(x, mode, out)`` the BF16 values;
the kernel's :func:`kernel`, or in the device run's dry run the torch mirror of its arithmetic
(:func:`mirror`). Each output is prefilled with the bitwise complement of the torch form's result, so
an element left unwritten differs from it wherever it lies. Outputs must equal the torch form's bit
for bit but at NaN, where both must hold a NaN (CUDA's arithmetic gives the canonical NaN, a CPU keeps
the sign; :mod:`cutlass_kernels.mxfp8_bits`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from cutlass_kernels import gating, mxfp8, mxfp8_bits
from cutlass_kernels.formats import E8M0_BIAS, SCALE_MODES
from cutlass_kernels.formats import MX_BLOCK as BLOCK
from cutlass_kernels.results import each
from cutlass_kernels.swiglu_check import copy_probe, times_ms

FORMS = ("codes", "values")
# (rows, K): none, one block, ragged rows, the report's activations (D = 7168) and an F of 1536
CASES: tuple[tuple[int, int], ...] = ((0, 32), (1, 32), (3, 96), (257, 1536), (1000, 7168), (12288, 7168))
DRY_CASES: tuple[tuple[int, int], ...] = ((0, 32), (1, 32), (3, 96), (40, 256))
TIMING_SHAPES: tuple[tuple[int, int], ...] = ((12288, 7168), (12288, 1536))
DRY_TIMING_SHAPES: tuple[tuple[int, int], ...] = ((64, 256),)
BANDWIDTH_GOAL = 0.6  # of a device copy's bytes per second
ITERS = 10


@dataclass(frozen=True)
class Quantizer:
    """What the checks run: writers of the codes and scales, and of the values."""

    codes: Callable[[torch.Tensor, str, torch.Tensor, torch.Tensor], object]
    values: Callable[[torch.Tensor, str, torch.Tensor], object]


def kernel() -> Quantizer:
    """The CUDA kernel, writing into the outputs it is given."""
    from cutlass_kernels.mx_quant_kernel import launch

    return Quantizer(
        lambda x, mode, data, scale: launch("codes", mode, x, data, scale),
        lambda x, mode, out: launch("values", mode, x, out),
    )


def mirror() -> Quantizer:
    """The kernel's arithmetic in torch (:mod:`cutlass_kernels.mxfp8_bits`): the dry run's stand-in."""

    def codes(x: torch.Tensor, mode: str, data: torch.Tensor, scale: torch.Tensor) -> None:
        c, e = mxfp8_bits.quantize(x, mode)
        data.copy_(c)
        scale.copy_((e + E8M0_BIAS).to(torch.uint8))

    return Quantizer(codes, lambda x, mode, out: out.copy_(mxfp8_bits.values(x, mode)))


def doubled(q: Quantizer) -> Quantizer:
    """``q`` with its values doubled and its codes' scale one higher: the planted ``wrong`` fault."""

    def codes(x: torch.Tensor, mode: str, data: torch.Tensor, scale: torch.Tensor) -> None:
        q.codes(x, mode, data, scale)
        scale.add_(1)

    def values(x: torch.Tensor, mode: str, out: torch.Tensor) -> None:
        q.values(x, mode, out)
        out.mul_(2)

    return Quantizer(codes, values)


# -------------------------------------------------------------------------------------- inputs


def inputs(rows: int, k: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """Fresh BF16 [rows, K]: normal values times a scale per block from 2^-140 to 2^126 (BF16's
    subnormals to the edge of its range), and per block with some odds: all zeros, all equal, signed
    zeros, BF16's largest magnitudes, maxima on either side of the exact rule's 0.875 mantissa, a NaN,
    an Inf, subnormal values only."""
    blocks = rows * k // BLOCK
    x = torch.randn(blocks, BLOCK, generator=gen, device=device)
    x = x * torch.exp2(torch.randint(-140, 127, (blocks, 1), generator=gen, device=device).float())
    x = x.clamp(-3.3e38, 3.3e38)
    kind = torch.randint(0, 20, (blocks,), generator=gen, device=device)
    pos = torch.randint(0, BLOCK, (blocks,), generator=gen, device=device)
    one_hot = torch.nn.functional.one_hot(pos, BLOCK).bool()

    def where(which: int, value: torch.Tensor) -> torch.Tensor:
        return torch.where((kind == which).unsqueeze(1), value, x)

    x = where(0, torch.zeros_like(x))
    x = where(1, x[:, :1].expand(-1, BLOCK))
    x = where(2, torch.where(x > 0, 0.0, -0.0) * torch.ones_like(x))
    x = where(3, torch.where(x > 0, 3.3895e38, -3.3895e38) * torch.ones_like(x))
    exp = torch.exp2(torch.randint(-100, 100, (blocks, 1), generator=gen, device=device).float())
    x = where(4, torch.where(one_hot, 1.75 * exp, x.sign() * exp))  # mantissa 96/128: 0.875 exactly
    x = where(5, torch.where(one_hot, 1.7578125 * exp, x.sign() * exp))  # 97/128: just above
    x = where(6, torch.where(one_hot, float("nan"), x))
    x = where(7, torch.where(one_hot, -float("inf"), x))
    x = where(8, x.sign() * torch.rand(blocks, BLOCK, generator=gen, device=device) * 2.0**-127)
    return x.to(torch.bfloat16).reshape(rows, k)


# --------------------------------------------------------------------------------- correctness


def differing(out: torch.Tensor, ref: torch.Tensor, nan: torch.Tensor) -> int:
    """Elements of ``out`` whose bits differ from ``ref``'s, NaN positions ``nan`` excepted, plus NaN
    positions where ``out`` holds no NaN."""
    bits = torch.int16 if out.dtype == torch.bfloat16 else torch.uint8
    differ = (out.view(bits) != ref.view(bits)) & ~nan
    return int(differ.sum()) + int((nan & ~is_nan(out)).sum())


def is_nan(t: torch.Tensor) -> torch.Tensor:
    """Where ``t`` holds a NaN: E4M3 codes as uint8 (0x7F or 0xFF), or a float tensor."""
    if t.dtype == torch.uint8:
        return (t & 0x7F) == mxfp8_bits.E4M3_NAN
    return torch.isnan(t)


def check_case(
    q: Quantizer, rows: int, k: int, mode: str, gen: torch.Generator, device: torch.device
) -> dict:
    """One (rows, K) case in ``mode``, both forms: elements that differ from the torch form."""
    x = inputs(rows, k, gen, device)
    ref = mxfp8.quantize_mx(x, mode)
    ref_codes, ref_values = ref.data.view(torch.uint8), mxfp8.fake_quantize(x, mode, torch.bfloat16)
    data, scale, out = ~ref_codes, ~ref.scale, (~ref_values.view(torch.int16)).view(torch.bfloat16)
    q.codes(x, mode, data, scale)
    q.values(x, mode, out)
    wrong = {
        "codes": differing(data, ref_codes, is_nan(ref_codes)),
        "scales": differing(scale, ref.scale, torch.zeros_like(scale, dtype=torch.bool)),
        "values": differing(out, ref_values, torch.isnan(ref_values)),
    }
    status = "pass" if not any(wrong.values()) else "fail"
    return {
        "rows": rows,
        "k": k,
        "mode": mode,
        "nan": int(torch.isnan(x).sum()),
        "differ": wrong,
        "status": status,
    }


def correctness(
    results: Path,
    q: Quantizer,
    device: torch.device,
    cases: Sequence[tuple[int, int]] = CASES,
    seed: int | None = None,
) -> int:
    """Every case of ``cases`` in both scale modes (:func:`check_case`, one record each); 0 if all pass,
    else 1. A case that raises is recorded as failed and the others still run."""
    seed = time.time_ns() % 2**31 if seed is None else seed
    gen = torch.Generator(device=device).manual_seed(seed)
    return _each(
        results,
        "correctness",
        [(rows, k, mode) for rows, k in cases for mode in SCALE_MODES],
        lambda rows, k, mode: {"seed": seed} | check_case(q, rows, k, mode, gen, device),
    )


def _each(
    results: Path, stage: str, cases: Sequence[tuple[int, int, str]], measure: Callable[..., dict]
) -> int:
    base = {"stage": stage, "name": "mx_quantize", "key": gating.MX_QUANT_KEY}
    fields = [{"rows": rows, "k": k, "mode": mode} for rows, k, mode in cases]
    return each(results, base, fields, measure)


# -------------------------------------------------------------------------------------- timing


def bytes_moved(rows: int, k: int, form: str) -> int:
    """HBM bytes of one call: BF16 in; E4M3 codes and a scale byte per 32, or BF16 values, out."""
    return rows * k * (2 + 1) + rows * k // BLOCK if form == "codes" else rows * k * 4


def time_shape(
    q: Quantizer, rows: int, k: int, device: torch.device, iters: int = ITERS, goal: float = BANDWIDTH_GOAL
) -> dict[str, Any]:
    """One shape (exact scales): both forms of ``q`` and of the torch form, and a device copy of the
    codes form's byte count; each form's GB/s, its fraction of the copy's and its speedup."""
    ms = _form_times(q, rows, k, device, iters)  # its inputs freed before the copy's
    moved = bytes_moved(rows, k, "codes")
    ms["copy"] = copy_probe(moved, device, iters)[0]
    median = {name: statistics.median(t) for name, t in ms.items()}
    gb_per_s = {form: bytes_moved(rows, k, form) / median[form] / 1e6 for form in FORMS}
    copy = moved / median["copy"] / 1e6
    frac = {form: gb_per_s[form] / copy for form in FORMS}
    return {
        "rows": rows,
        "k": k,
        "ms": {
            name: {"min": min(t), "median": statistics.median(t), "max": max(t)} for name, t in ms.items()
        },
        "gb_per_s": gb_per_s,
        "copy_gb_per_s": copy,
        "frac_of_copy": frac,
        "goal": goal,
        "speedup_vs_torch_form": {form: median[f"torch_{form}"] / median[form] for form in FORMS},
        "status": "pass" if min(frac.values()) >= goal else "fail",
    }


def _form_times(q: Quantizer, rows: int, k: int, device: torch.device, iters: int) -> dict[str, list[float]]:
    x = torch.randn(rows, k, device=device).to(torch.bfloat16)
    data = torch.empty(rows, k, dtype=torch.uint8, device=device)
    scale = torch.empty(rows, k // BLOCK, dtype=torch.uint8, device=device)
    out = torch.empty_like(x)
    return {
        "codes": times_ms(lambda: q.codes(x, "exact", data, scale), device, iters)[0],
        "values": times_ms(lambda: q.values(x, "exact", out), device, iters)[0],
        "torch_codes": times_ms(lambda: mxfp8.quantize_mx(x, "exact"), device, iters)[0],
        "torch_values": times_ms(lambda: mxfp8.fake_quantize(x, "exact", torch.bfloat16), device, iters)[0],
    }


def timing(
    results: Path,
    q: Quantizer,
    device: torch.device,
    shapes: Sequence[tuple[int, int]] = TIMING_SHAPES,
    iters: int = ITERS,
    goal: float = BANDWIDTH_GOAL,
) -> int:
    """Every shape of ``shapes`` (:func:`time_shape`, one record each); 0 if every one meets ``goal``."""
    return _each(
        results,
        "timing",
        [(rows, k, "exact") for rows, k in shapes],
        lambda rows, k, mode: time_shape(q, rows, k, device, iters, goal),
    )
