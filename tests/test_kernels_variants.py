"""Kernel variants and their dispatch, host-side: the registry's variant table, the per-shape choice
(a missing or unknown entry, or one naming a variant that refuses the shape, falls back to the
default), named variants that run or raise, the refusal of B layouts the kernels were not compiled
for, and the Hopper MX path's BF16 operands (equal bit for bit to dequantizing the quantized ones)."""

from __future__ import annotations

import importlib.util
import re
import shutil
from dataclasses import astuple
from pathlib import Path

import pytest
import torch

from cutlass_kernels import api, quantize_mx
from cutlass_kernels.choices import CHOICES, Choice, Problem, lookup, measured, rows_bucket, source
from cutlass_kernels.mxfp8 import fake_quantize

needs_dsl = pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="the CUTLASS Python DSL cannot be imported"
)
OPS = ("fprop", "dgrad", "wgrad", "mx")
# a projection of the report's per-rank shapes: 48 experts, 12288 routed rows, N = 2F = 6144, K = D
UP = Problem("fprop", 48, 12288, 6144, 7168)


def _choice(variant: str, arch: str = "sm_90a", problem: Problem = UP) -> Choice:
    bucket = rows_bucket(problem.rows)
    return Choice(
        arch, problem.op, problem.groups, problem.n, problem.k, bucket, variant, "2026-12-01", "H200"
    )


def test_rows_bucket_is_the_next_power_of_two():
    rows = (0, 1, 2, 3, 4, 5, 12288, 16384, 16385)
    assert [rows_bucket(r) for r in rows] == [0, 1, 2, 4, 4, 8, 16384, 16384, 32768]


def _timed(variant: str, lo: float, median: float, hi: float, op: str = "fprop") -> dict:
    """A timing record of the device run, for UP's shape."""
    shape = {"groups": UP.groups, "rows": UP.rows, "n": UP.n, "k": UP.k}
    ms = {"min": lo, "median": median, "max": hi}
    k = f"{op}/bfloat16/{variant}"
    return {
        "stage": "timing",
        "status": "pass",
        "op": op,
        "variant": variant,
        "key": k,
        **shape,
        "graph_ms": ms,
    }


def _verdicts(variant: str, correct: str = "pass", op: str = "fprop") -> list[dict]:
    """The smoke and correctness verdicts of a variant's kernel, as the device run records them."""
    k = f"{op}/bfloat16/{variant}"
    return [
        {"stage": stage, "key": k, "verdict": True, "status": status}
        for stage, status in (("smoke", "pass"), ("correctness", correct))
    ]


PASSED = [*_verdicts("default"), *_verdicts("wide"), *_verdicts("tall")]


def test_the_table_names_a_variant_only_where_all_its_replays_beat_the_defaults():
    def table(*records: dict) -> list[str]:
        return [c.variant for c in measured([*PASSED, *records], "sm_90a", "2026-12-04", "H200")]

    default = _timed("default", 2.0, 2.1, 2.2)
    assert table(default, _timed("wide", 1.5, 1.6, 1.9)) == ["wide"]
    assert table(default, _timed("wide", 1.5, 1.6, 2.05)) == []  # its slowest reaches the default's fastest
    assert table(default, _timed("wide", 2.3, 2.4, 2.5)) == []  # slower
    assert table(_timed("wide", 1.0, 1.1, 1.2)) == []  # nothing to beat: no default timed
    two = [default, _timed("wide", 1.5, 1.6, 1.9), _timed("tall", 1.4, 1.5, 1.7)]
    assert table(*two) == ["tall"]  # the lowest median
    (entry,) = measured([*PASSED, *two], "sm_90a", "2026-12-04", "H200")
    assert (entry.op, entry.groups, entry.n, entry.k, entry.rows_bucket) == ("fprop", 48, 6144, 7168, 16384)
    assert eval(source([entry]).split("=", 1)[1]) == (entry,)  # the table's Python reads back


