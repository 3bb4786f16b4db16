"""What the CuTe DSL grouped-GEMM kernels share: their compile key, fake-tensor signatures, a compile
cache, the group tile walk on the device (:mod:`cutlass_kernels.tile_schedule`'s, traced, and the
prefix it walks, built by one warp), the torch -> CuTe argument conversion, and :class:`GroupedGemm`,
the base of each arch's kernel class.

Every kernel is compiled once per :class:`KernelSpec` with symbolic M, N, K and group count, so a new
routing (new ``offs``) or a new token count reuses the compiled kernel. Compiling needs no GPU: with
``CUTE_DSL_ARCH`` set before ``cutlass`` is imported, :func:`compile_spec` builds from fake tensors.
"""

from __future__ import annotations

import os
import re
import types
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import cutlass
import cutlass.cute as cute
import torch
from cuda.bindings import driver as cuda
from cutlass.cute.runtime import from_dlpack, make_fake_compact_tensor, make_fake_tensor

from cutlass_kernels import compiles, kernel_cache, tile_schedule
from cutlass_kernels.vocabulary import ARCHES, BF16_OPS, check_arch, check_op

MAX_GROUPS = 1024  # capacity of the shared-memory M-tile prefix (4 KiB)
ALIGN_BYTES = 16  # TMA: 16-byte aligned rows and base addresses
OFFS_ALIGN = 4

_CUTE_DTYPES = {
    torch.bfloat16: cutlass.BFloat16,
    torch.float32: cutlass.Float32,
    torch.float8_e4m3fn: cutlass.Float8E4M3FN,
}
MX_ATOM_BYTES = 512  # one 128-row x 4-column scale atom of the block-scaled MMA
_VARIANT_NAME = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class KernelSpec:
    """The compile key: one compiled kernel per arch, operation, dtypes and tile configuration.

    ``op`` is ``fprop`` (B stored [G, N, K], K-major), ``dgrad`` (the same GEMM against B^T: B
    stored [G, K_out, N_red], so the kernel reads it N-major) or ``wgrad`` (K-grouped: per group
    dY^T X over the group's rows, both read N-major from row-padded copies). ``mx``: E4M3 operands with
    E8M0 scales per 32 elements of K (block-scaled MMA; sm100a fprop only). ``variant``: which of the
    arch's registered kernels of this op (:mod:`cutlass_kernels.registry`); part of the name unless
    ``default``.
    """

    arch: str
    op: str
    in_dtype: torch.dtype
    out_dtype: torch.dtype
    tile_m: int
    tile_n: int
    mx: bool = False
    variant: str = "default"

    def __post_init__(self) -> None:
        check_arch(self.arch)
        check_op(self.op, BF16_OPS)
        if self.mx and (self.arch, self.op, self.in_dtype) != ("sm_100a", "fprop", torch.float8_e4m3fn):
            raise ValueError(f"MX kernels are sm_100a fprop with float8_e4m3fn operands, got {self}")
        if not _VARIANT_NAME.fullmatch(self.variant):
            raise ValueError(
                f"variant name {self.variant!r} is not allowed; allowed: lower-case a-z, 0-9, '_'"
            )

    @property
    def name(self) -> str:
        dtypes = f"{str(self.in_dtype).removeprefix('torch.')}-{str(self.out_dtype).removeprefix('torch.')}"
        op = f"{self.op}_mx" if self.mx else self.op
        variant = "" if self.variant == "default" else f"_{self.variant}"
        return f"grouped_{op}_{dtypes}_{self.tile_m}x{self.tile_n}{variant}_{self.arch}"


def cute_dtype(dtype: torch.dtype) -> type[cutlass.Numeric]:
    return _CUTE_DTYPES[dtype]


