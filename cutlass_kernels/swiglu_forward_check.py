"""The device checks of the fused SwiGLU forward kernel (:mod:`cutlass_kernels.swiglu_forward_kernel`):
its A against a float64 reference and its NaN where the torch form has them, its MX forms bit for bit
against the torch form's quantization of that A, and its time against the torch forms the layers ran
before it and against the HBM bandwidth of the same run (the faster of a device copy and a BF16 add
of the BF16 form's byte count). One JSON line per case, appended to a results file the moment it
exists (:mod:`cutlass_kernels.results`), under the gating key
:data:`cutlass_kernels.gating.SWIGLU_FWD_KEY`.

An implementation under test is an ``Impl``, ``impl(form, mode, h, *outs)``, writing a form's
outputs (:func:`cutlass_kernels.swiglu_forward_kernel.plan`'s) into the ones it is given: the
kernel's ``launch``, or in the device run's dry run :func:`steps`, the kernel's arithmetic in torch
(:func:`cutlass_kernels.swiglu_torch.swiglu_forward_steps`, then :mod:`cutlass_kernels.mxfp8_bits`).
The check hands each output between guard rows: A's prefilled with a BF16 bit pattern no
implementation writes (0xFF81, a signalling NaN: arithmetic and conversions give quiet ones), the MX
forms' with the bitwise complement of the expected result, so an element left unwritten or a write
past either end shows.

**A's tolerance.** The kernel rounds its FP32 result r to BF16 (unit roundoff u = 2^-8), so
|k - r| <= u |k|; the reference rounds the exact A the same way, |ref - A| <= u |ref| (through FP32
in torch's cast, 2^-24 more). The FP32 evaluation r is within eta |A| of A: the argument g log2 e
rounded to FP32 puts a relative error of up to 2^-24 |g log2 e| ln 2 on exp(-g) (2^-17.5 at
|g| = 88), and ex2.approx, rcp.approx and three roundings add about 2^-21: eta = 2^-15 leaves a
factor of two. An intermediate silu(g) below 2^-126 (a subnormal gate) is rounded to a spacing of
2^-149, which up multiplies: 2^-149 |up|. A subnormal BF16 result is rounded to a spacing of 2^-133:
an absolute floor of 2^-132. BF16's range ends at 2^128 (the largest finite value is
2^128 (1 - 2^-8), and rounding to nearest even sends what lies above its halfway point to infinity),
so an infinity counts as 2^128 of its sign on either side: a product rounded to infinity on one side
and to the largest finite BF16 on the other is one rounding apart, not a failure, and a wrong sign
or a finite value where the other is infinite is. With M = min(|A|, 2^128), an element passes iff
|k - ref| <= u (|k| + |ref|) + eta M + 2^-149 |up| + 2^-132. Where sigmoid(g) < 2^-126
(g < -87.3) it is no normal FP32: subnormal in the kernel down to g = -88.7, and zero below, where
exp(-g) overflows, in the kernel and the torch form alike, while the true A there is up to
|up| 2^-121. The FP32 sigmoid loses part or all of itself there, and never gains: such an element
passes iff it lies between 0 and ref, within the same tolerance.

**NaN** is no matter of tolerance: the kernel's A must be NaN exactly where the torch form's is. Both
are IEEE float32 evaluations of the same products, whose NaN cases are the same: a NaN input,
silu(-inf) (-inf times a sigmoid of 0), inf times 0 (an infinite gate or up with a zero factor, the
zero sigmoid of a gate below -88.7 included). The kernel's reciprocal keeps a subnormal sigmoid
(``rcp.approx.f32``), so between g = -88.7 and -87.3, where the torch form's silu is a normal
~1e-36, its silu is not zero either and an infinite up gives an infinity in both.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from cutlass_kernels import gating, mxfp8, mxfp8_bits, swiglu_forward_kernel
from cutlass_kernels.formats import E8M0_BIAS, SCALE_MODES
from cutlass_kernels.formats import MX_BLOCK as BLOCK
from cutlass_kernels.mx_quant_check import differing, is_nan
from cutlass_kernels.swiglu_check import add_probe, copy_probe, each_shape, times_ms
from cutlass_kernels.swiglu_torch import swiglu_forward, swiglu_forward_steps

Impl = Callable[..., object]

U_BF16 = 2.0**-8
ETA_F32 = 2.0**-15
SUBNORMAL_SILU = 2.0**-149  # the spacing of FP32 subnormals: silu(g) rounded there, times up
FLOOR = 2.0**-132  # twice the rounding error of a subnormal BF16
BF16_END = 2.0**128  # an infinity, as a magnitude: the BF16 value past the largest finite one
SIGMOID_NORMAL_GATE = -126 * 0.6931471805599453  # sigmoid(g) < 2^-126 below this gate
# bits no implementation writes: a signalling BF16 NaN (arithmetic and conversions give quiet ones),
# A's prefill and every BF16 guard; a byte 0xFF, the uint8 guards' (no scale; the kernels' NaN code
# is 0x7F)
SENTINEL = {torch.bfloat16: -127, torch.uint8: 0xFF}  # int16 -127: 0xFF81
GUARD_ROWS = 1
FORMS = swiglu_forward_kernel.FORMS
# (rows, F): none, one block, ragged rows with 3 and 5 blocks a row (units wrap rows mid-warp), the
# per-rank shapes, and more units than a grid of 132 SMs x 8 CTAs x 128 threads covers at once with
# 5 blocks a row (135,168 threads: each walks further, its (row, block) carried across a row's end)
CASES: tuple[tuple[int, int], ...] = (
    (0, 32),
    (1, 32),
    (3, 96),
    (33, 160),
    (1000, 1536),
    (4099, 3072),
    (30011, 160),
    (12288, 3072),
)
DRY_CASES: tuple[tuple[int, int], ...] = ((0, 32), (1, 32), (3, 96), (33, 160), (40, 256))
TIMING_SHAPES: tuple[tuple[int, int], ...] = ((12288, 3072), (283853, 3072))
DRY_TIMING_SHAPES: tuple[tuple[int, int], ...] = ((64, 256),)
BANDWIDTH_GOAL = 0.8  # of the HBM bandwidth (the faster probe), for every form
ITERS = 10


def kernel() -> Impl:
    """The CUDA kernel, writing into the outputs it is given."""
    return swiglu_forward_kernel.launch


def steps() -> Impl:
    """The kernel's arithmetic in torch, writing as the kernel does: the dry run's stand-in."""

    def impl(form: str, mode: str | None, h: torch.Tensor, *outs: torch.Tensor) -> None:
        a = swiglu_forward_steps(h)
        if form == "bfloat16":
            outs[0].copy_(a)
        elif form == "values":
            outs[0].copy_(mxfp8_bits.values(a, str(mode)))
        else:
            codes, e = mxfp8_bits.quantize(a, str(mode))
            outs[0].copy_(codes)
            outs[1].copy_((e + E8M0_BIAS).to(torch.uint8))

    return impl


def doubled(impl: Impl) -> Impl:
    """``impl`` with A and the values doubled and the codes' scales one higher: the planted ``wrong``
    fault."""

    def wrong(form: str, mode: str | None, h: torch.Tensor, *outs: torch.Tensor) -> None:
        impl(form, mode, h, *outs)
        if form == "codes":
            outs[1].add_(1)
        else:
            outs[0].mul_(2)

    return wrong


# -------------------------------------------------------------------------------------- inputs


def inputs(rows: int, f: int, gen: torch.Generator, device: torch.device) -> torch.Tensor:
    """Fresh BF16 H = [gate | up] [rows, 2F]. Gates N(0, 3^2), 10% in the sigmoid's saturation (|g| in
    [20, 80], both signs), 3% from 85 to 120 (the subnormal sigmoid and beyond it), 1% at 2^k for k
    up to 127, 5% zeros, 0.2% each of +inf, -inf and NaN. Ups N(0, 1), 5% zeros, 0.2% each of +inf,
    -inf and NaN; one row in five scaled by 2^k, k from -140 to 127 (subnormal products to overflowing
    ones); one block in fifty of zero ups (an all-zero block of A)."""

    def draw(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=gen, device=device)

    def signed(lo: torch.Tensor | float, hi: torch.Tensor | float) -> torch.Tensor:
        return (lo + (hi - lo) * draw(rows, f)) * torch.where(draw(rows, f) < 0.5, -1.0, 1.0)

    def specials(x: torch.Tensor) -> torch.Tensor:
        pick = draw(rows, f)
        x = torch.where(pick < 0.002, float("inf"), x)
        x = torch.where((pick >= 0.002) & (pick < 0.004), -float("inf"), x)
        return torch.where((pick >= 0.004) & (pick < 0.006), float("nan"), x)

    pick = draw(rows, f)
    gate = torch.randn(rows, f, generator=gen, device=device) * 3.0
    gate = torch.where(pick < 0.10, signed(20.0, 80.0), gate)
    gate = torch.where((pick >= 0.10) & (pick < 0.13), signed(85.0, 120.0), gate)
    power = torch.exp2(torch.randint(0, 128, (rows, f), generator=gen, device=device).float())
    gate = torch.where((pick >= 0.13) & (pick < 0.14), signed(power, power), gate)
    gate = specials(torch.where((pick >= 0.14) & (pick < 0.19), 0.0, gate))
    up = torch.where(draw(rows, f) < 0.05, 0.0, torch.randn(rows, f, generator=gen, device=device))
    scale = torch.exp2(torch.randint(-140, 128, (rows, 1), generator=gen, device=device).float())
    up = up * torch.where(draw(rows, 1) < 0.2, scale, 1.0)
    zero_blocks = (draw(rows, f // BLOCK) < 0.02).repeat_interleave(BLOCK, dim=1)
    up = specials(torch.where(zero_blocks, 0.0, up.clamp(-3.38e38, 3.38e38)))
    return torch.cat([gate, up], dim=1).to(torch.bfloat16)


def reference(h: torch.Tensor) -> torch.Tensor:
    """A = silu(gate) * up in float64, IEEE's infinities and NaN included."""
    f = h.shape[1] // 2
    g, up = h[:, :f].double(), h[:, f:].double()
    return g * torch.sigmoid(g) * up


