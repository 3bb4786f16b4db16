"""One dispatch point for the contiguous, M-grouped GEMMs of the MoE layers.

Rows are sorted by group (expert); ``offs`` holds the cumulative row ends (int32, on the device), so
group ``g`` owns rows ``[offs[g-1], offs[g])`` and any group may be empty. Group sizes are run-time
data: backends must not recompile per routing or sync the host.

Backends: ``torch`` (reference; CPU and fallback), ``cute-sm90`` (Hopper), ``cute-sm100`` (Blackwell);
``auto`` picks by the tensors' device. ``variant`` names one of the CuTe backend's kernels for the op
(:func:`cutlass_kernels.registry.variants`); ``auto`` takes the per-shape choice
(:mod:`cutlass_kernels.choices`). A named variant runs or raises ValueError saying why it cannot take
the operands; the torch backend has no variants, so it takes ``auto`` only.

The environment variable ``CUTLASS_KERNELS_BACKEND`` (``torch``, ``cute-sm90`` or ``cute-sm100``)
pins what ``auto`` resolves to, so that a whole program (the device run's tests and pipeline stages,
when the default kernels failed their checks) runs without the CuTe kernels. Inside
:func:`cutlass_kernels.planning.planned_launches` CUDA tensors count as on a GPU of the planned arch.
"""

from __future__ import annotations

import os
from functools import cache
from typing import Any, TypedDict, Unpack

import torch

from cutlass_kernels import planning, torch_backend
from cutlass_kernels.gating import BACKEND_ENV
from cutlass_kernels.mxfp8 import MXTensor, MXValues, quantize_mx
from cutlass_kernels.vocabulary import CAPABILITY_MAJOR, CUTE_BACKENDS, has_mx_kernel

BACKENDS = ("auto", "torch", *CUTE_BACKENDS)
_FLOAT_DTYPES = (torch.float32, torch.bfloat16)


@cache
def _cute_backend(name: str) -> Any:
    """The CuTe backend object of ``name``, or None where the CUTLASS DSL cannot be imported."""
    try:
        from cutlass_kernels.cute_backend import CuteBackend
    except ImportError:
        return None
    return CuteBackend(CUTE_BACKENDS[name])


def resolve_backend(backend: str, device: torch.device) -> str:
    """The concrete backend for ``device``: ``auto`` takes the CuTe backend of the GPU's arch when it is
    importable, else ``torch`` (or what ``CUTLASS_KERNELS_BACKEND`` pins); a CuTe backend asked for
    on the wrong device is an error."""
    if backend not in BACKENDS:
        raise ValueError(f"grouped-GEMM backend {backend!r} is not allowed; allowed: {', '.join(BACKENDS)}")
    if backend == "auto" and (pinned := os.environ.get(BACKEND_ENV)):
        if pinned not in BACKENDS[1:]:
            raise ValueError(f"{BACKEND_ENV}={pinned!r} is not allowed; allowed: {', '.join(BACKENDS[1:])}")
        backend = pinned
    if backend == "torch":
        return backend
    major = _capability_major(device)
    if backend == "auto":
        for name, arch in CUTE_BACKENDS.items():
            if major == CAPABILITY_MAJOR[arch] and _cute_backend(name) is not None:
                return name
        return "torch"
    needed = CAPABILITY_MAJOR[CUTE_BACKENDS[backend]]
    if major != needed:
        raise ValueError(f"backend {backend!r} needs a compute-capability {needed}.x GPU, not {device}")
    if _cute_backend(backend) is None:
        raise ValueError(f"backend {backend!r} is unavailable: the CUTLASS DSL cannot be imported")
    return backend


def _capability_major(device: torch.device) -> int | None:
    """The compute-capability major of ``device`` (that of the planned arch inside
    ``planned_launches``), None off CUDA and where no CUDA runtime is present."""
    if device.type != "cuda":
        return None
    plan = planning.current()
    if plan is not None:
        return CAPABILITY_MAJOR[plan.arch]
    if not torch.cuda.is_available():  # fake CUDA tensors outside a plan (pipeline.estimate): no arch
        return None
    return torch.cuda.get_device_capability(device)[0]