def test_a_variant_that_failed_a_check_is_never_chosen_however_fast():
    fast = [_timed("default", 2.0, 2.1, 2.2), _timed("wide", 1.0, 1.1, 1.2)]
    failed = [*_verdicts("default"), *_verdicts("wide", correct="fail")]
    unchecked = [*_verdicts("default")]  # a timing record with no verdicts before it (a rerun's remnant)
    for verdicts in (failed, unchecked):
        assert measured([*verdicts, *fast], "sm_90a", "2026-12-04", "H200") == []
    # and the default keeps its shapes when its own checks are missing: nothing is chosen at all
    assert measured([*_verdicts("wide"), *fast], "sm_90a", "2026-12-04", "H200") == []


def test_the_committed_table_names_registered_variants_of_each_op():
    """Every entry (from the H200 run of 2026-12-04) names a variant the registry has for its arch
    and op, and no shape class twice."""
    pytest.importorskip("cutlass")
    from cutlass_kernels import registry

    assert CHOICES and len({astuple(c)[:6] for c in CHOICES}) == len(CHOICES)
    for c in CHOICES:
        assert c.variant in registry.variants(c.arch, c.op) and c.variant != "default", c


def test_lookup_matches_arch_op_groups_extents_and_rows_bucket():
    table = (_choice("wide"),)
    assert lookup(table, "sm_90a", UP) == "wide"
    assert lookup(table, "sm_90a", Problem("fprop", 48, 9000, 6144, 7168)) == "wide"  # same bucket
    for other in (
        Problem("fprop", 48, 20000, 6144, 7168),  # rows bucket
        Problem("dgrad", 48, 12288, 6144, 7168),  # op
        Problem("fprop", 24, 12288, 6144, 7168),  # groups
        Problem("fprop", 48, 12288, 7168, 6144),  # extents
    ):
        assert lookup(table, "sm_90a", other) is None
    assert lookup(table, "sm_100a", UP) is None


@pytest.fixture
def registry():
    pytest.importorskip("cutlass")
    from cutlass_kernels import registry

    return registry


@pytest.fixture
def extra_variants(registry, monkeypatch: pytest.MonkeyPatch):
    """Two real variants beside the sm90 default: the same kernel with a 128x128 tile (any shape), and
    one that refuses N not a multiple of 512."""

    def narrow(spec):
        return registry.Sm90GroupedGemm(spec.tile_m, spec.tile_n, k_grouped=spec.op == "wgrad")

    def n512(problem: Problem) -> str:
        return f"N={problem.n} is not a multiple of 512" if problem.n % 512 else ""

    added = (
        registry.KernelVariant("narrow", ("fprop", "dgrad"), narrow, tile_mn=(128, 128)),
        registry.KernelVariant("picky", ("fprop", "wgrad"), narrow, refuses=n512),
    )
    inplace = registry.variant("sm_90a", "inplace")
    monkeypatch.setitem(registry._VARIANTS, "sm_90a", (registry._VARIANTS["sm_90a"][0], inplace, *added))
    return added


@needs_dsl
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
@pytest.mark.parametrize("op", OPS)
def test_every_op_of_every_arch_starts_with_the_default(registry, arch: str, op: str):
    assert registry.variants(arch, op)[0] == "default"


@needs_dsl
@pytest.mark.parametrize("arch", ["sm_90a", "sm_100a"])
def test_variant_names_are_unique_per_arch(registry, arch: str):
    names = [v.name for v in registry._VARIANTS[arch]]
    assert names[0] == "default" and len(set(names)) == len(names)


@needs_dsl
def test_variants_reject_unknown_arch_and_op(registry):
    with pytest.raises(ValueError, match="sm_89"):
        registry.variants("sm_89", "fprop")
    with pytest.raises(ValueError, match="bprop.*allowed: fprop, dgrad, wgrad, mx"):
        registry.variants("sm_90a", "bprop")


@needs_dsl
def test_variants_list_what_serves_each_op_and_hopper_mx_runs_the_fprop_ones(registry, extra_variants):
    assert registry.variants("sm_90a", "fprop") == ("default", "narrow", "picky")
    assert registry.variants("sm_90a", "dgrad") == ("default", "narrow")
    assert registry.variants("sm_90a", "wgrad") == ("default", "inplace", "picky")
    assert registry.variants("sm_90a", "mx") == registry.variants("sm_90a", "fprop")
    assert registry.variants("sm_100a", "mx") == ("default", "cta2", "wide")
    assert registry.variants("sm_100a", "fprop") == ("default", "cta2", "cta2_mcast")