def fake_operands(spec: KernelSpec) -> dict[str, Any]:
    """Fake tensors with the runtime tensors' layouts and symbolic extents (16-byte aligned rows)."""
    in_t, out_t = cute_dtype(spec.in_dtype), cute_dtype(spec.out_dtype)
    vec_in, vec_out = ALIGN_BYTES * 8 // in_t.width, ALIGN_BYTES * 8 // out_t.width
    m, g = cute.sym_int32(), cute.sym_int32()
    k, n = cute.sym_int32(divisibility=vec_in), cute.sym_int32(divisibility=vec_in)
    ld_a, ld_b, stride_g = (cute.sym_int64(divisibility=vec_in) for _ in range(3))
    ld_c = cute.sym_int64(divisibility=vec_out)
    if spec.op == "wgrad":  # a = dY^T (N, R), b = X^T (K, R) over R padded rows; c = dW as (G * N, K)
        rows, g_n = cute.sym_int32(), cute.sym_int32()
        a = make_fake_tensor(in_t, (n, rows), stride=(1, ld_a), assumed_align=ALIGN_BYTES)
        b = make_fake_tensor(in_t, (k, rows), stride=(1, ld_b), assumed_align=ALIGN_BYTES)
        c = make_fake_tensor(out_t, (g_n, k), stride=(ld_c, 1), assumed_align=ALIGN_BYTES)
    else:
        b_stride = (ld_b, 1, stride_g) if spec.op == "fprop" else (1, ld_b, stride_g)
        a = make_fake_tensor(in_t, (m, k), stride=(ld_a, 1), assumed_align=ALIGN_BYTES)
        b = make_fake_tensor(in_t, (n, k, g), stride=b_stride, assumed_align=ALIGN_BYTES)
        c = make_fake_tensor(out_t, (m, n), stride=(ld_c, 1), assumed_align=ALIGN_BYTES)
    args = {
        "a": a,
        "b": b,
        "c": c,
        "offs": make_fake_compact_tensor(cutlass.Int32, (g,), assumed_align=OFFS_ALIGN),
    }
    if spec.mx:
        for name in ("sfa", "sfb"):
            size = cute.sym_int32(divisibility=MX_ATOM_BYTES)
            args[name] = make_fake_compact_tensor(cutlass.Uint8, (size,), assumed_align=ALIGN_BYTES)
    return args


_CACHE: dict[KernelSpec, Any] = {}


def compile_spec(spec: KernelSpec, kernel: Any, dump_dir: Path | None = None, options: str = "") -> Any:
    """Compile ``kernel`` (a kernel object for ``spec``) once per spec, or load it from the kernel
    cache where that holds it (:mod:`cutlass_kernels.kernel_cache`); with ``dump_dir`` (always
    compiled) also write ``<spec.name>.ptx`` and ``.cubin`` there. ``options``: the DSL's compile
    options beside those (a build for export names its host target; always compiled)."""
    if spec in _CACHE and dump_dir is None and not options:
        return _CACHE[spec]
    if dump_dir is None and not options:
        compiled = kernel_cache.cached_or_compiled(spec.name, spec.arch, lambda: _compile(spec, kernel))
    else:
        compiled = _compile(spec, kernel, dump_dir, options)
    _CACHE[spec] = compiled
    return compiled


def _compile(spec: KernelSpec, kernel: Any, dump_dir: Path | None = None, options: str = "") -> Any:
    from cutlass.runtime import make_fake_stream

    args = fake_operands(spec)
    if dump_dir is not None:
        scratch = dump_dir / f".{spec.name}"
        scratch.mkdir(parents=True, exist_ok=True)
        options += f" --keep-ptx --keep-cubin --dump-dir={scratch}"
    stream = make_fake_stream()
    compiled = compiles.timed(cute.compile, kernel, *args.values(), cutlass.Int32(1), stream, options=options)
    if dump_dir is not None:
        _move_artifacts(compiled, scratch, dump_dir / spec.name)
    return compiled


def running_arch() -> str | None:
    """The arch of ``ARCHES`` whose kernels this process runs: ``CUTE_DSL_ARCH`` where set, else the
    current GPU's (sm_90a on compute capability 9.0, sm_100a on 10.0); None for any other."""
    named = os.environ.get("CUTE_DSL_ARCH")
    if named:
        return named if named in ARCHES else None
    if not torch.cuda.is_available():
        return None
    return {(9, 0): "sm_90a", (10, 0): "sm_100a"}.get(torch.cuda.get_device_capability())


def compile_once(
    memo: dict[Any, Any],
    name: Callable[..., str],
    build: Callable[..., Any],
    kind: tuple[Any, ...],
    arch: str | None,
    dump_dir: Path | None,
    options: str,
) -> Any:
    """An elementwise kernel of ``kind`` (its form, mode, ...) compiled from fake tensors (no GPU
    needed), once per kind and ``arch`` in ``memo``: ``arch`` one of ``ARCHES``, or None for the arch
    this process runs (the DSL's target: ``CUTE_DSL_ARCH``, else the GPU's own), loaded from the
    kernel cache where that holds it under ``name(*kind, arch)``. With ``dump_dir`` (an arch named)
    or ``options`` always built anew by ``build(*kind, arch, dump_dir, options)``, which writes its
    PTX and cubin there."""
    if arch is not None:
        check_arch(arch)
    fresh = dump_dir is not None or bool(options)
    if (*kind, arch) in memo and not fresh:
        return memo[(*kind, arch)]
    if arch is None and not fresh:
        runs_on = running_arch()
        compiled = kernel_cache.cached_or_compiled(
            name(*kind, runs_on or "native"), runs_on, lambda: build(*kind, None, None, "")
        )
    else:
        compiled = build(*kind, arch, dump_dir, options)
    memo[(*kind, arch)] = compiled
    return compiled