def errors(out: torch.Tensor, h: torch.Tensor, exact: torch.Tensor, nan: torch.Tensor) -> dict[str, Any]:
    """A's errors over the elements that are not NaN in the torch form (``nan``), ``ref`` the exact A
    rounded to BF16 and infinities as +-2^128 on both sides (module docstring): ``excess``, the
    largest |out - ref| / tolerance where the sigmoid is a normal float32 (infinite where the
    comparison has no answer: a NaN on one side only), and ``low_gate_violations``, the elements of
    gates below -87.3 that are not between 0 and ``ref`` (within the tolerance)."""
    keep = ~nan
    f = h.shape[1] // 2
    g, up = h[:, :f].double()[keep], h[:, f:].double()[keep]
    k, ref = _ended(out.double()[keep]), _ended(exact.to(torch.bfloat16).double()[keep])
    magnitude = exact[keep].abs().clamp(max=BF16_END)
    silu_rounding = SUBNORMAL_SILU * up.abs().clamp(max=BF16_END)
    tol = U_BF16 * (k.abs() + ref.abs()) + ETA_F32 * magnitude + silu_rounding + FLOOR
    low = g < SIGMOID_NORMAL_GATE
    ratio = ((k - ref).abs() / tol)[~low]
    excess = float("inf") if bool(ratio.isnan().any()) else float(ratio.max()) if ratio.numel() else 0.0
    inside = (k.abs() <= ref.abs() + tol) & (k * ref >= 0)
    return {"excess": excess, "low_gate_violations": int((low & ~inside).sum())}


