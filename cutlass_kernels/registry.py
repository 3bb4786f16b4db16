"""Which CuTe kernels exist per arch: named variants per op, the choice among them for a call, and
compiling all of them (with PTX and cubin) for the CLI.

A variant is one kernel design (tile shape, epilogue, cluster, ...) registered under a name for the
ops it serves, with a function saying why it cannot take a given problem (``""`` when it can). Every
arch has a ``default`` variant serving every op; it is what runs unless a caller names another or the
per-shape choice table (:mod:`cutlass_kernels.choices`) holds a measured-better one. Ops are
``fprop``, ``dgrad``, ``wgrad`` and ``mx``; on an arch without block-scaled MMA the MX path runs the
BF16 ``fprop`` kernel on the operands' BF16 values, so there its variants are the ``fprop`` ones. A new
variant is one more :class:`KernelVariant` in its arch's entry of ``_VARIANTS``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from cutlass_kernels import choices, vocabulary
from cutlass_kernels.choices import Choice, Problem
from cutlass_kernels.cute_base import KernelSpec, compile_spec
from cutlass_kernels.sm90_gemm import Sm90GroupedGemm
from cutlass_kernels.sm100_gemm import Sm100GroupedGemm, Sm100MxGroupedGemm
from cutlass_kernels.vocabulary import BF16_OPS, OPS, check_arch, check_op, has_mx_kernel, kernel_op

TILE_MN = (128, 256)
# M tiles per band of the banded wgrad order: the 132 CTAs of an H100 / H200 then read about 16 dY^T
# and 9 X^T slabs at once (128 x 16 + 256 x 9 rows, near the fewest for 132 tiles), not every dY^T slab
WGRAD_BAND = 16
MX_TILE_MN = (128, 128)  # two 128-column accumulators + scales fit the 512 tensor-memory columns
OUT_DTYPES = tuple(getattr(torch, name) for name in vocabulary.OUT_DTYPES)
FACTS = "kernels.json"  # what compile_all writes beside the PTX and cubins


def takes_any(problem: Problem) -> str:
    """The refusal function of a variant that takes every problem the backend hands it."""
    return ""


@dataclass(frozen=True)
class KernelVariant:
    """One named kernel design of an arch: ``kernel(spec)`` builds its kernel object for a spec,
    ``ops`` are the ops it serves, ``refuses(problem)`` says why it cannot take a problem (``""``: it
    can), and its BF16 and MX tiles name its specs. ``wgrad_in_place``: its wgrad reads dY and X
    where they lie (row-major), not from per-group padded copies."""

    name: str
    ops: tuple[str, ...]
    kernel: Callable[[KernelSpec], Any]
    refuses: Callable[[Problem], str] = takes_any
    tile_mn: tuple[int, int] = TILE_MN
    mx_tile_mn: tuple[int, int] = MX_TILE_MN
    wgrad_in_place: bool = False

    def __post_init__(self) -> None:
        bad = [op for op in self.ops if op not in OPS]
        if bad or not self.ops:
            raise ValueError(f"variant {self.name!r} ops {self.ops} are not allowed; allowed: {OPS}")


def _sm90(**switches: Any) -> Callable[[KernelSpec], Any]:
    """The factory of the Hopper kernel with ``switches`` on (:mod:`cutlass_kernels.sm90_gemm`)."""
    return lambda spec: Sm90GroupedGemm(spec.tile_m, spec.tile_n, k_grouped=spec.op == "wgrad", **switches)


def _sm100_default(spec: KernelSpec) -> Any:
    if spec.mx:
        return Sm100MxGroupedGemm(spec.tile_m, spec.tile_n)
    return Sm100GroupedGemm(spec.tile_m, spec.tile_n, k_grouped=spec.op == "wgrad")


def _sm100_pair(spec: KernelSpec) -> Any:
    if spec.mx:  # one accumulator stage: 256 of a CTA's 512 tensor-memory columns, its scales 48 more
        return Sm100MxGroupedGemm(spec.tile_m, spec.tile_n, cta_pair=True, acc_stages=1)
    return Sm100GroupedGemm(spec.tile_m, spec.tile_n, cta_pair=True)


# arch -> its variants, "default" first
_VARIANTS: dict[str, tuple[KernelVariant, ...]] = {
    "sm_90a": (
        KernelVariant("default", BF16_OPS, _sm90()),
        KernelVariant("inplace", ("wgrad",), _sm90(in_place=True), wgrad_in_place=True),
        KernelVariant("tma_epilogue", BF16_OPS, _sm90(tma_store=True)),
        KernelVariant("tail64", BF16_OPS, _sm90(skip_empty_halves=True)),
        KernelVariant("cluster2x1", BF16_OPS, _sm90(cluster_m=2)),
        KernelVariant("tma_cluster2x1", BF16_OPS, _sm90(tma_store=True, cluster_m=2)),
        # many small groups: TMA-stored slices and 64-row halves that skip their wgmma
        KernelVariant("tma_tail64", ("fprop", "dgrad"), _sm90(tma_store=True, skip_empty_halves=True)),
        # wgrad: rows bounded in the loads (no padding, no zeroing), whole tiles stored by TMA behind
        # the next tile's main loop, banded tile order; and the same with in-place zeroing, whose
        # loads need no ragged TMA view
        KernelVariant(
            "ragged_tile",
            ("wgrad",),
            _sm90(ragged=True, tile_store=True, band=WGRAD_BAND),
            wgrad_in_place=True,
        ),
        KernelVariant(
            "inplace_tile",
            ("wgrad",),
            _sm90(in_place=True, tile_store=True, band=WGRAD_BAND),
            wgrad_in_place=True,
        ),
    ),
    "sm_100a": (
        KernelVariant("default", OPS, _sm100_default),
        KernelVariant(
            "cta2", ("fprop", "dgrad", "mx"), _sm100_pair, tile_mn=(256, 256), mx_tile_mn=(256, 256)
        ),
        KernelVariant(
            "cta2_mcast",
            ("fprop", "dgrad"),
            lambda s: Sm100GroupedGemm(s.tile_m, s.tile_n, cta_pair=True, cluster_n=2),
            tile_mn=(256, 256),
        ),
        KernelVariant(
            "wide",
            ("mx",),
            lambda s: Sm100MxGroupedGemm(s.tile_m, s.tile_n, acc_stages=1),
            mx_tile_mn=(128, 256),
        ),
    ),
}


def variants(arch: str, op: str) -> tuple[str, ...]:
    """The names of the variants serving ``op`` on ``arch``, ``default`` first."""
    served = kernel_op(check_arch(arch), check_op(op))
    return tuple(v.name for v in _VARIANTS[arch] if served in v.ops)


def variant(arch: str, name: str) -> KernelVariant:
    check_arch(arch)
    found = [v for v in _VARIANTS[arch] if v.name == name]
    if not found:
        allowed = ", ".join(v.name for v in _VARIANTS[arch])
        raise ValueError(f"variant {name!r} is not allowed on {arch}; allowed: {allowed}")
    return found[0]


def choose(
    arch: str, problem: Problem, requested: str = "auto", table: Iterable[Choice] = choices.CHOICES
) -> str:
    """The variant to run for ``problem``: ``requested`` itself when named (a ValueError says why it
    cannot be), else the choice ``table`` holds for the problem's class where that variant serves the
    op and takes the problem, else ``default``. Refusal functions see the op of the kernel that runs
    (``fprop`` for ``mx`` without block-scaled MMA)."""
    names = variants(arch, problem.op)
    kernel_problem = replace(problem, op=kernel_op(arch, problem.op))
    if requested != "auto":
        if requested not in names:
            allowed = ", ".join(("auto", *names))
            raise ValueError(
                f"variant {requested!r} is not allowed for {problem.op} on {arch}; allowed: {allowed}"
            )
        reason = variant(arch, requested).refuses(kernel_problem)
        if reason:
            raise ValueError(f"variant {requested!r} cannot take this {problem.op} problem: {reason}")
        return requested
    picked = choices.lookup(table, arch, problem)
    if picked in names and not variant(arch, picked).refuses(kernel_problem):
        return picked
    return "default"


def spec_for(
    arch: str, op: str, in_dtype: torch.dtype, out_dtype: torch.dtype, name: str = "default"
) -> KernelSpec:
    """The BF16 kernel spec of variant ``name`` for ``op`` (``fprop``, ``dgrad`` or ``wgrad``)."""
    return KernelSpec(arch, op, in_dtype, out_dtype, *variant(arch, name).tile_mn, variant=name)


def mx_spec_for(arch: str, out_dtype: torch.dtype, name: str = "default") -> KernelSpec:
    """The block-scaled kernel spec of variant ``name`` (arches with block-scaled MMA only)."""
    tile = variant(arch, name).mx_tile_mn
    return KernelSpec(arch, "fprop", torch.float8_e4m3fn, out_dtype, *tile, mx=True, variant=name)


def all_specs(arch: str) -> list[KernelSpec]:
    """Every kernel the ``arch`` backend launches: each variant's BF16 fprop, dgrad and wgrad (those it
    serves), BF16 or FP32 out, and its MXFP8 fprop where the arch has block-scaled MMA."""
    check_arch(arch)
    specs = []
    for v in _VARIANTS[arch]:
        specs += [
            spec_for(arch, op, torch.bfloat16, out, v.name)
            for op in BF16_OPS
            if op in v.ops
            for out in OUT_DTYPES
        ]
        if has_mx_kernel(arch) and "mx" in v.ops:
            specs += [mx_spec_for(arch, out, v.name) for out in OUT_DTYPES]
    return specs


def kernel_for(spec: KernelSpec) -> Any:
    return variant(spec.arch, spec.variant).kernel(spec)


def compiled(spec: KernelSpec) -> Any:
    """The compiled kernel of ``spec`` (compiled on first use, then cached in-process)."""
    return compile_spec(spec, kernel_for(spec))


def compile_all(arch: str, out_dir: Path, options: str = "") -> dict[str, Any]:
    """Compile every kernel of ``arch`` and write ``<name>.ptx`` / ``<name>.cubin`` into ``out_dir``,
    and ``kernels.json``: per kernel, the shared-memory stages and bytes its launch takes, where its
    class reports them (the sm90 kernels; ptxas sees no dynamic shared memory). ``options``: the
    DSL's compile options beside those. The compiled kernels by name."""
    out_dir.mkdir(parents=True, exist_ok=True)
    compiled, facts = {}, {}
    for spec in all_specs(arch):
        kernel = kernel_for(spec)
        compiled[spec.name] = compile_spec(spec, kernel, out_dir, options)
        if hasattr(kernel, "shared_bytes"):
            facts[spec.name] = {"stages": kernel.stages, "shared_bytes": kernel.shared_bytes}
    (out_dir / FACTS).write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    return compiled


def compile_arch(arch: str, out_dir: Path, options: str = "") -> dict[str, Any]:
    """Every CuTe kernel of ``arch``: the grouped GEMMs of every variant (:func:`compile_all`), the
    SwiGLU backward, the MX quantization and the fused SwiGLU forward kernels, compiled with
    ``options`` beside the DSL's defaults, their PTX and cubin written into ``out_dir``; the
    compiled kernels by name. The DSL must target ``arch`` (``CUTE_DSL_ARCH``, set before it is
    first imported)."""
    from cutlass_kernels import mx_quant_kernel, swiglu_forward_kernel, swiglu_kernel

    return {
        **compile_all(arch, out_dir, options),
        **swiglu_kernel.compile_all(arch, out_dir, options),
        **mx_quant_kernel.compile_all(arch, out_dir, options),
        **swiglu_forward_kernel.compile_all(arch, out_dir, options),
    }
