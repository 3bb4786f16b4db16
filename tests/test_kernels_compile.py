"""Every CuTe kernel compiles without a GPU (fake tensors) and each GEMM's PTX holds the arch's
tensor-core MMA; the CuTe backend refuses, with a reason, what its kernels do not cover. About 20 s in
all."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="the CUTLASS Python DSL cannot be imported"
)

MMA = {"sm_90a": "wgmma.mma_async", "sm_100a": "tcgen05.mma"}
OUTS = ("bfloat16", "float32")
BF16_KERNELS = [f"grouped_{op}_bfloat16-{out}_128x256" for op in ("fprop", "dgrad", "wgrad") for out in OUTS]
MX_KERNELS = [f"grouped_fprop_mx_float8_e4m3fn-{out}_128x128" for out in OUTS]
VARIANT_KERNELS = {
    "sm_90a": [
        f"grouped_wgrad_bfloat16-{out}_128x256_{v}"
        for v in ("inplace", "ragged_tile", "inplace_tile")
        for out in OUTS
    ]
    + [f"grouped_{op}_bfloat16-{out}_128x256_tma_tail64" for op in ("fprop", "dgrad") for out in OUTS]
    + [
        f"grouped_{op}_bfloat16-{out}_128x256_{v}"
        for v in ("tma_epilogue", "tail64", "cluster2x1", "tma_cluster2x1")
        for op in ("fprop", "dgrad", "wgrad")
        for out in OUTS
    ],
    "sm_100a": [
        *(
            f"grouped_{op}_bfloat16-{out}_256x256_{v}"
            for v in ("cta2", "cta2_mcast")
            for op in ("fprop", "dgrad")
            for out in OUTS
        ),
        *(f"grouped_fprop_mx_float8_e4m3fn-{out}_128x256_wide" for out in OUTS),
        *(f"grouped_fprop_mx_float8_e4m3fn-{out}_256x256_cta2" for out in OUTS),
    ],
}
KERNELS = {"sm_90a": BF16_KERNELS, "sm_100a": BF16_KERNELS + MX_KERNELS}
KERNELS = {arch: names + VARIANT_KERNELS[arch] for arch, names in KERNELS.items()}
SWIGLU_KERNEL = "swiglu_backward_bfloat16"
MX_QUANT_KERNELS = [
    f"mx_quantize_{mode}_{form}_bfloat16" for form in ("codes", "values") for mode in ("exact", "fast")
]
SWIGLU_FORWARD_KERNELS = ["swiglu_forward_bfloat16"] + [
    f"swiglu_forward_mx_{mode}_{form}" for form in ("codes", "values") for mode in ("exact", "fast")
]


@pytest.mark.slow
@pytest.mark.parametrize("arch", sorted(MMA))
def test_compile_cli_writes_ptx_with_tensor_core_mma(arch: str, compiled_kernels):
    out = compiled_kernels(arch)
    for name in KERNELS[arch]:
        ptx = (out / f"{name}_{arch}.ptx").read_text()
        assert f".target {arch}" in ptx
        assert MMA[arch] in ptx
        if "_mx_" in name:
            assert "kind::mxf8f6f4.block_scale.block32" in ptx
        assert (out / f"{name}_{arch}.cubin").stat().st_size > 0
    # and the fused SwiGLU backward kernel (its PTX: tests/test_swiglu_kernel.py), the MX
    # quantization kernels and the fused SwiGLU forward kernels (below)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [
            f"{name}_{arch}.{ext}"
            for name in [*KERNELS[arch], SWIGLU_KERNEL, *MX_QUANT_KERNELS, *SWIGLU_FORWARD_KERNELS]
            for ext in ("ptx", "cubin")
        ]
        + ["kernels.json"]
    )


def test_compile_cli_rejects_unknown_arch(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "cutlass_kernels", "compile", "--arch", "sm_80", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "sm_80" in done.stderr


def test_kernel_spec_rejects_unknown_arch_and_op():
    from cutlass_kernels.cute_base import KernelSpec

    with pytest.raises(ValueError, match="sm_89"):
        KernelSpec("sm_89", "fprop", torch.bfloat16, torch.bfloat16, 128, 256)
    with pytest.raises(ValueError, match="bprop"):
        KernelSpec("sm_90a", "bprop", torch.bfloat16, torch.bfloat16, 128, 256)
    with pytest.raises(ValueError, match="MX kernels"):
        KernelSpec("sm_90a", "fprop", torch.float8_e4m3fn, torch.bfloat16, 128, 128, mx=True)


def test_backend_names_what_its_kernels_do_not_cover(torch_rng: torch.Generator):
    from cutlass_kernels.cute_backend import unsupported_reason

    offs = torch.tensor([3, 8], dtype=torch.int32)
    b = torch.randn(2, 16, 32, dtype=torch.bfloat16, generator=torch_rng).permute(1, 2, 0)
    a = torch.randn(8, 32, dtype=torch.bfloat16, generator=torch_rng)
    assert "bfloat16" in unsupported_reason(a.float(), b.float(), offs, torch.float32, op="fprop")
    assert "output dtype" in unsupported_reason(a, b, offs, torch.float16, op="fprop")
    assert "CUDA" in unsupported_reason(a, b, offs, torch.bfloat16, op="fprop")
    assert "groups" in unsupported_reason(a, b, torch.zeros(0, dtype=torch.int32), torch.bfloat16, op="fprop")
    assert "groups" in unsupported_reason(
        a, b, torch.zeros(1025, dtype=torch.int32), torch.bfloat16, op="fprop"
    )
    assert "non-empty" in unsupported_reason(a[:, :0], b[:, :0], offs, torch.bfloat16, op="fprop")
    assert "A (8, 20)" in unsupported_reason(a[:, :20], b[:, :20], offs, torch.bfloat16, op="fprop")
    assert "B strides" in unsupported_reason(
        a, b.transpose(0, 1).contiguous().transpose(0, 1), offs, torch.bfloat16, op="fprop"
    )


def test_backend_names_what_the_block_scaled_kernel_does_not_cover(torch_rng: torch.Generator):
    from cutlass_kernels import quantize_mx
    from cutlass_kernels.cute_backend import mx_unsupported_reason

    offs = torch.tensor([3, 8], dtype=torch.int32)
    a, b = (
        quantize_mx(torch.randn(8, 256, generator=torch_rng)),
        quantize_mx(torch.randn(2, 128, 256, generator=torch_rng)),
    )
    assert "CUDA" in mx_unsupported_reason(a, b, offs, torch.bfloat16)
    a96, b96 = (
        quantize_mx(torch.randn(8, 96, generator=torch_rng)),
        quantize_mx(torch.randn(2, 128, 96, generator=torch_rng)),
    )
    assert "multiples of 128" in mx_unsupported_reason(a96, b96, offs, torch.bfloat16)
    b_n64 = quantize_mx(torch.randn(2, 64, 256, generator=torch_rng))
    assert "N=64" in mx_unsupported_reason(a, b_n64, offs, torch.bfloat16)


def test_backend_names_what_the_wgrad_kernel_does_not_cover(torch_rng: torch.Generator):
    from cutlass_kernels.cute_backend import wgrad_unsupported_reason

    offs = torch.tensor([3, 8], dtype=torch.int32)
    dy, x = (
        torch.randn(8, 16, dtype=torch.bfloat16, generator=torch_rng),
        torch.randn(8, 32, dtype=torch.bfloat16, generator=torch_rng),
    )
    assert "CUDA" in wgrad_unsupported_reason(dy, x, offs, torch.float32)
    assert "bfloat16" in wgrad_unsupported_reason(dy.float(), x.float(), offs, torch.float32)
    assert "multiples of 8" in wgrad_unsupported_reason(dy[:, :12], x, offs, torch.float32)
    assert "non-empty" in wgrad_unsupported_reason(dy[:0], x[:0], offs, torch.float32)


def test_bf16_dequantization_of_the_sm90_mx_path_is_exact():
    from cutlass_kernels import quantize_mx
    from cutlass_kernels.cute_backend import dequantize_bf16

    gen = torch.Generator().manual_seed(8)
    x = torch.randn(64, 256, generator=gen) * torch.logspace(-30, 30, 64).unsqueeze(1)  # scales 2^-108..2^92
    t = quantize_mx(x)
    assert torch.equal(dequantize_bf16(t).double(), t.dequantize(torch.float64))


# the MX quantization kernel's instructions per thread and block of 32: four 128-bit loads, the block
# maximum in integer arithmetic, a float32 multiply per element (no flush to zero: a subnormal input
# times 2^127 is a normal E4M3), the hardware E4M3 conversion, and the stores of its form
_MX_QUANT_PTX = {
    "codes": {"cvt.rn.satfinite.e4m3x2.f32": 16, "st.global.v4.b32": 2, "st.global.b8": 1},
    "values": {
        "cvt.rn.satfinite.e4m3x2.f32": 16,
        "cvt.rn.f16x2.e4m3x2": 16,
        "cvt.rn.bf16x2.f32": 16,
        "st.global.v4.b32": 4,
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("arch", sorted(MMA))
def test_the_mx_quantization_kernels_move_16_bytes_at_a_time_and_convert_in_hardware(
    arch: str, compiled_kernels, tmp_path: Path
):
    if shutil.which("ptxas") is None:
        pytest.skip("ptxas is not installed")
    out = compiled_kernels(arch)
    for name in MX_QUANT_KERNELS:
        ptx = (out / f"{name}_{arch}.ptx").read_text()
        form = "values" if "_values_" in name else "codes"
        assert f".target {arch}" in ptx
        # float32 multiplies, one an element (two: scaled down, then up for values); sm_100a pairs them
        singles, pairs = (len(re.findall(rf"\bmul(?:\.rn)?\.f32{w}\b", ptx)) for w in ("", "x2"))
        assert ptx.count("ld.global.v4.b32") == 4 and singles + 2 * pairs == 32 * (1 + (form == "values"))
        for instruction, count in _MX_QUANT_PTX[form].items():
            assert ptx.count(instruction) == count, (name, instruction)
        assert ".ftz" not in ptx and "ld.local" not in ptx and "st.local" not in ptx, name
        assert "ld.global.f32" not in ptx and "st.global.f32" not in ptx, name  # no float32 in memory
        assert _registers_without_spills(arch, name, ptx, tmp_path) <= 64


def _registers_without_spills(arch: str, name: str, ptx: str, tmp_path: Path) -> int:
    """The registers ``ptxas -v`` reports for a kernel's PTX, after asserting no stack and no spills."""
    ptx_file = tmp_path / f"{name}.ptx"
    ptx_file.write_text(ptx)
    info = subprocess.run(
        ["ptxas", f"-arch={arch}", "-v", str(ptx_file), "-o", str(tmp_path / "x.cubin")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert info.returncode == 0, info.stderr[-2000:]
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in info.stderr, name
    return int(re.search(r"Used (\d+) registers", info.stderr).group(1))


# the fused SwiGLU forward's instructions per thread and unit (a row's 32 columns): four 128-bit loads
# each of gate and up, per element an ex2 (flushing: 1 + a subnormal is 1 anyway) and a reciprocal
# that keeps subnormal results (the sigmoid below g = -87.3, as the torch form's), the rounding to
# BF16, then A's stores or the MX block step's (the quantization kernel's instructions)
_SWIGLU_FORWARD_PTX = {
    "bfloat16": {"st.global.v4.b32": 4, "cvt.rn.satfinite.e4m3x2.f32": 0},
    "codes": {"st.global.v4.b32": 2, "st.global.b8": 1, "cvt.rn.satfinite.e4m3x2.f32": 16},
    "values": {"st.global.v4.b32": 4, "cvt.rn.satfinite.e4m3x2.f32": 16, "cvt.rn.f16x2.e4m3x2": 16},
}


@pytest.mark.slow
@pytest.mark.parametrize("arch", sorted(MMA))
def test_the_swiglu_forward_kernels_move_16_bytes_at_a_time_and_keep_subnormal_sigmoids(
    arch: str, compiled_kernels, tmp_path: Path
):
    from cutlass_kernels import swiglu_forward_kernel as k

    if shutil.which("ptxas") is None:
        pytest.skip("ptxas is not installed")
    out = compiled_kernels(arch)
    for name in SWIGLU_FORWARD_KERNELS:
        ptx = (out / f"{name}_{arch}.ptx").read_text()
        form = next(f for f in ("codes", "values") if f"_{f}" in name) if "_mx_" in name else "bfloat16"
        assert f".target {arch}" in ptx
        accesses = sorted(re.findall(r"\b(?:ld|st)\.global\S*", ptx))
        stores = _SWIGLU_FORWARD_PTX[form]
        assert accesses == sorted(
            ["ld.global.v4.b32"] * 8
            + ["st.global.v4.b32"] * stores["st.global.v4.b32"]
            + ["st.global.b8"] * stores.get("st.global.b8", 0)
        ), (name, accesses)
        for instruction, count in stores.items():
            assert ptx.count(instruction) == count, (name, instruction)
        assert ptx.count("ex2.approx.ftz.f32") == ptx.count("rcp.approx.f32") == k.BLOCK
        assert "rcp.approx.ftz" not in ptx and ptx.count(".ftz") == k.BLOCK, name  # only the ex2s flush
        # A rounded to BF16 once an element: in pairs where it is stored, one at a time where the MX
        # step reads its bits
        rounded = 2 * ptx.count("cvt.rn.bf16x2.f32") + ptx.count("cvt.rn.bf16.f32")
        assert rounded == k.BLOCK * (1 + (form == "values")), (name, rounded)
        assert f".minnctapersm {k.CTAS_PER_SM}" in ptx and f".reqntid {k.THREADS}, 1, 1" in ptx
        assert ".local" not in ptx and ".shared" not in ptx, name
        assert "ld.global.f32" not in ptx and "st.global.f32" not in ptx, name  # no float32 in memory
        registers = _registers_without_spills(arch, name, ptx, tmp_path)
        assert registers <= 65536 // (k.THREADS * k.CTAS_PER_SM), (name, registers)
