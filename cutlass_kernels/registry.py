"""Which CuTe kernels exist per arch, and compiling all of them (with PTX and cubin) for the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from cutlass_kernels.cute_base import ARCHES, KernelSpec, compile_spec
from cutlass_kernels.sm90_gemm import Sm90GroupedGemm
from cutlass_kernels.sm100_gemm import Sm100GroupedGemm, Sm100MxGroupedGemm

_KERNELS: dict[tuple[str, bool], type] = {
    ("sm_90a", False): Sm90GroupedGemm,
    ("sm_100a", False): Sm100GroupedGemm,
    ("sm_100a", True): Sm100MxGroupedGemm,
}
TILE_MN = (128, 256)
MX_TILE_MN = (128, 128)  # two 128-column accumulators + scales fit the 512 tensor-memory columns
OUT_DTYPES = (torch.bfloat16, torch.float32)


def spec_for(arch: str, op: str, in_dtype: torch.dtype, out_dtype: torch.dtype) -> KernelSpec:
    return KernelSpec(arch, op, in_dtype, out_dtype, *TILE_MN)


def mx_spec_for(arch: str, out_dtype: torch.dtype) -> KernelSpec:
    return KernelSpec(arch, "fprop", torch.float8_e4m3fn, out_dtype, *MX_TILE_MN, mx=True)


def has_mx_kernel(arch: str) -> bool:
    return (arch, True) in _KERNELS


def all_specs(arch: str) -> list[KernelSpec]:
    """Every kernel the ``arch`` backend launches: BF16 fprop, dgrad and wgrad, BF16 or FP32 out, and
    the MXFP8 fprop where the arch has block-scaled MMA."""
    if arch not in ARCHES:
        raise ValueError(f"arch {arch!r} is not allowed; allowed: {', '.join(ARCHES)}")
    specs = [
        spec_for(arch, op, torch.bfloat16, out) for op in ("fprop", "dgrad", "wgrad") for out in OUT_DTYPES
    ]
    if has_mx_kernel(arch):
        specs += [mx_spec_for(arch, out) for out in OUT_DTYPES]
    return specs


def variants(arch: str, op: str) -> tuple[str, ...]:
    """Kernel variants of ``op`` (fprop, dgrad, wgrad, mx) on ``arch``, timed side by side by the check."""
    return ("default",)


def kernel_for(spec: KernelSpec) -> Any:
    if spec.mx:
        return _KERNELS[spec.arch, True](spec.tile_m, spec.tile_n)
    return _KERNELS[spec.arch, False](spec.tile_m, spec.tile_n, k_grouped=spec.op == "wgrad")


def compiled(spec: KernelSpec) -> Any:
    """The compiled kernel of ``spec`` (compiled on first use, then cached in-process)."""
    return compile_spec(spec, kernel_for(spec))


def compile_all(arch: str, out_dir: Path) -> list[Path]:
    """Compile every kernel of ``arch`` and write ``<name>.ptx`` / ``<name>.cubin`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for spec in all_specs(arch):
        compile_spec(spec, kernel_for(spec), out_dir)
        written += [out_dir / f"{spec.name}.ptx", out_dir / f"{spec.name}.cubin"]
    return written