def _ended(t: torch.Tensor) -> torch.Tensor:
    """``t`` with its infinities as +-2^128."""
    return torch.where(t.isinf(), t.sign() * BF16_END, t)


# --------------------------------------------------------------------------------- correctness


def guarded(
    rows: int, cols: int, dtype: torch.dtype, fill: torch.Tensor, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(buffer, view): a contiguous [rows, cols] view holding ``fill`` between ``GUARD_ROWS`` rows of
    :data:`SENTINEL` bits, in a buffer 16-byte aligned for cols a multiple of 16."""
    bits = torch.int16 if dtype == torch.bfloat16 else torch.uint8
    buf = torch.full((rows + 2 * GUARD_ROWS, cols), SENTINEL[dtype], dtype=bits, device=device)
    view = buf[GUARD_ROWS : GUARD_ROWS + rows]
    view.copy_(fill.view(bits))
    return buf.view(dtype), view.view(dtype)


def _guards_written(buf: torch.Tensor) -> int:
    bits = buf.view(torch.int16 if buf.dtype == torch.bfloat16 else torch.uint8)
    edges = torch.cat([bits[:GUARD_ROWS], bits[-GUARD_ROWS:]])
    return int((edges != SENTINEL[buf.dtype]).sum())


def check_case(impl: Impl, rows: int, f: int, gen: torch.Generator, device: torch.device) -> dict[str, Any]:
    """One (rows, F) case on fresh inputs, every form and mode (module docstring): A's errors
    (:func:`errors`) and the torch form's (a check of the tolerance), A's NaN where the torch form has
    none or none where it has one, its elements left unwritten, and per scale mode the codes, scales
    and values that differ from the torch form's quantization of A; guard elements written in all;
    and, for the record, the blocks whose scale the kernel's A and the torch form's A give
    differently."""
    h = inputs(rows, f, gen, device)
    unwritten = torch.full((rows, f), SENTINEL[torch.bfloat16], dtype=torch.int16, device=device)
    buf_a, a = guarded(rows, f, torch.bfloat16, unwritten.view(torch.bfloat16), device)
    impl("bfloat16", None, h, a)
    torch_a = swiglu_forward(h)
    exact = reference(h)
    nan = torch.isnan(torch_a)
    record: dict[str, Any] = {
        "rows": rows,
        "f": f,
        "nan": int(nan.sum()),
        **errors(a, h, exact, nan),
        "torch_form": errors(torch_a, h, exact, nan),
        "nan_mismatch": int((torch.isnan(a) != nan).sum()),
        "unwritten": int((a.view(torch.int16) == SENTINEL[torch.bfloat16]).sum()),
    }
    guards = _guards_written(buf_a)
    for mode in SCALE_MODES:
        ref = mxfp8.quantize_mx(a, mode)
        ref_codes, ref_values = ref.data.view(torch.uint8), mxfp8.fake_quantize(a, mode, torch.bfloat16)
        buf_codes, codes = guarded(rows, f, torch.uint8, ~ref_codes, device)
        buf_scale, scale = guarded(rows, f // BLOCK, torch.uint8, ~ref.scale, device)
        buf_values, values = guarded(
            rows, f, torch.bfloat16, (~ref_values.view(torch.int16)).view(torch.bfloat16), device
        )
        impl("codes", mode, h, codes, scale)
        impl("values", mode, h, values)
        record[mode] = {
            "codes": differing(codes, ref_codes, is_nan(ref_codes)),
            "scales": differing(scale, ref.scale, torch.zeros_like(scale, dtype=torch.bool)),
            "values": differing(values, ref_values, torch.isnan(ref_values)),
            "torch_form_scales_differ": int((mxfp8.quantize_mx(torch_a, mode).scale != ref.scale).sum()),
        }
        guards += sum(_guards_written(b) for b in (buf_codes, buf_scale, buf_values))
    record["guard_written"] = guards
    bits = [record[m][k] for m in SCALE_MODES for k in ("codes", "scales", "values")]
    passed = (
        record["excess"] <= 1
        and not record["low_gate_violations"]
        and not record["nan_mismatch"]
        and not record["unwritten"]
        and not guards
        and not any(bits)
    )
    return record | {"status": "pass" if passed else "fail"}


def correctness(
    results: Path,
    impl: Impl,
    device: torch.device,
    cases: Sequence[tuple[int, int]] = CASES,
    seed: int | None = None,
) -> int:
    """Every case of ``cases`` (:func:`check_case`, one record each, appended to ``results``); 0 if
    all pass, else 1. A case that raises is recorded as failed and the others still run."""
    seed = time.time_ns() % 2**31 if seed is None else seed
    gen = torch.Generator(device=device).manual_seed(seed)

    def measure(rows: int, f: int) -> dict[str, Any]:
        return {"seed": seed} | check_case(impl, rows, f, gen, device)

    return each_shape(results, _base("correctness"), cases, measure, device)


def _base(stage: str) -> dict[str, Any]:
    return {"stage": stage, "name": "swiglu_forward", "key": gating.SWIGLU_FWD_KEY}


# -------------------------------------------------------------------------------------- timing


def time_shape(
    impl: Impl, rows: int, f: int, device: torch.device, iters: int = ITERS, goal: float = BANDWIDTH_GOAL
) -> dict[str, Any]:
    """One shape (exact scales): each form of ``impl`` and of the torch forms the layers ran before it
    (the torch SwiGLU, then the torch quantization to codes or values), and the two bandwidth probes
    of the BF16 form's byte count; each form's GB/s, its fraction of the faster probe's (the HBM
    bandwidth of the run) and its speedup over the torch form."""
    ms = _form_times(impl, rows, f, device, iters)  # its tensors freed before the probes'
    moved = swiglu_forward_kernel.bytes_moved(rows, f, "bfloat16")
    ms["copy"] = copy_probe(moved, device, iters)[0]
    ms["add"] = add_probe(moved, device, iters)[0]
    median = {name: statistics.median(t) for name, t in ms.items()}
    gb_per_s = {form: swiglu_forward_kernel.bytes_moved(rows, f, form) / median[form] / 1e6 for form in FORMS}
    probes = {name: moved / median[name] / 1e6 for name in ("copy", "add")}
    hbm = max(probes.values())
    frac = {form: gb_per_s[form] / hbm for form in FORMS}
    return {
        "rows": rows,
        "f": f,
        "bytes": {form: swiglu_forward_kernel.bytes_moved(rows, f, form) for form in FORMS},
        "ms": {
            name: {"min": min(t), "median": statistics.median(t), "max": max(t)} for name, t in ms.items()
        },
        "gb_per_s": gb_per_s | probes,
        "hbm_gb_per_s": hbm,
        "frac_of_hbm": frac,
        "goal": goal,
        "speedup_vs_torch_form": {form: median[f"torch_{form}"] / median[form] for form in FORMS},
        "status": "pass" if min(frac.values()) >= goal else "fail",
    }


def _form_times(impl: Impl, rows: int, f: int, device: torch.device, iters: int) -> dict[str, list[float]]:
    h = torch.randn(rows, 2 * f, device=device, dtype=torch.bfloat16)
    outs = {form: swiglu_forward_kernel.plan(h, form) for form in FORMS}
    mode = SCALE_MODES[0]
    return {
        "bfloat16": times_ms(lambda: impl("bfloat16", None, h, *outs["bfloat16"]), device, iters)[0],
        "codes": times_ms(lambda: impl("codes", mode, h, *outs["codes"]), device, iters)[0],
        "values": times_ms(lambda: impl("values", mode, h, *outs["values"]), device, iters)[0],
        "torch_bfloat16": times_ms(lambda: swiglu_forward(h), device, iters)[0],
        "torch_codes": times_ms(lambda: mxfp8.quantize_mx(swiglu_forward(h), mode), device, iters)[0],
        "torch_values": times_ms(
            lambda: mxfp8.fake_quantize(swiglu_forward(h), mode, torch.bfloat16), device, iters
        )[0],
    }


def timing(
    results: Path,
    impl: Impl,
    device: torch.device,
    shapes: Sequence[tuple[int, int]] = TIMING_SHAPES,
    iters: int = ITERS,
    goal: float = BANDWIDTH_GOAL,
) -> int:
    """Every shape of ``shapes`` (:func:`time_shape`, one record each); 0 if every one meets ``goal``,
    else 1. A shape that raises is recorded as failed (with its error)."""

    def measure(rows: int, f: int) -> dict[str, Any]:
        return time_shape(impl, rows, f, device, iters, goal)

    return each_shape(results, _base("timing"), shapes, measure, device)