@needs_dsl
def test_spec_names_carry_the_variant_unless_default(registry, extra_variants):
    default = registry.spec_for("sm_90a", "fprop", torch.bfloat16, torch.bfloat16)
    narrow = registry.spec_for("sm_90a", "dgrad", torch.bfloat16, torch.float32, "narrow")
    assert default.name == "grouped_fprop_bfloat16-bfloat16_128x256_sm_90a"
    assert narrow.name == "grouped_dgrad_bfloat16-float32_128x128_narrow_sm_90a"
    with pytest.raises(ValueError, match="'Bad-Name'"):
        type(default)("sm_90a", "fprop", torch.bfloat16, torch.bfloat16, 128, 256, variant="Bad-Name")


@needs_dsl
def test_all_specs_hold_every_variant_for_the_ops_it_serves(registry, extra_variants):
    specs = registry.all_specs("sm_90a")
    names = {spec.name for spec in specs}
    assert len(names) == len(specs)
    assert {spec.variant for spec in specs} == {v.name for v in registry._VARIANTS["sm_90a"]}
    outs = ("bfloat16", "float32")
    expected = {
        f"grouped_{op}_bfloat16-{o}_128x256_sm_90a" for op in ("fprop", "dgrad", "wgrad") for o in outs
    }
    expected |= {
        f"grouped_{op}_bfloat16-{o}_128x128_narrow_sm_90a" for op in ("fprop", "dgrad") for o in outs
    }
    expected |= {f"grouped_{op}_bfloat16-{o}_128x256_picky_sm_90a" for op in ("fprop", "wgrad") for o in outs}
    assert expected <= names
    served = {(spec.variant, spec.op) for spec in specs}
    assert ("narrow", "wgrad") not in served and ("picky", "dgrad") not in served
    sm100 = registry.all_specs("sm_100a")
    assert len({spec.name for spec in sm100}) == len(sm100)
    assert {(spec.variant, spec.op, spec.mx) for spec in sm100} == {
        *{("default", op, False) for op in ("fprop", "dgrad", "wgrad")},
        ("default", "fprop", True),
        *{(v, op, False) for v in ("cta2", "cta2_mcast") for op in ("fprop", "dgrad")},
        ("wide", "fprop", True),
        ("cta2", "fprop", True),
    }


@needs_dsl
def test_auto_takes_the_tables_choice_and_falls_back_to_the_default(registry, extra_variants):
    assert registry.choose("sm_90a", UP, "auto", ()) == "default"  # missing entry
    assert registry.choose("sm_90a", UP, "auto", (_choice("narrow"),)) == "narrow"
    assert registry.choose("sm_90a", UP, "auto", (_choice("gone"),)) == "default"  # unknown variant
    wgrad = Problem("wgrad", 48, 12288, 6144, 7168)
    assert (
        registry.choose("sm_90a", wgrad, "auto", (_choice("narrow", problem=wgrad),)) == "default"
    )  # not served
    assert registry.choose("sm_100a", UP, "auto", (_choice("narrow"),)) == "default"  # other arch's entry


@needs_dsl
def test_a_variant_that_cannot_take_a_shape_is_never_picked_for_it(registry, extra_variants):
    fits = Problem("fprop", 48, 12288, 6144, 7168)  # N = 12 x 512
    odd = Problem("fprop", 48, 12288, 7000, 7168)
    table = (_choice("picky", problem=fits), _choice("picky", problem=odd))
    assert registry.choose("sm_90a", fits, "auto", table) == "picky"
    assert registry.choose("sm_90a", odd, "auto", table) == "default"
    mx_odd = Problem("mx", 48, 12288, 7000, 7168)  # the sm90 MX path refuses as its fprop kernel does
    assert registry.choose("sm_90a", mx_odd, "auto", (_choice("picky", problem=mx_odd),)) == "default"


