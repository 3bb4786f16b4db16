"""The four grouped-GEMM entry points on top of the CuTe kernels of one arch, with the torch fallback
for what those kernels do not cover.

Covered: BF16 operands, BF16 or FP32 output, row-major 16-byte-aligned A / dY and B stored [G, N, K]
with contiguous K (the layout both the fprop kernel, K-major, and the dgrad kernel, reading B^T in
place N-major, were compiled for: a B of any other stride order would be read wrongly, so it is
refused), 1 to ``MAX_GROUPS`` groups. wgrad copies dY and X into per-group zero-padded row chunks of
the kernel's K tile (device ops, no sync) and runs the K-grouped kernel on them, unless the variant
reads row-major dY and X in place. The MXFP8 form runs
the block-scaled kernel where the arch has one (sm100a; K and N multiples of 128), else multiplies
BF16 values on the BF16 kernel: B's cached values where the caller passes them, else B dequantized
(exact for E4M3 values times E8M0 scales within BF16's exponent range), and A dequantized, or
fake-quantized straight to BF16 when it comes unquantized.

Which variant runs: :func:`cutlass_kernels.registry.choose`. With ``variant="auto"`` operands a kernel
does not cover go to :mod:`cutlass_kernels.torch_backend`; a variant named explicitly either runs or
raises ValueError with the reason (the caller asked for that kernel, not for a result by any means).
Launches read ``offs`` on the device and never synchronize the host. Output rows at or past
``offs[-1]`` are left unwritten, as with ``torch._grouped_mm``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import cache

import cutlass
import torch
from cuda.bindings import driver
from cutlass.utils import HardwareInfo
from torch._subclasses.fake_tensor import FakeTensor

from cutlass_kernels import mx_layout, planning, registry, tile_schedule, torch_backend
from cutlass_kernels.choices import CHOICES, Choice, Problem
from cutlass_kernels.cute_base import (
    ALIGN_BYTES,
    MAX_GROUPS,
    OFFS_ALIGN,
    KernelSpec,
    sm_count,
    to_cute,
)
from cutlass_kernels.mxfp8 import BLOCK, MXTensor, MXValues, scale_values
from cutlass_kernels.quantize import fake_quantize, quantize_mx
from cutlass_kernels.tile_schedule import WGRAD_CHUNK
from cutlass_kernels.vocabulary import has_mx_kernel

_MX_MULTIPLE = 128  # K: whole 4-column scale atoms per K tile; N: whole 128-row scale atoms of B
# the mode of the kernel's (N, K, G) view of B with unit stride, as each op's kernel was compiled
_B_UNIT_MODE = {"fprop": 1, "dgrad": 0}
_B_MAJOR = {"fprop": "K-major", "dgrad": "N-major"}


# at most this many persistent walkers (CTAs, or clusters) per launch; None: as many as fit at once
_WALKERS: ContextVar[int | None] = ContextVar("cutlass_kernels_walkers", default=None)


@contextmanager
def persistent_walkers(count: int) -> Iterator[None]:
    """Launch at most ``count`` persistent CTAs (clusters, for cluster kernels) inside the context:
    fewer walkers than tiles make every one walk several tiles (the smoke test's canary)."""
    token = _WALKERS.set(count)
    try:
        yield
    finally:
        _WALKERS.reset(token)


@cache
def _resident_ctas(device_index: int, cluster: int) -> int:
    """CTAs of ``cluster``-CTA clusters that fit on the GPU at once (one CTA per SM: each takes
    nearly all of an SM's shared memory). Clusters need SMs of one GPC: CUDA's occupancy query
    (``get_max_active_clusters``, as CUTLASS's examples size their grids) says how many fit, where
    the SM count divided by the cluster size could overstate it, leaving a second wave of clusters
    behind the first."""
    sms = sm_count(torch.device("cuda", device_index))
    if cluster == 1:
        return sms
    try:
        clusters = HardwareInfo(device_index).get_max_active_clusters(cluster)
    except Exception:  # it compiles and loads a probe kernel, which fails on some driver / runtime
        clusters = sms // cluster  # pairs: then the SM count's bound
    return max(1, min(clusters, sms // cluster)) * cluster


@cache
def _cluster_size(spec: KernelSpec) -> int:
    return registry.kernel_for(spec).cluster_size


def _address(t: torch.Tensor) -> int:
    """The address of ``t``'s first element; for a fake tensor (planning: no memory) its offset into
    a block of the caching allocator, whose blocks are 512-byte aligned."""
    return int(t.storage_offset()) * t.element_size() if isinstance(t, FakeTensor) else t.data_ptr()


def unsupported_reason(
    a: torch.Tensor, b_kernel: torch.Tensor, offs: torch.Tensor, out_dtype: torch.dtype, *, op: str
) -> str:
    """Why the BF16 ``op`` kernel (``fprop`` or ``dgrad``) cannot take these operands (``""`` when it
    can). ``b_kernel`` is B in the kernel's (N, K, G) view."""
    if a.dtype != torch.bfloat16 or b_kernel.dtype != torch.bfloat16:
        return f"operands are {a.dtype}, the kernels take bfloat16"
    return _layout_reason(a, b_kernel, offs, out_dtype, op)


def wgrad_unsupported_reason(
    dy: torch.Tensor, x: torch.Tensor, offs: torch.Tensor, out_dtype: torch.dtype
) -> str:
    """Why the K-grouped kernel cannot take these operands (``""`` when it can); they are copied into
    padded row chunks first, so their strides do not matter."""
    if dy.dtype != torch.bfloat16 or x.dtype != torch.bfloat16:
        return f"operands are {dy.dtype}, the kernels take bfloat16"
    vec = ALIGN_BYTES // dy.element_size()
    if dy.shape[1] % vec or x.shape[1] % vec:
        return f"dY width {dy.shape[1]} and X width {x.shape[1]} must be multiples of {vec}"
    return _problem_reason(offs, (*dy.shape, x.shape[1]), out_dtype) or _device_reason(dy)


def rows_in_place_reason(dy: torch.Tensor, x: torch.Tensor) -> str:
    """Why a wgrad kernel that reads dY and X in place cannot take them (``""`` when it can): TMA
    needs row-major operands with 16-byte aligned rows and base addresses."""
    vec = ALIGN_BYTES // dy.element_size()
    for name, t in (("dY", dy), ("X", x)):
        if t.stride(1) != 1 or t.stride(0) % vec or _address(t) % ALIGN_BYTES:
            return f"{name} {tuple(t.shape)} strides {t.stride()} are not row-major with 16-byte aligned rows"
    return ""


def mx_unsupported_reason(a: MXTensor, b: MXTensor, offs: torch.Tensor, out_dtype: torch.dtype) -> str:
    """Why the block-scaled kernel cannot take these MX operands (``""`` when it can)."""
    k, n = a.shape[1], b.shape[1]
    if k % _MX_MULTIPLE or n % _MX_MULTIPLE:
        return f"K={k} and N={n} must be multiples of {_MX_MULTIPLE} for the block-scaled kernel"
    if not (a.scale.is_contiguous() and b.scale.is_contiguous()):
        return "MX scales are not contiguous"
    return _layout_reason(a.data, b.data.permute(1, 2, 0), offs, out_dtype, "fprop")


def _layout_reason(
    a: torch.Tensor, b_kernel: torch.Tensor, offs: torch.Tensor, out_dtype: torch.dtype, op: str
) -> str:
    reason = _problem_reason(offs, (*a.shape, b_kernel.shape[0]), out_dtype)
    vec = ALIGN_BYTES // a.element_size()
    if not reason and (a.stride(1) != 1 or a.stride(0) % vec or a.shape[1] % vec or b_kernel.shape[0] % vec):
        reason = f"A {tuple(a.shape)} strides {a.stride()} are not row-major with 16-byte aligned rows"
    unit = _B_UNIT_MODE[op]
    if not reason and (
        b_kernel.stride(unit) != 1 or any(s % vec for i, s in enumerate(b_kernel.stride()) if i != unit)
    ):
        reason = (
            f"B strides {b_kernel.stride()} of the (N, K, G) view are not the {_B_MAJOR[op]} layout with "
            f"16-byte aligned rows that the {op} kernel was compiled for"
        )
    if not reason and any(_address(t) % ALIGN_BYTES for t in (a, b_kernel)):
        reason = "operand base addresses are not 16-byte aligned"
    return reason or _device_reason(a)


def _problem_reason(offs: torch.Tensor, extents: tuple[int, ...], out_dtype: torch.dtype) -> str:
    if out_dtype not in registry.OUT_DTYPES:
        return f"output dtype {out_dtype} is not bfloat16/float32"
    if not 1 <= offs.shape[0] <= MAX_GROUPS or 0 in extents:
        limits = f"1..{MAX_GROUPS} groups and non-empty extents"
        return f"{offs.shape[0]} groups, extents {extents} (kernels take {limits})"
    return ""


def _device_reason(t: torch.Tensor) -> str:
    return "" if t.is_cuda else "operands are not on a CUDA device"


def launch(
    spec: KernelSpec,
    out: torch.Tensor,
    a: torch.Tensor,
    b_kernel: torch.Tensor,
    offs: torch.Tensor,
    *scales: torch.Tensor,
) -> torch.Tensor:
    """Run the kernel of ``spec`` into ``out`` (see :class:`~cutlass_kernels.cute_base.KernelSpec` for
    the operand views; ``scales``: the MX kernel's flat atom-layout SFA and SFB) on as many
    persistent CTAs as fit on the GPU at once; inside ``planned_launches`` record the launch
    instead."""
    plan = planning.current()
    if plan is not None:
        op = "mx" if spec.mx else spec.op
        dtype = str(out.dtype).removeprefix("torch.")
        plan.launches.append(
            planning.PlannedLaunch(spec.name, op, spec.variant, spec.arch, tuple(out.shape), dtype)
        )
        return out
    cluster = _cluster_size(spec)
    ctas = _resident_ctas(a.device.index or 0, cluster)
    if (walkers := _WALKERS.get()) is not None:
        ctas = min(ctas, walkers * cluster)
    stream = driver.CUstream(torch.cuda.current_stream(a.device).cuda_stream)
    registry.compiled(spec)(
        *(to_cute(t) for t in (a, b_kernel, out)),
        to_cute(offs, OFFS_ALIGN),
        *(to_cute(t) for t in scales),
        cutlass.Int32(ctas),
        stream,
    )
    return out


def dequantize_bf16(t: MXTensor) -> torch.Tensor:
    """E4M3 values times their E8M0 scales computed in BF16: exact while the products stay in BF16's
    range (scale exponents in [-124, 119]), with half the traffic of going through FP32."""
    values = t.data.to(torch.bfloat16).unflatten(-1, (-1, BLOCK))
    return (values * scale_values(t.scale).to(torch.bfloat16).unsqueeze(-1)).flatten(-2)


def bf16_operands(
    a: MXTensor | MXValues | torch.Tensor, b: MXTensor, mode: str | None, b_values: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The BF16 values the MX GEMM multiplies, for arches without block-scaled MMA: A's values where
    it comes as them, fake-quantized straight to BF16 when it comes unquantized (no E4M3 / E8M0
    tensors), else dequantized; B's cached values when they are BF16 (FP32 ones would cost more to
    convert than B to dequantize), else B dequantized."""
    if isinstance(a, MXValues):
        a_bf16 = a.values
    elif isinstance(a, torch.Tensor):
        a_bf16 = fake_quantize(a, str(mode), torch.bfloat16)
    else:
        a_bf16 = dequantize_bf16(a)
    if b_values is not None and b_values.dtype == torch.bfloat16:
        return a_bf16, b_values
    return a_bf16, dequantize_bf16(b)


def _rows_out(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """The uninitialized [M, N] output of a row-grouped GEMM of a [M, K] by b [G, N, K]."""
    return torch.empty(a.shape[0], b.shape[1], dtype=out_dtype, device=a.device)


class CuteBackend:
    """The backend module interface (:mod:`cutlass_kernels.api`) for one arch; ``choices``: the
    per-shape variant table that ``variant="auto"`` consults."""

    def __init__(self, arch: str, choices: tuple[Choice, ...] = CHOICES) -> None:
        self.arch, self.choices = arch, choices

    def _variant(self, problem: Problem, requested: str, reason: str) -> str | None:
        """The variant to launch, or None to fall back to torch: ``reason`` (why no kernel of the op
        can take the operands) sends ``auto`` to torch and is an error for a named variant."""
        if reason:
            if requested != "auto":
                registry.choose(self.arch, problem, requested, ())  # an unknown name is the first error
                raise ValueError(f"variant {requested!r} cannot take these {problem.op} operands: {reason}")
            return None
        return registry.choose(self.arch, problem, requested, self.choices)

    def grouped_gemm(
        self, a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out_dtype: torch.dtype, variant: str
    ) -> torch.Tensor:
        return self._fprop(a, b, offs, out_dtype, variant, "fprop")

    def _fprop(
        self,
        a: torch.Tensor,
        b: torch.Tensor,
        offs: torch.Tensor,
        out_dtype: torch.dtype,
        variant: str,
        op: str,
    ) -> torch.Tensor:
        """The BF16 fprop kernel, its variant chosen as for ``op`` (``fprop``, or ``mx`` where the MX
        path multiplies BF16 values on it)."""
        b_kernel = b.permute(1, 2, 0)  # [G, N, K] -> (N, K, G), K-major
        problem = Problem(op, b.shape[0], a.shape[0], b.shape[1], b.shape[2], out_dtype)
        name = self._variant(problem, variant, unsupported_reason(a, b_kernel, offs, out_dtype, op="fprop"))
        if name is None:
            return torch_backend.grouped_gemm(a, b, offs, out_dtype)
        spec = registry.spec_for(self.arch, "fprop", a.dtype, out_dtype, name)
        return launch(spec, _rows_out(a, b, out_dtype), a, b_kernel, offs)

    def grouped_gemm_dgrad(
        self, dy: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, out_dtype: torch.dtype, variant: str
    ) -> torch.Tensor:
        b_kernel = b.permute(2, 1, 0)  # [G, N, K] -> (K, N, G): the reduction runs over N, N-major
        problem = Problem("dgrad", b.shape[0], dy.shape[0], b.shape[1], b.shape[2], out_dtype)
        reason = unsupported_reason(dy, b_kernel, offs, out_dtype, op="dgrad")
        name = self._variant(problem, variant, reason)
        if name is None:
            return torch_backend.grouped_gemm_dgrad(dy, b, offs, out_dtype)
        spec = registry.spec_for(self.arch, "dgrad", dy.dtype, out_dtype, name)
        return launch(spec, _rows_out(dy, b.transpose(1, 2), out_dtype), dy, b_kernel, offs)

    def grouped_gemm_wgrad(
        self, dy: torch.Tensor, x: torch.Tensor, offs: torch.Tensor, out_dtype: torch.dtype, variant: str
    ) -> torch.Tensor:
        problem = Problem("wgrad", offs.shape[0], dy.shape[0], dy.shape[1], x.shape[1], out_dtype)
        name = self._variant(problem, variant, wgrad_unsupported_reason(dy, x, offs, out_dtype))
        if name is None:
            return torch_backend.grouped_gemm_wgrad(dy, x, offs, out_dtype)
        in_place = registry.variant(self.arch, name).wgrad_in_place
        if in_place and (reason := rows_in_place_reason(dy, x)):
            if variant != "auto":
                raise ValueError(f"variant {variant!r} cannot take these wgrad operands: {reason}")
            name, in_place = "default", False
        if in_place:
            dy_rows, x_rows = dy, x
        else:
            dy_rows = tile_schedule.pad_rows_per_tile(dy, offs, WGRAD_CHUNK)
            x_rows = tile_schedule.pad_rows_per_tile(x, offs, WGRAD_CHUNK)
        groups, n, k = offs.shape[0], dy.shape[1], x.shape[1]
        out = torch.empty(groups, n, k, dtype=out_dtype, device=dy.device)
        spec = registry.spec_for(self.arch, "wgrad", dy.dtype, out_dtype, name)
        launch(spec, out.view(groups * n, k), dy_rows.T, x_rows.T, offs)
        return out

    def grouped_gemm_mx(
        self,
        a: MXTensor | MXValues | torch.Tensor,
        b: MXTensor,
        offs: torch.Tensor,
        out_dtype: torch.dtype,
        variant: str,
        mode: str | None,
        b_values: torch.Tensor | None,
    ) -> torch.Tensor:
        if not has_mx_kernel(self.arch):
            return self._fprop(*bf16_operands(a, b, mode, b_values), offs, out_dtype, variant, "mx")
        if isinstance(a, MXValues):  # no codes for the block-scaled kernel: the values on the BF16 one
            if variant != "auto":
                raise ValueError(f"variant {variant!r} is a block-scaled kernel; A came as its BF16 values")
            return self.grouped_gemm(*bf16_operands(a, b, mode, b_values), offs, out_dtype, "auto")
        a_mx = quantize_mx(a, str(mode)) if isinstance(a, torch.Tensor) else a
        problem = Problem("mx", b.shape[0], a.shape[0], b.shape[1], b.shape[2], out_dtype)
        name = self._variant(problem, variant, mx_unsupported_reason(a_mx, b, offs, out_dtype))
        if name is None:  # shapes the block-scaled kernel does not tile: BF16 values on the BF16 kernel
            return self.grouped_gemm(*bf16_operands(a_mx, b, mode, b_values), offs, out_dtype, "auto")
        spec = registry.mx_spec_for(self.arch, out_dtype, name)
        sfa = mx_layout.atom_layout(mx_layout.pad_per_tile(a_mx.scale, offs, spec.tile_m))
        sfb = mx_layout.atom_layout(b.scale)
        out = _rows_out(a_mx.data, b.data, out_dtype)
        return launch(spec, out, a_mx.data, b.data.permute(1, 2, 0), offs, sfa, sfb)