def compile_host(
    host: Any,
    args: list[Any],
    name: str,
    arch: str | None,
    dump_dir: Path | None,
    options: str,
    constants: tuple[Any, ...] = (),
) -> Any:
    """``cute.compile(host, *args, stream, *constants)`` of an elementwise kernel's host function
    (timed; ``stream`` a fake one), for ``arch`` (None: the arch the DSL targets in this process),
    with ``options`` beside the DSL's defaults; with ``dump_dir`` (an arch named) also
    ``<name>.ptx`` and ``.cubin`` written there."""
    from cutlass.runtime import make_fake_stream

    if arch is not None:
        options += f" --gpu-arch {arch}"
    if dump_dir is not None:
        if arch is None:
            raise ValueError("name the arch whose PTX and cubin to write")
        scratch = dump_dir / f".{name}"
        scratch.mkdir(parents=True, exist_ok=True)
        options += f" --keep-ptx --keep-cubin --dump-dir={scratch}"
    compiled = compiles.timed(cute.compile, host, *args, make_fake_stream(), *constants, options=options)
    if dump_dir is not None:
        _move_artifacts(compiled, scratch, dump_dir / name)
    return compiled


def _move_artifacts(compiled: Any, scratch: Path, stem: Path) -> None:
    stem.with_suffix(".ptx").write_text(compiled.__ptx__)
    stem.with_suffix(".cubin").write_bytes(compiled.__cubin__)
    for leftover in scratch.iterdir():
        leftover.unlink()
    scratch.rmdir()


def to_cute(t: torch.Tensor, assumed_align: int = ALIGN_BYTES) -> cute.Tensor:
    """A runtime CuTe view of a torch tensor, with dynamic extents and strides like the fake ones."""
    ct = from_dlpack(t.detach(), assumed_align=assumed_align)
    return ct.mark_layout_dynamic(leading_dim=_leading_dim(t))


def _leading_dim(t: torch.Tensor) -> int:
    return min(range(t.dim()), key=lambda d: (t.stride(d), -d)) if t.dim() > 1 else 0


def sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


@cute.jit
def build_tile_prefix(offs: cute.Tensor, prefix: cute.Tensor, tile_m: cutlass.Constexpr[int]) -> None:
    """One warp writes ``prefix[g + 1]`` = M tiles of groups ``0..g`` into shared memory, 32 groups
    per step with a shuffle scan; the caller syncs the CTA afterwards."""
    lane = cute.arch.lane_idx()
    groups = cute.size(offs)
    carry = cutlass.Int32(0)
    if lane == 0:
        prefix[0] = cutlass.Int32(0)
    for base in cutlass.range(0, groups, 32):
        g = base + lane
        count = cutlass.Int32(0)
        if g < groups:
            start = cutlass.Int32(0)
            if g > 0:
                start = offs[g - 1]
            count = tile_schedule.m_tiles(cutlass.max(offs[g] - start, cutlass.Int32(0)), tile_m)
        for step in cutlass.range_constexpr(5):
            lower = cute.arch.shuffle_sync_up(count, 1 << step)
            if lane >= (1 << step):
                count = count + lower
        if g < groups:
            prefix[g + 1] = carry + count
        carry = carry + cute.arch.shuffle_sync(count, 31)


class CtaWalk(NamedTuple):
    """What each role of a persistent CTA loops over: the group tile prefix (shared memory) and
    ``offs``, this walker's index among ``walkers`` (CTAs, or clusters, of the grid), the launch's
    tile count and shape (:func:`cutlass_kernels.tile_schedule.tile_work`)."""

    prefix: Any
    offs: Any
    walker: Any
    walkers: Any
    total: Any
    shape: tile_schedule.WalkShape