def _impl(backend: str, device: torch.device, variant: str) -> tuple[Any, tuple[str, ...]]:
    """The module or object with the four entry points of the resolved backend, and the trailing
    arguments it takes: the variant for a CuTe backend, none for torch (which has no variants)."""
    name = resolve_backend(backend, device)
    if name != "torch":
        return _cute_backend(name), (variant,)
    if variant != "auto":
        raise ValueError(
            f"variant {variant!r} names a CuTe kernel, but backend {backend!r} resolved to torch on "
            f"{device}, which has none; allowed: auto"
        )
    return torch_backend, ()


def _check_offs(offs: torch.Tensor, groups: int, device: torch.device) -> None:
    if offs.dtype != torch.int32 or offs.dim() != 1 or offs.shape[0] != groups:
        raise ValueError(f"offs must be int32 of shape [{groups}], got {offs.dtype} {tuple(offs.shape)}")
    if offs.device != device:
        raise ValueError(f"offs must live on {device}, got {offs.device}")


def _check_float(name: str, t: torch.Tensor, dims: int) -> None:
    if t.dim() != dims or t.dtype not in _FLOAT_DTYPES:
        raise ValueError(f"{name} must be a {dims}-d float32/bfloat16 tensor, got {t.dtype} {tuple(t.shape)}")


def _check_operands(
    first: tuple[str, torch.Tensor], second: tuple[str, torch.Tensor, int], axes: tuple[int, int], extent: str
) -> None:
    """A 2-d float ``first`` and a float ``second`` of the given dimensions, of one dtype, whose
    extents along ``axes`` agree (``extent`` names it)."""
    (a_name, a), (b_name, b, b_dims) = first, second
    _check_float(a_name, a, 2)
    _check_float(b_name, b, b_dims)
    if a.shape[axes[0]] != b.shape[axes[1]] or a.dtype != b.dtype:
        raise ValueError(
            f"{a_name} {a.dtype} {tuple(a.shape)} and {b_name} {b.dtype} {tuple(b.shape)} "
            f"must share {extent} and dtype"
        )


class Options(TypedDict, total=False):
    """Keyword options of the float GEMMs: the output dtype (the operands' when None or absent), the
    backend and the variant (both ``auto`` when absent)."""

    out_dtype: torch.dtype | None
    backend: str
    variant: str


def _float_gemm(
    op: str,
    first: tuple[str, torch.Tensor],
    second: tuple[str, torch.Tensor, int],
    axes: tuple[int, int],
    extent: str,
    offs: torch.Tensor,
    groups: int,
    options: Options,
) -> torch.Tensor:
    """Check the operands of one float GEMM and run ``op`` on the backend ``options`` resolve to."""
    if unknown := sorted(options.keys() - Options.__optional_keys__):
        allowed = ", ".join(sorted(Options.__optional_keys__))
        raise TypeError(f"{op}() got unexpected keyword argument(s) {', '.join(unknown)}; allowed: {allowed}")
    _check_operands(first, second, axes, extent)
    x = first[1]
    _check_offs(offs, groups, x.device)
    impl, extra = _impl(options.get("backend", "auto"), x.device, options.get("variant", "auto"))
    out_dtype = options.get("out_dtype") or x.dtype
    return getattr(impl, op)(x, second[1], offs, out_dtype, *extra)


def grouped_gemm(
    a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, **options: Unpack[Options]
) -> torch.Tensor:
    """``out[rows of g] = a[rows of g] @ b[g]^T``; a [M, K], b [G, N, K] -> [M, N]. FP32 accumulation."""
    return _float_gemm("grouped_gemm", ("a", a), ("b", b, 3), (1, 2), "K", offs, b.shape[0], options)


def grouped_gemm_dgrad(
    dy: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, **options: Unpack[Options]
) -> torch.Tensor:
    """Input gradient of :func:`grouped_gemm`: ``out[rows of g] = dy[rows of g] @ b[g]``; dy [M, N]."""
    return _float_gemm("grouped_gemm_dgrad", ("dy", dy), ("b", b, 3), (1, 1), "N", offs, b.shape[0], options)


