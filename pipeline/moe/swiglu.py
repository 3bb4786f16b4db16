"""The SwiGLU backward of the routed experts, in two forms with one interface.

- ``swiglu_backward``: the unfused form (MoK's native policy; ``cutlass_kernels/swiglu_torch.py``).
- ``swiglu_backward_fused``: Dist-MoE's fused backward, written straight into the two outputs. Its
  form depends on the device and the operands (``fused_form``, ``kernel_reason``): on a CPU one pass
  over blocks of rows whose float32 temporaries stay in cache (``blocked``: 15 torch ops a block,
  which on a GPU would be one kernel launch each, hundreds of thousands per packing iteration); on a
  Hopper or Blackwell GPU, BF16 with F a multiple of 8, the CuTe DSL kernel
  (``cutlass_kernels/swiglu_kernel.py``: ``cute-kernel``, one launch, no temporaries); on any other
  GPU operands one call over the whole tensors (``whole-tensor``: 11 torch ops, three float32
  temporaries of [rows, F]). The torch forms compute the same values bit for bit; the kernel's
  ``sigmoid`` is the approximate one of the GPU's special-function unit (a BF16 rounding or so).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch._subclasses.fake_tensor import is_fake

from cutlass_kernels.gating import BACKEND_ENV
from cutlass_kernels.swiglu_torch import check_operands, swiglu_backward_blocked, swiglu_backward_whole
from pipeline.base.vocabulary import SWIGLU_FORMS


def swiglu_backward_fused(da: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(d(gate, up) [rows, 2F], A [rows, F]) in the fused form for these operands (module docstring)."""
    check_operands(da, h)
    return FUSED_FORMS[_operands_form(da, h)](da, h)


def swiglu_backward_kernel(da: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused backward as the CuTe DSL kernel's one launch (CUDA, BF16; under fake tensors its
    outputs and, inside ``planned_launches``, its recorded launch)."""
    from cutlass_kernels import swiglu_kernel

    return swiglu_kernel.swiglu_backward(da, h)


FUSED_FORMS: dict[str, Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]] = dict(
    zip(SWIGLU_FORMS, (swiglu_backward_blocked, swiglu_backward_whole, swiglu_backward_kernel), strict=True)
)
_forced: str | None = None


def kernel_reason(da: torch.Tensor, h: torch.Tensor) -> str:
    """Why the CuTe kernel cannot take ``da`` and ``h`` (``""`` when it can): not on CUDA, the CuTe
    kernels pinned off (``CUTLASS_KERNELS_BACKEND=torch``), no CUTLASS DSL, or the kernel's own
    reasons (``unsupported_reason`` of real tensors; ``layout_reason`` of fake ones, whose GPU is the
    planned one, and of meta stand-ins)."""
    if h.device.type not in ("cuda", "meta"):
        return f"h is on {h.device}; the kernel runs on CUDA"
    if os.environ.get(BACKEND_ENV) == "torch":  # the device run's fallback when kernels failed checks
        return f"{BACKEND_ENV}=torch: no CuTe kernels in this process"
    try:
        from cutlass_kernels import swiglu_kernel
    except ImportError as err:
        return f"the CUTLASS DSL cannot be imported ({err})"
    if is_fake(da) or is_fake(h) or h.device.type == "meta":
        return swiglu_kernel.layout_reason(da, h)
    return swiglu_kernel.unsupported_reason(da, h)


def _operands_form(da: torch.Tensor, h: torch.Tensor) -> str:
    if _forced is not None:
        return _forced
    if h.device.type == "cpu":
        return "blocked"
    return "cute-kernel" if not kernel_reason(da, h) else "whole-tensor"


def fused_form(device: torch.device, dtype: torch.dtype, f: int) -> str:
    """The form ``swiglu_backward_fused`` runs on ``device`` for a layer's operands (contiguous,
    ``dtype``, F = ``f``): :func:`kernel_reason`'s rule on empty stand-ins of that layout, made on the
    device where it is a real GPU, else on ``meta`` (a fake CUDA device counts as the planned GPU)."""
    if _forced is not None:
        return _forced
    if device.type != "cuda":
        return "blocked"
    where = device if torch.cuda.is_available() else torch.device("meta")
    da = torch.empty((0, f), dtype=dtype, device=where)
    return _operands_form(da, torch.empty((0, 2 * f), dtype=dtype, device=where))


@contextmanager
def forced_form(form: str) -> Iterator[None]:
    """Run the fused backward in ``form`` on every device meanwhile (benchmarks, and the estimate's
    figures of the blocked loop on a GPU). Process-wide, not per thread: autograd runs GPU backwards
    on a thread of its own."""
    global _forced
    if form not in FUSED_FORMS:
        raise ValueError(f"fused SwiGLU backward form {form!r}; allowed: {', '.join(FUSED_FORMS)}")
    previous, _forced = _forced, form
    try:
        yield
    finally:
        _forced = previous


def backward_form(fused: bool, device: torch.device, dtype: torch.dtype, f: int) -> str:
    """The form of the SwiGLU backward a layer runs on ``device``: MoK's ``unfused`` whole-tensor
    steps, or Dist-MoE's fused backward in the form :func:`fused_form` names."""
    return f"fused, {fused_form(device, dtype, f)}" if fused else "unfused"