# the walk of :mod:`cutlass_kernels.tile_schedule`, traced: its loops and branches on device values
# become device control flow
DEVICE = tile_schedule.Arithmetic(cutlass.Int32, cutlass.min, cutlass.max, cutlass.const_expr)


def _traced(fn: Any) -> Any:
    """``fn`` (marked ``@traced.jit`` in :mod:`~cutlass_kernels.tile_schedule`) for the DSL: a copy,
    because the DSL rewrites the code of the function it is given, and the host runs the original."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__qualname__ = fn.__qualname__
    return cute.jit(copy)


_total_tiles = _traced(tile_schedule.total_tiles)
_tile_work = _traced(tile_schedule.tile_work)


@cute.jit
def total_tiles(problem: cutlass.Constexpr, prefix: cute.Tensor, groups, tiles_m, tiles_n):
    """:func:`tile_schedule.total_tiles` on the device."""
    return _total_tiles(problem, prefix, groups, tiles_m, tiles_n, DEVICE)


@cute.jit
def tile_work(problem: cutlass.Constexpr, prefix: cute.Tensor, offs: cute.Tensor, group, tile, shape):
    """:func:`tile_schedule.tile_work` on the device."""
    return _tile_work(problem, prefix, offs, group, tile, shape, DEVICE)


class GroupedGemm(ABC):
    """What every arch's grouped GEMM shares: the tile, the grouping, the FP32 accumulator, the entry
    :func:`compile_spec` compiles, and the tile walk its CTAs loop over. An arch's class sets up its
    MMA and shared memory (``problem`` among them) and launches its kernel in :meth:`_launch`."""

    problem: tile_schedule.GroupedProblem
    cluster_n = 1  # N tiles one step of the walk covers (clusters whose CTAs sit side by side along N)

    def __init__(self, tile_m: int, tile_n: int, k_grouped: bool) -> None:
        self.tile_m, self.tile_n, self.k_grouped = tile_m, tile_n, k_grouped
        self.acc_dtype = cutlass.Float32

    @cute.jit
    def __call__(
        self,
        a: cute.Tensor,
        b: cute.Tensor,
        c: cute.Tensor,
        offs: cute.Tensor,
        ctas: cutlass.Int32,
        stream: cuda.CUstream,  # annotated: an exported kernel's C signature is built from the annotations
    ) -> None:
        """M-grouped: a (M, K); b (N, K, G) K- or N-major; c (M, N). K-grouped: a (N, R) and b (K, R),
        both N-major over the rows R (the padded copies' rows, or the operands' own); c (G * N, K).
        offs (G,) int32 row ends; ctas persistent CTAs (the SM count, rounded down to whole
        clusters)."""
        if cutlass.const_expr(self.k_grouped):
            # the one B of a K-grouped launch as a group of one: (K, R, 1)
            b = cute.make_tensor(b.iterator, cute.append(b.layout, cute.make_layout(1)))
        self._launch(a, b, c, offs, ctas, stream)

    @abstractmethod
    def _launch(self, a: Any, b: Any, c: Any, offs: Any, ctas: Any, stream: Any) -> None:
        """Trace-time body of ``__call__``, B as (N, K, G): TMA atoms, shared storage, kernel launch."""

    def _walk(
        self, prefix: Any, offs: Any, mA: Any, rows: Any, cols: Any, walker: Any, walkers: Any
    ) -> CtaWalk:
        """The walk of CTA (or cluster) ``walker`` of ``walkers`` over the tiles of C, ``rows x cols``;
        K-grouped, over each group's block of it (A's rows x ``cols``)."""
        rows_out = cute.size(mA, mode=[0]) if cutlass.const_expr(self.k_grouped) else rows
        tiles_m = cute.ceil_div(rows_out, self.problem.tile_m)
        tiles_n = cute.ceil_div(cols, self.tile_n)
        if cutlass.const_expr(self.cluster_n > 1):
            tiles_n = cute.ceil_div(tiles_n, self.cluster_n)
        # K tiles of ``problem.chunk`` (the K tile); K-grouped tiles take theirs (a group's row chunks)
        # from the prefix
        k_tiles = (
            0
            if cutlass.const_expr(self.k_grouped)
            else cute.ceil_div(cute.size(mA, mode=[1]), self.problem.chunk)
        )
        total = total_tiles(self.problem, prefix, cute.size(offs), tiles_m, tiles_n)
        return CtaWalk(
            prefix, offs, walker, walkers, total, tile_schedule.WalkShape(tiles_m, tiles_n, k_tiles, rows_out)
        )
