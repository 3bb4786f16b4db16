"""The MX quantization kernel's arithmetic (:mod:`cutlass_kernels.mxfp8_bits`, the steps the CUDA
kernel runs, here in torch) against the float reference (:mod:`cutlass_kernels.mxfp8`): the scale
exponent on every possible block maximum, the E4M3 conversion on every BF16 value at every scale,
the BF16 values on every code at every scale, and whole tensors of seeded random data with zeros,
subnormals, Inf, NaN, all-equal and largest-magnitude blocks; the device check's own plumbing on the
CPU; and the wrapper's refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from cutlass_kernels import mxfp8, mxfp8_bits
from cutlass_kernels.formats import E4M3_MAX, E8M0_BIAS

MODES = ("exact", "fast")
# every scale exponent a block of BF16 values can get (E8M0 biased: 0..247)
EXPONENTS = range(-127, 121)


def _bf16(bits: torch.Tensor) -> torch.Tensor:
    return bits.to(torch.int16).view(torch.bfloat16)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16 if t.element_size() == 2 else torch.uint8)


def _same_or_both_nan(
    out: torch.Tensor, ref: torch.Tensor, out_nan: torch.Tensor, ref_nan: torch.Tensor
) -> None:
    assert torch.equal(out_nan, ref_nan)
    assert torch.equal(_bits(out)[~ref_nan], _bits(ref)[~ref_nan])


@pytest.mark.parametrize("mode", MODES)
def test_the_scale_exponent_of_every_block_maximum_is_the_references(mode: str):
    amax = torch.arange(0, 0x8000, dtype=torch.int32)  # every non-negative BF16: zero to NaN
    e = mxfp8_bits.block_exponent(amax, mode == "exact", mxfp8_bits.TORCH)
    reference = mxfp8._block_exponent(_bf16(amax).float(), mode)
    assert torch.equal(e.to(torch.int32), reference.to(torch.int32))
    assert int(e.min()) == -E8M0_BIAS and int(e.max()) == {"exact": 120, "fast": 119}[mode]  # BF16's largest


def test_saturating_conversion_is_a_clamp_then_round_to_nearest_even():
    # every value step 3 can make (a BF16 times a power of two), and the float32 neighbours of 448
    # and of E4M3's halfway points: the model of cvt.rn.satfinite.e4m3x2.f32 against torch's cast
    values = _bf16(torch.arange(0, 0x10000, dtype=torch.int32)).float()
    extra = torch.tensor([448.0, 464.0, 480.0, 1e30, float("inf"), -float("inf"), 2.0**-10, 3 * 2.0**-11])
    v = torch.cat([values, extra, torch.nextafter(extra, extra.new_full((1,), float("inf")))])
    reference = v.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    model = mxfp8_bits.e4m3_satfinite(v)
    nan = torch.isnan(v)
    assert torch.equal(model[~nan], reference[~nan])
    assert bool((model[nan] == mxfp8_bits.E4M3_NAN).all())  # CUDA's canonical NaN, whatever the sign


def test_every_bf16_value_at_every_scale_converts_as_the_reference():
    x = _bf16(torch.arange(0, 0x10000, dtype=torch.int32)).float()
    nan = torch.isnan(x)
    for first in range(EXPONENTS.start, EXPONENTS.stop, 31):
        e = torch.arange(first, min(first + 31, EXPONENTS.stop), dtype=torch.int32).unsqueeze(1)
        scaled = x * mxfp8_bits.scale_down_bits(e).view(torch.float32)  # step 3, the kernel's multiply
        reference = (x * torch.ldexp(torch.ones_like(e, dtype=torch.float32), -e)).clamp(-E4M3_MAX, E4M3_MAX)
        reference = reference.to(torch.float8_e4m3fn).view(torch.uint8)
        codes = mxfp8_bits.e4m3_satfinite(scaled)
        assert torch.equal(codes[:, ~nan], reference[:, ~nan]), first
        assert bool((codes[:, nan] == mxfp8_bits.E4M3_NAN).all())


def test_every_code_at_every_scale_gives_the_references_bf16_value():
    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn)
    e = torch.tensor(list(EXPONENTS), dtype=torch.int32).unsqueeze(1)
    decoded = codes.float()  # exact: every E4M3 value is a float32
    kernel = (decoded * mxfp8_bits.scale_up_bits(e).view(torch.float32)).to(torch.bfloat16)
    reference = (decoded * torch.ldexp(torch.ones_like(e, dtype=torch.float32), e)).to(torch.bfloat16)
    assert bool((mxfp8_bits.scale_up_bits(e).view(torch.float32) == torch.exp2(e.double()).float()).all())
    _same_or_both_nan(kernel, reference, torch.isnan(kernel), torch.isnan(reference))


@pytest.mark.parametrize("mode", MODES)
def test_whole_tensors_quantize_as_the_reference(mode: str, seed: int):
    from cutlass_kernels.mx_quant_check import inputs

    gen = torch.Generator().manual_seed(seed)
    x = inputs(64, 1024, gen, torch.device("cpu"))
    nan = torch.isnan(x.float().unflatten(-1, (-1, 32))).any(-1)
    assert bool(nan.any()) and bool(torch.isinf(x).any())
    codes, e = mxfp8_bits.quantize(x, mode)
    ref = mxfp8.quantize_mx(x, mode)
    assert torch.equal((e + E8M0_BIAS).to(torch.uint8), ref.scale)
    ref_codes = ref.data.view(torch.uint8)
    _same_or_both_nan(codes, ref_codes, (codes & 0x7F) == 0x7F, (ref_codes & 0x7F) == 0x7F)
    values, ref_values = mxfp8_bits.values(x, mode), mxfp8.fake_quantize(x, mode, torch.bfloat16)
    _same_or_both_nan(values, ref_values, torch.isnan(values), torch.isnan(ref_values))
    # NaN keeps its block's other values finite at the largest magnitude: the reference's 2^127 scale
    assert bool((ref.scale[nan] == 0).all())


def test_the_inputs_hold_every_special_case(seed: int):
    from cutlass_kernels.mx_quant_check import inputs

    x = (
        inputs(400, 256, torch.Generator().manual_seed(seed), torch.device("cpu"))
        .float()
        .unflatten(-1, (-1, 32))
    )
    amax = x.abs().amax(-1)
    assert bool(torch.isnan(amax).any()) and bool(torch.isinf(amax).any())
    assert bool((amax == 0).any()) and bool((amax > 3e38).any())
    assert bool(((amax > 0) & (amax < 2.0**-126)).any())  # subnormal-only blocks
    assert bool((x == x[..., :1]).all(-1).any())  # all-equal blocks
    mant = _bits(torch.nan_to_num(amax).bfloat16()).int() & 0x7F
    assert bool((mant == 96).any()) and bool((mant == 97).any())  # either side of the exact rule's 0.875


def test_the_device_check_runs_on_the_cpu_with_the_mirror_and_catches_a_wrong_one(tmp_path: Path):
    from cutlass_kernels import gating, mx_quant_check

    results = tmp_path / "results.jsonl"
    cpu = torch.device("cpu")
    assert mx_quant_check.correctness(results, mx_quant_check.mirror(), cpu, mx_quant_check.DRY_CASES, 5) == 0
    assert (
        mx_quant_check.correctness(
            results, mx_quant_check.doubled(mx_quant_check.mirror()), cpu, ((3, 96),), 5
        )
        == 1
    )
    records = [json.loads(line) for line in results.read_text().splitlines()]
    assert {r["key"] for r in records} == {gating.MX_QUANT_KEY}
    assert [r["status"] for r in records] == ["pass"] * 2 * len(mx_quant_check.DRY_CASES) + ["fail"] * 2
    assert records[-1]["differ"]["scales"] > 0
    assert gating.stages_of(gating.MX_QUANT_KEY) == ("correctness", "timing")


def test_the_wrapper_names_what_the_kernel_cannot_take():
    pytest.importorskip("cutlass")
    from cutlass_kernels import mx_quant_kernel

    x = torch.zeros(4, 64, dtype=torch.bfloat16)
    assert "float32" in mx_quant_kernel.unsupported_reason(x.float())
    assert "divisible by 32" in mx_quant_kernel.unsupported_reason(x[:, :48])
    assert "CUDA" in mx_quant_kernel.unsupported_reason(x)
    with pytest.raises(ValueError, match="cannot take this tensor: x is on cpu"):
        mx_quant_kernel.quantize(x)
    with pytest.raises(ValueError, match="form 'scaled' is not allowed"):
        mx_quant_kernel.launch("scaled", "exact", x)
    with pytest.raises(ValueError, match="scale mode 'slow' is not allowed"):
        mx_quant_kernel.fake_quantize(x, "slow")


def test_the_layers_quantize_by_the_torch_form_until_the_kernel_is_chosen(monkeypatch: pytest.MonkeyPatch):
    import cutlass_kernels
    from cutlass_kernels import choices, quantize

    assert choices.MX_QUANTIZER == "torch" and quantize.quantizer() == "torch"
    assert cutlass_kernels.quantize_mx is quantize.quantize_mx
    assert cutlass_kernels.fake_quantize is quantize.fake_quantize
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(2)).bfloat16()
    monkeypatch.setenv(quantize.QUANTIZER_ENV, "kernel")
    assert quantize.quantizer() == "kernel"
    # a CPU tensor is the torch form's whatever the choice
    assert torch.equal(
        quantize.quantize_mx(x).data.view(torch.uint8), mxfp8.quantize_mx(x).data.view(torch.uint8)
    )
    assert torch.equal(quantize.fake_quantize(x, "fast"), mxfp8.fake_quantize(x, "fast"))
    monkeypatch.setenv(quantize.QUANTIZER_ENV, "triton")
    with pytest.raises(
        ValueError, match="CUTLASS_KERNELS_MX_QUANTIZER='triton' is not allowed; allowed: torch, kernel"
    ):
        quantize.quantizer()


def test_a_chosen_quantization_kernel_joins_the_devices_gate(monkeypatch: pytest.MonkeyPatch):
    from cutlass_kernels import check, gating, quantize

    t = check.target(dry_run=True)
    assert gating.MX_QUANT not in next(r for r in check.plan_records(t) if r["name"] == "chosen")["variants"]
    monkeypatch.setenv(quantize.QUANTIZER_ENV, "kernel")
    chosen = next(r for r in check.plan_records(t) if r["name"] == "chosen")["variants"]
    assert gating.chosen_keys(chosen) == (gating.MX_QUANT_KEY,)
