"""The SwiGLU forward without a GPU: the torch form and the fused kernel's arithmetic (its steps in
torch) against a float64 formulation, on every BF16 gate and on seeded random data with large and
tiny magnitudes, zeros, infinities and NaN, their NaN exactly where the torch form has them; the
kernel's MX forms (its steps, then the quantization's) the torch form's quantization of A bit for bit
on every BF16 value of A; the device check's plumbing on the CPU, passing the steps and failing
planted faults; the wrapper's refusals and plans; the dispatch (the torch form until the kernel is
chosen, the MX form the down projection's backend multiplies, the launches a GPU would make); and
the MX GEMM taking A as its values. The kernel's PTX: tests/test_kernels_compile.py."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode, is_fake

from cutlass_kernels import api, gating, mxfp8
from cutlass_kernels.formats import MX_BLOCK, SCALE_MODES
from cutlass_kernels.mxfp8 import MXTensor, MXValues
from cutlass_kernels.swiglu_torch import swiglu_forward, swiglu_forward_steps

CPU = torch.device("cpu")
needs_dsl = pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="the CUTLASS Python DSL cannot be imported"
)
check = pytest.importorskip("cutlass_kernels.swiglu_forward_check", reason="the CUTLASS Python DSL")

# ups beside every BF16 gate: signs, zeros, subnormal and large magnitudes, the largest finite BF16,
# infinities and NaN
SPECIAL_UPS = (1.0, -1.0, 3.7, -0.3, 0.0, -0.0, 2.0**-130, -(2.0**-140), 1e-20, 2.0**100)
SPECIAL_UPS += (-1.5 * 2.0**127, 7e30, 3.38e38, float("inf"), -float("inf"), float("nan"))


def _every_bf16() -> torch.Tensor:
    return torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16)


def _forms_errors(h: torch.Tensor) -> dict[str, dict]:
    """The torch form's and the steps' errors against float64 (NaN where the torch form has them)."""
    torch_a, exact = swiglu_forward(h), check.reference(h)
    nan = torch.isnan(torch_a)
    out = {}
    for name, a in (("torch", torch_a), ("steps", swiglu_forward_steps(h))):
        out[name] = check.errors(a, h, exact, nan) | {"nan_mismatch": int((torch.isnan(a) != nan).sum())}
    return out


def test_every_bf16_gate_is_within_tolerance_and_nan_where_the_torch_form_is():
    gates = _every_bf16()
    ups = torch.tensor(SPECIAL_UPS).bfloat16()
    h = torch.cat([gates.unsqueeze(1).expand(-1, len(ups)), ups.expand(gates.numel(), -1)], dim=1)
    for name, errors in _forms_errors(h.contiguous()).items():
        assert errors["excess"] <= 1 and errors["low_gate_violations"] == errors["nan_mismatch"] == 0, name


def test_seeded_inputs_are_within_tolerance_and_hold_every_special_case(seed: int):
    h = check.inputs(600, 256, torch.Generator().manual_seed(seed), CPU)
    gate, up = h[:, :256].float(), h[:, 256:].float()
    for values in (gate, up):
        assert bool(torch.isnan(values).any()) and bool(torch.isposinf(values).any())
        assert bool(torch.isneginf(values).any()) and bool((values == 0).any())
    assert bool(((gate < -87.4) & (gate > -88.7)).any()) and bool((gate < -88.7).any())  # the low gates
    a64 = check.reference(h)
    assert bool((a64.abs() > 3.4e38).any()) and bool(((a64 != 0) & (a64.abs() < 2.0**-126)).any())
    assert bool((swiglu_forward(h).unflatten(1, (-1, MX_BLOCK)) == 0).all(-1).any())  # all-zero blocks
    for name, errors in _forms_errors(h).items():
        assert errors["excess"] <= 1 and errors["low_gate_violations"] == errors["nan_mismatch"] == 0, name


def test_the_tolerance_holds_a_rounding_and_fails_two():
    """One ulp off the rounded reference passes anywhere in a binade, two do not; infinity one
    rounding from the largest finite BF16 passes, a wrong sign or a finite value far from it does not;
    below the normal sigmoid a lost magnitude passes and a gained one does not."""
    largest = torch.tensor(0x7CFF, dtype=torch.int16).view(torch.bfloat16).float()  # 32 x it: 0x7F7F
    g = [2.0, 2.0, 1.0, 32.0, 32.0, -88.0]
    up = [1.0, 3.0, 3.0, float(largest), 2.0**125, 2e30]
    h = torch.tensor([g, up]).T.contiguous().bfloat16()  # rows of (gate, up): F = 1
    exact = check.reference(h)
    ref = exact.to(torch.bfloat16)
    nan = torch.zeros_like(ref, dtype=torch.bool)

    def off(k: int, i: int, t: torch.Tensor = ref) -> dict:
        out = t.clone()
        out.view(torch.int16)[i] += k
        return check.errors(out, h, exact, nan)

    assert ref.view(torch.int16)[3].item() == 0x7F7F and torch.isposinf(ref[4]).item()
    assert check.errors(ref, h, exact, nan) == {"excess": 0.0, "low_gate_violations": 0}
    for i in (0, 1, 2):
        assert off(1, i)["excess"] <= 1 and off(-1, i)["excess"] <= 1
        assert off(2, i)["excess"] > 1 and off(-2, i)["excess"] > 1
    assert off(1, 3)["excess"] <= 1 and off(-1, 4)["excess"] <= 1  # infinity <-> the largest finite
    assert off(-3, 4)["excess"] > 1 and check.errors(-ref, h, exact, nan)["excess"] > 1
    assert off(-ref[5].view(torch.int16).item(), 5)["low_gate_violations"] == 0  # lost: +0
    assert off(1 << 7, 5)["low_gate_violations"] == 1  # gained: twice the magnitude
    assert check.errors(ref.masked_fill(~nan, float("nan")), h, exact, nan)["excess"] == float("inf")


def test_every_bf16_value_of_a_quantizes_as_the_torch_form():
    """gate 32 (sigmoid 1 in float32): A = 32 up exactly, every BF16 value of up once, shuffled into
    blocks; the kernel's MX forms (its steps) equal the torch form's quantization of that A."""
    up = _every_bf16()[torch.randperm(2**16, generator=torch.Generator().manual_seed(3))].view(-1, 256)
    h = torch.cat([torch.full_like(up, 32.0), up], dim=1)
    a = swiglu_forward_steps(h)
    scaled = (up.float() * 32).bfloat16()
    assert torch.equal(torch.isnan(a), torch.isnan(up))
    assert torch.equal(a.view(torch.int16)[~torch.isnan(a)], scaled.view(torch.int16)[~torch.isnan(a)])
    steps = check.steps()
    for mode in SCALE_MODES:
        codes, values = torch.empty_like(a, dtype=torch.uint8), torch.empty_like(a)
        scale = torch.empty(a.shape[0], a.shape[1] // MX_BLOCK, dtype=torch.uint8)
        steps("codes", mode, h, codes, scale)
        steps("values", mode, h, values)
        ref = mxfp8.quantize_mx(a, mode)
        ref_codes, ref_values = ref.data.view(torch.uint8), mxfp8.fake_quantize(a, mode, torch.bfloat16)
        assert check.differing(codes, ref_codes, check.is_nan(ref_codes)) == 0
        assert torch.equal(scale, ref.scale)
        assert check.differing(values, ref_values, torch.isnan(ref_values)) == 0


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _skipping_last_row(impl: Callable[..., object]) -> Callable[..., object]:
    def skip(form: str, mode: str | None, h: torch.Tensor, *outs: torch.Tensor) -> None:
        saved = [o[-1:].clone() for o in outs]
        impl(form, mode, h, *outs)
        for o, s in zip(outs, saved, strict=True):
            o[-1:] = s

    return skip


def _shifting_scales(impl: Callable[..., object]) -> Callable[..., object]:
    def shift(form: str, mode: str | None, h: torch.Tensor, *outs: torch.Tensor) -> None:
        impl(form, mode, h, *outs)
        if form == "codes":
            outs[1].copy_(outs[1].roll(1, dims=1))

    return shift


def _past_the_end(impl: Callable[..., object]) -> Callable[..., object]:
    def past(form: str, mode: str | None, h: torch.Tensor, *outs: torch.Tensor) -> None:
        impl(form, mode, h, *outs)
        if form == "bfloat16":
            base = outs[0].view(-1)
            torch.as_strided(base, (1,), (1,), base.storage_offset() + base.numel()).fill_(0.0)

    return past


def test_the_device_check_passes_the_kernels_steps_and_fails_planted_faults(tmp_path: Path, seed: int):
    results = tmp_path / "results.jsonl"
    steps = check.steps()
    assert check.correctness(results, steps, CPU, check.DRY_CASES, seed % 2**31) == 0
    passed = _records(results)
    assert [(r["rows"], r["f"], r["status"]) for r in passed] == [(*c, "pass") for c in check.DRY_CASES]
    assert {r["key"] for r in passed} == {gating.SWIGLU_FWD_KEY}
    assert sum(r["nan"] for r in passed) > 0 and passed[-1]["torch_form"]["excess"] <= 1
    faults = {
        "doubled": check.doubled(steps),
        "last row": _skipping_last_row(steps),
        "scales": _shifting_scales(steps),
        "guard": _past_the_end(steps),
    }
    for name, impl in faults.items():
        assert check.correctness(results, impl, CPU, ((33, 160),), seed % 2**31) == 1, name
    doubled, last_row, scales, guard = _records(results)[len(passed) :]
    assert doubled["excess"] > 1 and doubled["exact"]["scales"] > 0 and doubled["fast"]["values"] > 0
    assert last_row["unwritten"] == 160 and last_row["exact"]["codes"] > 0 and last_row["fast"]["scales"] > 0
    assert scales["exact"]["scales"] > 0 and scales["excess"] <= 1 and not scales["exact"]["codes"]
    assert guard["guard_written"] == 1 and guard["excess"] <= 1
    assert gating.stages_of(gating.SWIGLU_FWD_KEY) == ("correctness", "timing")


def test_the_timing_record_compares_every_form_with_the_probes(tmp_path: Path):
    results = tmp_path / "results.jsonl"
    assert check.timing(results, check.steps(), CPU, ((64, 256),), 2, 0.0) == 0
    (record,) = _records(results)
    forms = ("bfloat16", "codes", "values")
    assert record["bytes"] == {
        "bfloat16": 64 * 256 * 6,
        "codes": 64 * 256 * 5 + 64 * 8,
        "values": 64 * 256 * 6,
    }
    assert set(record["ms"]) == {*forms, *(f"torch_{f}" for f in forms), "copy", "add"}
    assert set(record["frac_of_hbm"]) == set(record["speedup_vs_torch_form"]) == set(forms)
    assert record["hbm_gb_per_s"] == max(record["gb_per_s"]["copy"], record["gb_per_s"]["add"])
    assert record["status"] == "pass" and record["key"] == gating.SWIGLU_FWD_KEY


# ------------------------------------------------------------------------------------ wrapper


@needs_dsl
def test_the_wrapper_names_what_the_kernel_cannot_take_and_plans_its_outputs(torch_rng: torch.Generator):
    from cutlass_kernels import swiglu_forward_kernel as k

    h = torch.randn(5, 192, generator=torch_rng).bfloat16()
    assert k.layout_reason(h) == ""
    assert "float32" in k.layout_reason(h.float())
    assert "F=48 is not a positive multiple of 32" in k.layout_reason(h[:, :96].contiguous())
    assert "h [rows, 2F]" in k.layout_reason(h[0])
    assert "not contiguous" in k.layout_reason(torch.randn(5, 384).bfloat16()[:, ::2])
    assert "on cpu" in k.unsupported_reason(h)
    with pytest.raises(ValueError, match="on cpu"):
        k.swiglu_forward(h)
    with pytest.raises(ValueError, match="form 'scaled' is not allowed"):
        k.launch("scaled", None, h)
    with pytest.raises(ValueError, match="scale mode 'exact' is not allowed for form bfloat16"):
        k.swiglu_forward(h, "bfloat16", "exact")
    with pytest.raises(ValueError, match="scale mode None is not allowed for form codes"):
        k.swiglu_forward(h, "codes")
    assert [tuple(t.shape) for t in k.plan(h, "codes")] == [(5, 96), (5, 3)]
    (a,) = k.plan(h, "values")
    assert (a.shape, a.dtype) == ((5, 96), torch.bfloat16)
    assert "output 1 [5, 4]" in k.output_reason(h, "codes", (a.byte(), torch.empty(5, 4, dtype=torch.uint8)))
    assert "writes 1 output(s), got 2" in k.output_reason(h, "bfloat16", (a, a))
    assert k.bytes_moved(7, 64, "bfloat16") == 7 * 64 * 6 == k.bytes_moved(7, 64, "values")
    assert k.bytes_moved(7, 64, "codes") == 7 * 64 * 5 + 7 * 2  # codes and a scale byte per 32


@needs_dsl
def test_under_fake_tensors_the_wrapper_allocates_and_records_its_launch():
    from cutlass_kernels import swiglu_forward_kernel as k
    from cutlass_kernels.planning import planned_launches

    with FakeTensorMode(), planned_launches("sm_90a") as launches:
        h = torch.empty(300_000, 6144, dtype=torch.bfloat16, device="cuda")
        a = k.swiglu_forward(h)
        mx = k.swiglu_forward(h, "codes", "fast")
        values = k.swiglu_forward(h, "values", "exact")
        k.swiglu_forward(torch.empty(0, 64, dtype=torch.bfloat16, device="cuda"))  # no rows: no launch
    assert is_fake(a) and (a.shape, a.dtype) == ((300_000, 3072), torch.bfloat16)
    assert (
        isinstance(mx, MXTensor) and mx.scale.shape == (300_000, 96) and mx.data.dtype == torch.float8_e4m3fn
    )
    assert isinstance(values, MXValues) and values.shape == (300_000, 3072)
    assert [(x.kernel, x.op, x.out_shape, x.out_dtype) for x in launches] == [
        ("swiglu_forward_bfloat16_sm_90a", "swiglu-forward", (300_000, 3072), "bfloat16"),
        ("swiglu_forward_mx_fast_codes_sm_90a", "swiglu-forward", (300_000, 3072), "uint8"),
        ("swiglu_forward_mx_exact_values_sm_90a", "swiglu-forward", (300_000, 3072), "bfloat16"),
    ]


# ----------------------------------------------------------------------------------- dispatch


def test_the_layers_run_the_torch_form_until_the_kernel_is_chosen(
    monkeypatch: pytest.MonkeyPatch, torch_rng: torch.Generator
):
    import cutlass_kernels
    from cutlass_kernels import choices, quantize
    from cutlass_kernels import swiglu_forward as dispatch

    assert choices.SWIGLU_FORWARD == "torch" and dispatch.implementation() == "torch"
    assert cutlass_kernels.swiglu is dispatch.swiglu and cutlass_kernels.swiglu_mx is dispatch.swiglu_mx
    h = torch.randn(6, 128, generator=torch_rng).bfloat16() * 4
    monkeypatch.setenv(dispatch.IMPLEMENTATION_ENV, "kernel")
    assert dispatch.kernel_reason(h) == "h is on cpu; the kernel runs on CUDA"
    assert torch.equal(dispatch.swiglu(h), swiglu_forward(h))
    mx = dispatch.swiglu_mx(h, "fast")  # the torch backend multiplies codes and scales
    ref = quantize.quantize_mx(swiglu_forward(h), "fast")
    assert isinstance(mx, MXTensor) and torch.equal(mx.data.view(torch.uint8), ref.data.view(torch.uint8))
    assert torch.equal(mx.scale, ref.scale)
    monkeypatch.setenv(dispatch.IMPLEMENTATION_ENV, "triton")
    with pytest.raises(ValueError, match="CUTLASS_KERNELS_SWIGLU_FORWARD='triton' is not allowed"):
        dispatch.swiglu(h)


@needs_dsl
@pytest.mark.parametrize(("arch", "form"), [("sm_90a", "values"), ("sm_100a", "codes")])
def test_a_chosen_kernel_hands_the_down_projection_the_form_its_arch_multiplies(
    arch: str, form: str, monkeypatch: pytest.MonkeyPatch
):
    """On (fake) CUDA tensors of a planned GPU: one fused launch gives A in the MX form of the arch's
    GEMM (BF16 values on Hopper, codes and scales on Blackwell), which the GEMM takes as it is: its
    own launch is the only other one. Pinned off, or for a layout it cannot take, the torch form runs
    (no launch of its own)."""
    from cutlass_kernels import swiglu_forward as dispatch
    from cutlass_kernels.planning import planned_launches

    monkeypatch.setenv(dispatch.IMPLEMENTATION_ENV, "kernel")
    with FakeTensorMode(), planned_launches(arch) as launches:
        h, w = (
            torch.empty(300, 512, dtype=torch.bfloat16, device="cuda"),
            torch.empty(4, 256, 256, device="cuda"),
        )
        offs = torch.tensor([10, 10, 200, 300], device="cuda").to(torch.int32)
        assert (
            api.mx_operand_form("auto", h.device) == form
            and api.mx_operand_form("torch", h.device) == "codes"
        )
        a = dispatch.swiglu_mx(h, "exact")
        y = api.grouped_gemm_mx(a, mxfp8.quantize_mx(w), offs)
        assert isinstance(a, MXValues if form == "values" else MXTensor) and y.shape == (300, 256)
        assert "multiple of 32" in dispatch.kernel_reason(
            torch.empty(3, 48, dtype=torch.bfloat16, device="cuda")
        )
        monkeypatch.setenv(gating.BACKEND_ENV, "torch")
        assert dispatch.kernel_reason(h) == "CUTLASS_KERNELS_BACKEND=torch: no CuTe kernels in this process"
    gemm = (
        "grouped_fprop_bfloat16-bfloat16_128x256_sm_90a"
        if form == "values"
        else "grouped_fprop_mx_float8_e4m3fn-bfloat16_128x128_sm_100a"
    )
    assert [x.kernel for x in launches] == [f"swiglu_forward_mx_exact_{form}_{arch}", gemm]


def test_the_mx_gemm_multiplies_a_given_as_its_values_as_it_would_have_quantized_it(
    torch_rng: torch.Generator,
):
    a = (torch.randn(40, 64, generator=torch_rng) * 3).bfloat16()
    w = mxfp8.quantize_mx(torch.randn(3, 32, 64, generator=torch_rng))
    offs = torch.tensor([5, 5, 40], dtype=torch.int32)
    for mode in SCALE_MODES:
        values = MXValues(mxfp8.fake_quantize(a, mode, torch.bfloat16))
        expected = api.grouped_gemm_mx(a, w, offs, mode=mode, out_dtype=torch.float32)
        assert torch.equal(api.grouped_gemm_mx(values, w, offs, out_dtype=torch.float32), expected)
    with pytest.raises(ValueError, match="give a scale mode with an unquantized a, and only then"):
        api.grouped_gemm_mx(values, w, offs, mode="exact")
    with pytest.raises(ValueError, match="MXValues hold bfloat16 values, got torch.float32"):
        api.grouped_gemm_mx(MXValues(a.float()), w, offs)


def test_a_chosen_forward_kernel_joins_the_devices_gate(monkeypatch: pytest.MonkeyPatch):
    from cutlass_kernels import check as device_check
    from cutlass_kernels import swiglu_forward as dispatch

    t = device_check.target(dry_run=True)
    assert (
        gating.SWIGLU_FWD
        not in next(r for r in device_check.plan_records(t) if r["name"] == "chosen")["variants"]
    )
    monkeypatch.setenv(dispatch.IMPLEMENTATION_ENV, "kernel")
    chosen = next(r for r in device_check.plan_records(t) if r["name"] == "chosen")["variants"]
    assert gating.chosen_keys(chosen) == (gating.SWIGLU_FWD_KEY,)
