"""The SwiGLU forward as the layers call it: A = silu(gate) * up of the GEMM-1 output H = [gate | up],
alone (:func:`swiglu`) or already in the MXFP8 form the down projection's backend multiplies
(:func:`swiglu_mx`: E4M3 codes and scales, or their BF16 values where the arch has no block-scaled
MMA; :func:`cutlass_kernels.api.mx_operand_form`), so that the GEMM quantizes nothing again.

By the fused CUDA kernel (:mod:`cutlass_kernels.swiglu_forward_kernel`: one pass, no float32
temporaries) where the measured choice names it and it takes H, else by the torch form
(:func:`cutlass_kernels.swiglu_torch.swiglu_forward`, then :mod:`cutlass_kernels.quantize`): the
reference, the CPU path, and the layers' numerics until then. The kernel's MX forms are the
quantization of its own BF16 A bit for bit; its A is the torch form's within a BF16 rounding or so
(approximate exp and reciprocal), so the choice is one of time once a device run has checked both:
:data:`cutlass_kernels.choices.SWIGLU_FORWARD` keeps the torch form until then; the environment
(:data:`IMPLEMENTATION_ENV`) overrides it, for the device run that checks it; and the CuTe kernels
pinned off (``CUTLASS_KERNELS_BACKEND=torch``, the device run's gate shut) keep it out.
"""

from __future__ import annotations

import os

import torch
from torch._subclasses.fake_tensor import is_fake

from cutlass_kernels import api, choices, quantize
from cutlass_kernels.gating import BACKEND_ENV
from cutlass_kernels.mxfp8 import MXTensor, MXValues
from cutlass_kernels.swiglu_torch import swiglu_forward

IMPLEMENTATION_ENV = "CUTLASS_KERNELS_SWIGLU_FORWARD"


def implementation() -> str:
    """``torch`` or ``kernel``: the environment's choice where set, else the measured one."""
    return choices.implementation(IMPLEMENTATION_ENV, choices.SWIGLU_FORWARD)


def kernel_reason(h: torch.Tensor) -> str:
    """Why the fused kernel does not compute the SwiGLU forward of ``h`` (``""``: it does): not
    chosen, not on CUDA, the CuTe kernels pinned off, no CUTLASS DSL, or the kernel's own reasons
    (of the layout alone for fake tensors, whose GPU is a planned one)."""
    if implementation() != "kernel":
        return f"the torch form is chosen ({IMPLEMENTATION_ENV} or choices.SWIGLU_FORWARD)"
    if h.device.type != "cuda":
        return f"h is on {h.device}; the kernel runs on CUDA"
    if os.environ.get(BACKEND_ENV) == "torch":
        return f"{BACKEND_ENV}=torch: no CuTe kernels in this process"
    try:
        from cutlass_kernels import swiglu_forward_kernel
    except ImportError as err:
        return f"the CUTLASS DSL cannot be imported ({err})"
    if is_fake(h):
        return swiglu_forward_kernel.layout_reason(h)
    return swiglu_forward_kernel.unsupported_reason(h)


def swiglu(h: torch.Tensor) -> torch.Tensor:
    """A = silu(gate) * up [..., F] of H [..., 2F], in H's dtype."""
    if not kernel_reason(h):
        from cutlass_kernels import swiglu_forward_kernel

        return swiglu_forward_kernel.swiglu_forward(h)
    return swiglu_forward(h)


def swiglu_mx(h: torch.Tensor, mode: str, backend: str = "auto") -> MXTensor | MXValues:
    """A of H [rows, 2F] quantized to MXFP8 in scale ``mode``, in the form
    :func:`cutlass_kernels.api.grouped_gemm_mx` on ``backend`` multiplies: what that GEMM would have
    made of A itself, bit for bit (given the same A)."""
    form = api.mx_operand_form(backend, h.device)
    if not kernel_reason(h):
        from cutlass_kernels import swiglu_forward_kernel

        return swiglu_forward_kernel.swiglu_forward(h, form, mode)
    a = swiglu_forward(h)
    if form == "codes":
        return quantize.quantize_mx(a, mode)
    return MXValues(quantize.fake_quantize(a, mode, torch.bfloat16))