@needs_dsl
def test_a_named_variant_runs_or_says_why_not(registry, extra_variants):
    odd = Problem("fprop", 48, 12288, 7000, 7168)
    assert registry.choose("sm_90a", UP, "picky", ()) == "picky"
    assert registry.choose("sm_90a", UP, "default", (_choice("narrow"),)) == "default"
    with pytest.raises(
        ValueError, match="'picky' cannot take this fprop problem: N=7000 is not a multiple of 512"
    ):
        registry.choose("sm_90a", odd, "picky", ())
    with pytest.raises(
        ValueError, match="'wide' is not allowed for fprop on sm_90a; allowed: auto, default, narrow"
    ):
        registry.choose("sm_90a", UP, "wide", ())
    with pytest.raises(ValueError, match="'narrow' is not allowed for wgrad"):
        registry.choose("sm_90a", Problem("wgrad", 4, 64, 64, 64), "narrow", ())


@needs_dsl
def test_the_backend_consults_its_table_for_auto_only(registry, extra_variants):
    from cutlass_kernels.cute_backend import CuteBackend

    wgrad = Problem("wgrad", 48, 12288, 6144, 7168)
    mx = Problem("mx", 48, 12288, 6144, 7168)
    backend = CuteBackend("sm_90a", (_choice("inplace", problem=wgrad), _choice("narrow", problem=mx)))
    assert backend._variant(wgrad, "auto", "") == "inplace"
    assert backend._variant(mx, "auto", "") == "narrow"  # Hopper's MX path: an fprop variant
    assert backend._variant(wgrad, "default", "") == "default"
    assert backend._variant(wgrad, "auto", "operands are not on a CUDA device") is None  # -> torch
    assert CuteBackend("sm_90a")._variant(wgrad, "auto", "") == "default"  # the committed, empty table


def _bf16(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).bfloat16()


@needs_dsl
def test_b_of_the_other_major_mode_is_refused_for_each_op():
    from cutlass_kernels.cute_backend import unsupported_reason

    offs = torch.tensor([3, 8], dtype=torch.int32)
    a, dy = _bf16(8, 32, seed=1), _bf16(8, 16, seed=2)
    b = _bf16(2, 16, 32, seed=3)  # [G, N, K], K contiguous: what both kernels were compiled for
    b_n_major = b.transpose(1, 2).contiguous().transpose(1, 2)  # same values, N contiguous
    assert "CUDA" in unsupported_reason(a, b.permute(1, 2, 0), offs, torch.bfloat16, op="fprop")
    assert "CUDA" in unsupported_reason(dy, b.permute(2, 1, 0), offs, torch.bfloat16, op="dgrad")
    fprop = unsupported_reason(a, b_n_major.permute(1, 2, 0), offs, torch.bfloat16, op="fprop")
    dgrad = unsupported_reason(dy, b_n_major.permute(2, 1, 0), offs, torch.bfloat16, op="dgrad")
    assert "not the K-major layout" in fprop and "fprop kernel" in fprop
    assert "not the N-major layout" in dgrad and "dgrad kernel" in dgrad


@needs_dsl
@pytest.mark.parametrize("op", ["fprop", "dgrad"])
def test_the_backend_falls_back_on_auto_and_raises_for_a_named_variant(op: str):
    from cutlass_kernels import torch_backend
    from cutlass_kernels.cute_backend import CuteBackend

    offs = torch.tensor([3, 3, 8], dtype=torch.int32)  # an empty group
    a = _bf16(8, 32 if op == "fprop" else 16, seed=4)
    b = _bf16(3, 16, 32, seed=5).transpose(1, 2).contiguous().transpose(1, 2)  # N-major: refused
    backend = CuteBackend("sm_90a")
    run = backend.grouped_gemm if op == "fprop" else backend.grouped_gemm_dgrad
    reference = getattr(torch_backend, "grouped_gemm" if op == "fprop" else "grouped_gemm_dgrad")
    assert torch.equal(run(a, b, offs, torch.float32, "auto"), reference(a, b, offs, torch.float32))
    with pytest.raises(ValueError, match=f"'default' cannot take these {op} operands: B strides"):
        run(a, b, offs, torch.float32, "default")
    with pytest.raises(ValueError, match="'default' cannot take these .* not on a CUDA device"):
        run(a, b.contiguous(), offs, torch.float32, "default")
    with pytest.raises(ValueError, match="'wide' is not allowed"):
        run(a, b, offs, torch.float32, "wide")