def grouped_gemm_wgrad(
    dy: torch.Tensor, x: torch.Tensor, offs: torch.Tensor, **options: Unpack[Options]
) -> torch.Tensor:
    """Weight gradient of :func:`grouped_gemm`: ``out[g] = dy[rows of g]^T @ x[rows of g]`` -> [G, N, K],
    grouped along the reduction dimension; empty groups give zeros."""
    return _float_gemm(
        "grouped_gemm_wgrad", ("dy", dy), ("x", x, 2), (0, 0), "M", offs, offs.shape[0], options
    )


def mx_operand_form(backend: str, device: torch.device) -> str:
    """How :func:`grouped_gemm_mx` on ``backend`` (resolved for ``device``) multiplies a quantized A:
    ``values`` (an :class:`~cutlass_kernels.mxfp8.MXValues`, BF16) on a CuTe backend whose arch has
    no block-scaled MMA, else ``codes`` (an :class:`~cutlass_kernels.mxfp8.MXTensor`): the form in
    which a producer of A (the SwiGLU forward) hands it over, so that the GEMM quantizes nothing."""
    name = resolve_backend(backend, device)
    return "values" if name in CUTE_BACKENDS and not has_mx_kernel(CUTE_BACKENDS[name]) else "codes"


def grouped_gemm_mx(
    a: MXTensor | MXValues | torch.Tensor,
    b: MXTensor,
    offs: torch.Tensor,
    *,
    out_dtype: torch.dtype = torch.bfloat16,
    backend: str = "auto",
    variant: str = "auto",
    mode: str | None = None,
    b_values: torch.Tensor | None = None,
) -> torch.Tensor:
    """MXFP8 form of :func:`grouped_gemm`: E4M3 operands with E8M0 scales per 32 elements along K.

    ``a`` may come unquantized (a float [M, K] tensor) with its scale ``mode``: the product is then that
    of ``quantize_mx(a, mode)``, and a backend that multiplies BF16 values fake-quantizes it straight
    to BF16. Or as the BF16 values of its quantization (:class:`~cutlass_kernels.mxfp8.MXValues`,
    the form :func:`mx_operand_form` names for an arch without block-scaled MMA), multiplied as they
    are. ``b_values``, when given, must be ``b``'s values (``b.dequantize()``, as a layer caches
    them): a backend that multiplies BF16 values uses BF16 ones instead of dequantizing ``b`` again."""
    if isinstance(a, torch.Tensor) == (mode is None):
        raise ValueError(f"mode={mode!r}: give a scale mode with an unquantized a, and only then")
    if isinstance(a, torch.Tensor):
        _check_float("a", a, 2)
    if isinstance(a, MXValues) and a.values.dtype != torch.bfloat16:
        raise ValueError(f"MXValues hold bfloat16 values, got {a.values.dtype}")
    if len(a.shape) != 2 or b.data.dim() != 3 or a.shape[1] != b.shape[2]:
        raise ValueError(
            f"MX operands must be a [M, K] and b [G, N, K], got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    if b_values is not None and (b_values.shape != b.shape or b_values.dtype not in _FLOAT_DTYPES):
        raise ValueError(
            f"b_values must be b's float32/bfloat16 values of shape {tuple(b.shape)}, "
            f"got {b_values.dtype} {tuple(b_values.shape)}"
        )
    device = (
        a.data.device if isinstance(a, MXTensor) else a.values.device if isinstance(a, MXValues) else a.device
    )
    _check_offs(offs, b.shape[0], device)
    impl, extra = _impl(backend, device, variant)
    if extra:
        return impl.grouped_gemm_mx(a, b, offs, out_dtype, *extra, mode, b_values)
    a_mx = quantize_mx(a, str(mode)) if isinstance(a, torch.Tensor) else a  # the reference: exact MX product
    return impl.grouped_gemm_mx(a_mx, b, offs, out_dtype, b_values)