def test_the_torch_backend_takes_only_auto(torch_rng: torch.Generator):
    a, b = torch.randn(8, 32, generator=torch_rng), torch.randn(2, 16, 32, generator=torch_rng)
    offs = torch.tensor([3, 8], dtype=torch.int32)
    with pytest.raises(ValueError, match="variant 'default' names a CuTe kernel.*allowed: auto"):
        api.grouped_gemm(a, b, offs, backend="torch", variant="default")
    with pytest.raises(ValueError, match="variant 'x' names a CuTe kernel"):
        api.grouped_gemm_wgrad(torch.randn(8, 16, generator=torch_rng), a, offs, variant="x")


def test_an_unknown_keyword_is_refused_not_ignored(torch_rng: torch.Generator):
    b = torch.randn(2, 16, 32, generator=torch_rng)
    offs = torch.tensor([3, 8], dtype=torch.int32)
    with pytest.raises(
        TypeError, match=r"grouped_gemm_dgrad\(\) got unexpected .* outdtype; allowed: backend, "
    ):
        api.grouped_gemm_dgrad(torch.randn(8, 16, generator=torch_rng), b, offs, outdtype=torch.bfloat16)  # type: ignore[call-arg]


@pytest.mark.parametrize("mode", ["exact", "fast"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_unquantized_mx_activations_give_the_quantized_product_bit_for_bit(mode: str, dtype: torch.dtype):
    gen = torch.Generator().manual_seed(11)
    sizes = [5, 0, 17, 10]
    offs = torch.tensor(sizes).cumsum(0).to(torch.int32)
    a = (torch.randn(32, 64, generator=gen) * 3).to(dtype)
    b = quantize_mx(torch.randn(4, 48, 64, generator=gen), mode)
    old = api.grouped_gemm_mx(quantize_mx(a, mode), b, offs, out_dtype=dtype)
    new = api.grouped_gemm_mx(a, b, offs, out_dtype=dtype, mode=mode, b_values=b.dequantize(dtype))
    assert torch.equal(new, old)
    # and that product is the per-group float64 one of the quantized values
    ref, start = torch.zeros(32, 48, dtype=torch.float64), 0
    a_q, b_q = quantize_mx(a, mode).dequantize(torch.float64), b.dequantize(torch.float64)
    for g, size in enumerate(sizes):
        ref[start : start + size] = a_q[start : start + size] @ b_q[g].T
        start += size
    torch.testing.assert_close(
        new.double(), ref, **({"rtol": 1e-2, "atol": 1e-2} if dtype == torch.bfloat16 else {})
    )


def test_the_mx_entry_point_names_bad_mode_and_values(torch_rng: torch.Generator):
    a, b = torch.randn(8, 64, generator=torch_rng), quantize_mx(torch.randn(2, 16, 64, generator=torch_rng))
    offs = torch.tensor([3, 8], dtype=torch.int32)
    with pytest.raises(ValueError, match="mode=None: give a scale mode with an unquantized a"):
        api.grouped_gemm_mx(a, b, offs)
    with pytest.raises(ValueError, match="mode='exact'"):
        api.grouped_gemm_mx(quantize_mx(a), b, offs, mode="exact")
    with pytest.raises(
        ValueError, match=r"b_values must be b's .* \(2, 16, 64\), got torch.float32 \(2, 16, 32\)"
    ):
        api.grouped_gemm_mx(a, b, offs, mode="exact", b_values=torch.randn(2, 16, 32, generator=torch_rng))
    with pytest.raises(ValueError, match="scale mode 'slow'"):
        api.grouped_gemm_mx(a, b, offs, mode="slow")


def _wide_range(rows: int, cols: int, seed: int) -> torch.Tensor:
    """Random values with block magnitudes from 2^-140 to 2^100: in and beyond BF16's exact range."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, cols, generator=gen) * torch.logspace(-42, 30, rows).unsqueeze(1)


@pytest.mark.parametrize("mode", ["exact", "fast"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fake_quantize_equals_quantize_then_dequantize_bit_for_bit(mode: str, dtype: torch.dtype):
    x = _wide_range(96, 128, seed=12).to(dtype)
    for out in (None, torch.bfloat16, torch.float32):
        expected = quantize_mx(x, mode).dequantize(out or dtype)
        assert torch.equal(fake_quantize(x, mode, out), expected)


@needs_dsl
@pytest.mark.parametrize("mode", ["exact", "fast"])
def test_hopper_mx_operands_from_cached_values_equal_dequantized_ones_bit_for_bit(mode: str):
    from cutlass_kernels.cute_backend import bf16_operands, dequantize_bf16

    x, w = _wide_range(64, 256, seed=13).bfloat16(), _wide_range(64, 256, seed=14).view(2, 32, 256)
    w_mx = quantize_mx(w, mode)
    cached = w_mx.dequantize(torch.bfloat16)  # what a BF16 layer's prepare() keeps
    old = (dequantize_bf16(quantize_mx(x, mode)), dequantize_bf16(w_mx))  # quantize, then dequantize
    for a in (x, quantize_mx(x, mode)):  # unquantized (fake-quantized in one step) or already quantized
        new = bf16_operands(a, w_mx, mode if isinstance(a, torch.Tensor) else None, cached)
        assert new[1] is cached
        assert all(n.dtype == torch.bfloat16 and torch.equal(n, o) for n, o in zip(new, old, strict=True))
    fp32_cached = bf16_operands(x, w_mx, mode, w_mx.dequantize(torch.float32))[1]  # not BF16: dequantized
    assert torch.equal(fp32_cached, old[1])


@needs_dsl
def test_in_place_wgrad_needs_row_major_operands_and_says_so():
    from cutlass_kernels.cute_backend import CuteBackend, rows_in_place_reason

    dy, x = _bf16(8, 16, seed=6), _bf16(8, 32, seed=7)
    offs = torch.tensor([3, 8], dtype=torch.int32)
    assert rows_in_place_reason(dy, x) == ""
    assert "dY (8, 16) strides (1, 8)" in rows_in_place_reason(dy.T.contiguous().T, x)
    assert rows_in_place_reason(dy, x[:, :24]) == ""  # a 48-byte row of a 64-byte pitch: aligned
    assert "X (8, 28) strides (32, 1)" in rows_in_place_reason(dy, x[:, 4:])  # base 8 bytes off
    with pytest.raises(ValueError, match="'inplace' cannot take these wgrad operands: .*CUDA"):
        CuteBackend("sm_90a").grouped_gemm_wgrad(dy, x, offs, torch.float32, "inplace")


# the sm90 TMA-store epilogue: TMA stores with their bulk groups, 16-byte stores of cut tiles; 2x1
# clusters: B multicast, stages released to both CTAs (tests/test_kernels_variants_sm90.py has more)
_TMA_STORE = ("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group", "cp.async.bulk.wait_group.read")
_TMA_STORE += ("st.global.v4.b32",)
_CLUSTER = ("multicast::cluster", "mbarrier.arrive.shared::cluster.b64", "barrier.cluster.wait")
# the whole-tile epilogue of wgrad: 3-D TMA stores of dW (N, K, G) from each warpgroup, named
# barriers of their own
_TILE_STORE = ("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group", "cp.async.bulk.wait_group.read")
_SM90_EPILOGUE_CLUSTER_CLAIMS = {
    "tma_epilogue": ("wgmma.mma_async", *_TMA_STORE),
    "tma_tail64": ("wgmma.mma_async", *_TMA_STORE),
    # ragged 4-D TMA loads bounded at each group's end
    "ragged_tile": ("wgmma.mma_async", "cp.async.bulk.tensor.4d.shared::cta.global", *_TILE_STORE),
    "inplace_tile": ("wgmma.mma_async", "st.shared.b16", "fence.proxy.async.shared::cta", *_TILE_STORE),
    "tail64": ("wgmma.mma_async",),
    "cluster2x1": ("wgmma.mma_async", *_CLUSTER),
    "tma_cluster2x1": ("wgmma.mma_async", *_TMA_STORE, *_CLUSTER),
}
# what each non-default variant's PTX must hold (every registered one needs an entry here)
VARIANT_PTX = {
    "sm_90a": {
        "inplace": (
            "cp.async.bulk.tensor.2d.shared::cta.global",  # TMA loads at the group's first row
            "st.shared.b16",  # zeroing rows past the group's end
            "fence.proxy.async.shared::cta",  # ... made visible to wgmma
            "wgmma.mma_async",
        ),
        **_SM90_EPILOGUE_CLUSTER_CLAIMS,
    },
    "sm_100a": {
        # BF16 and MX: the pair's MMA, 2-CTA TMA loads and tensor memory
        "cta2": ("tcgen05.mma.cta_group::2.kind::", "cta_group::2 [", "tcgen05.alloc.cta_group::2"),
        "cta2_mcast": (
            "tcgen05.mma.cta_group::2.kind::f16",
            "complete_tx::bytes.multicast::cluster.L2::cache_hint.cta_group::2",  # A to both pairs
        ),
        "wide": ("tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.block32",),
    },
}
# spill bytes ptxas reports at most, per arch and output dtype (FP32 epilogues hold twice the values)
SPILL_BYTES = {("sm_100a", "float32"): 32}
# <op>_<dtypes>_<tile>[_<variant>]_<arch>.ptx, as KernelSpec.name spells it
_VARIANT_OF = re.compile(r"_\d+x\d+_(?:([a-z0-9_]+)_)?sm_\d+a\.ptx$")
PTXAS = shutil.which("ptxas") or "/usr/local/bin/ptxas"


@needs_dsl
@pytest.mark.slow
@pytest.mark.parametrize("arch", sorted(VARIANT_PTX))
def test_every_variant_compiles_holds_what_it_claims_and_does_not_spill(
    arch: str, compiled_kernels, ptxas_report
):
    if not Path(PTXAS).exists():
        pytest.skip("ptxas is not installed")
    out = compiled_kernels(arch)
    compiled = [
        (variant, ptx.name.removesuffix(".ptx"))
        for ptx in sorted(out.glob("grouped_*.ptx"))  # the GEMMs (the SwiGLU kernel has no variants)
        if (variant := _VARIANT_OF.search(ptx.name).group(1))
    ]
    claims = VARIANT_PTX[arch]
    assert {variant for variant, _ in compiled} == set(claims)
    for variant, name in compiled:
        ptx = out / f"{name}.ptx"
        text = ptx.read_text()
        missing = [claim for claim in claims[variant] if claim not in text]
        assert not missing, f"{ptx.name} lacks {missing}"
        info = ptxas_report(arch, ptx)
        assert info.returncode == 0, info.stderr[-2000:]
        stores = int(re.search(r"(\d+) bytes spill stores", info.stderr).group(1))
        out_dtype = "float32" if "-float32_" in name else "bfloat16"
        assert stores <= SPILL_BYTES.get((arch, out_dtype), 0), f"{ptx.name}: {info.stderr[-600:]}"


@needs_dsl
def test_every_sm90_variant_gives_each_named_barrier_one_user(registry, monkeypatch: pytest.MonkeyPatch):
    for v in registry._VARIANTS["sm_90a"]:
        for op in v.ops:
            kernel = v.kernel(registry.spec_for("sm_90a", op, torch.bfloat16, torch.bfloat16, v.name))
            ids = list(kernel.named_barriers().values())
            assert len(set(ids)) == len(ids) and 0 not in ids  # 0 is sync_threads'
    zeroing_and_tile = registry.Sm90GroupedGemm(k_grouped=True, in_place=True, tile_store=True)
    assert zeroing_and_tile.named_barriers() == {
        "zeroing": 2,
        "tile store of warpgroup 0": 3,
        "tile store of warpgroup 1": 4,
    }
    zeroing_and_slices = registry.Sm90GroupedGemm(k_grouped=True, in_place=True, tma_store=True)
    assert zeroing_and_slices.named_barriers() == {"staged epilogue": 1, "zeroing": 2}
    # two users of one id would wait for each other's arrivals: refused
    from cutlass_kernels import sm90_gemm

    monkeypatch.setattr(sm90_gemm.Barrier, "ZEROING", 1)
    with pytest.raises(ValueError, match="share an id"):
        zeroing_and_slices.named_barriers()
