"""The SwiGLU's torch forms: the forward, the kernels' arithmetic mirrored, and the backward's unfused
reference and fused forms without the kernel.

The forward (``swiglu_forward``) is A = silu(gate) * up from the GEMM-1 output H = [gate | up], in
float32, rounded to H's dtype: the layers' form, the CPU path and the fallback of the fused forward
kernel (``swiglu_forward_kernel.py``, which :mod:`cutlass_kernels.swiglu_forward` chooses between).
``swiglu_forward_steps`` is that kernel's arithmetic step by step in torch (the device check's
stand-in on the CPU), with exact ``exp2`` and reciprocal where the kernel has the GPU's
approximations.

From dA (the gradient of the SwiGLU output A = silu(gate) * up, i.e. GEMM-2's data gradient) and the
saved GEMM-1 output H = [gate | up], each gives d(gate, up) = [dA * up * silu'(gate) | dA * silu(gate)]
(silu'(g) = s + g * s * (1 - s), s = sigmoid(g)) and A itself (the weight gradient of GEMM-2 needs it),
in H's dtype, with float32 arithmetic. They sit beside the CuTe kernel (``swiglu_kernel.py``) as
``torch_backend.py`` sits beside the GEMMs: its checks compare against ``swiglu_backward``, and the
layers (``pipeline/moe/swiglu.py``) choose among all forms.

- ``swiglu_backward``: unfused (MoK's native policy): whole-tensor steps, each a full pass over memory
  with its own temporary, then a concatenation.
- ``swiglu_backward_blocked``: fused, one pass over blocks of rows whose float32 temporaries stay in
  cache (a CPU's form: 15 torch ops a block, which on a GPU would be one kernel launch each).
- ``swiglu_backward_whole``: fused, one call over the whole tensors (11 torch ops, three float32
  temporaries of [rows, F]): a GPU's form where the kernel cannot run.

The three compute the same values, the two fused ones bit for bit on one thread.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# Elements (rows x F) per block of the fused pass: its float32 temporaries (a few blocks' worth)
# stay in a core's cache (benchmarks/swiglu_backward.py).
BLOCK_ELEMENTS = 1 << 15


def swiglu_forward(h: torch.Tensor) -> torch.Tensor:
    """A = silu(gate) * up [..., F] of H = [gate | up] [..., 2F], in H's dtype, float32 arithmetic."""
    gate, up = h.float().chunk(2, dim=-1)
    return (F.silu(gate) * up).to(h.dtype)


def swiglu_forward_steps(h: torch.Tensor) -> torch.Tensor:
    """A of H [..., 2F] as the fused forward kernel computes it, in BF16: per element, in float32,
    s = 1 / (2^(g * -log2 e) + 1), A = (g * s) * up, rounded to nearest even; ``exp2`` and the
    reciprocal exact (the kernel's ``ex2.approx.ftz`` and ``rcp.approx`` are within an ulp or two of
    them; its flush of a subnormal ``2^(...)`` changes nothing, as 1 + it rounds to 1)."""
    gate, up = h.float().chunk(2, dim=-1)
    s = torch.reciprocal(torch.exp2(gate * torch.tensor(-math.log2(math.e), dtype=torch.float32)) + 1.0)
    return ((gate * s) * up).to(torch.bfloat16)


def check_operands(da: torch.Tensor, h: torch.Tensor) -> int:
    """F, after refusing operands that are not h [rows, 2F] and da [rows, F] (every form, and the
    layers' dispatch before it picks one)."""
    if h.dim() != 2 or h.shape[1] % 2 or da.shape != (h.shape[0], h.shape[1] // 2):
        raise ValueError(f"need h [rows, 2F] and da [rows, F]; got h {list(h.shape)} and da {list(da.shape)}")
    return h.shape[1] // 2


def swiglu_backward(da: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(d(gate, up) [rows, 2F], A [rows, F]), unfused."""
    check_operands(da, h)
    gate, up = h.float().chunk(2, dim=-1)
    sig = torch.sigmoid(gate)
    silu = gate * sig
    a = (silu * up).to(h.dtype)
    da = da.float()
    dgate = da * up * sig * (1 + gate * (1 - sig))
    return torch.cat([dgate, da * silu], dim=-1).to(h.dtype), a


def swiglu_backward_blocked(da: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused backward as one pass over blocks of rows (the CPU's form)."""
    f = check_operands(da, h)
    dh = torch.empty_like(h)
    a = torch.empty(h.shape[0], f, dtype=h.dtype, device=h.device)
    step = max(1, BLOCK_ELEMENTS // max(f, 1))
    for start in range(0, h.shape[0], step):
        rows = slice(start, start + step)
        _block(da[rows], h[rows], dh[rows], a[rows], f)
    return dh, a


def _block(da: torch.Tensor, h: torch.Tensor, dh: torch.Tensor, a: torch.Tensor, f: int) -> None:
    """One block of rows; ``gate`` may be a view of ``h`` (float32), so it is never written. The
    block's operands are copied to float32: contiguous float32 steps are a CPU's fastest, and the
    copies of a block stay in cache."""
    gate, up, d = h[:, :f].float(), h[:, f:].float(), da.float()
    sig = torch.sigmoid(gate)
    silu = gate * sig
    a.copy_(silu * up)
    # silu'(g) = s + silu * (1 - s) = s * (1 + g - silu)
    slope = (gate - silu).add_(1.0).mul_(sig)
    dh[:, :f].copy_(slope.mul_(up).mul_(d))
    dh[:, f:].copy_(silu.mul_(d))


def swiglu_backward_whole(da: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused backward over the whole tensors at once (a GPU's form where the kernel cannot run): the
    blocked pass's arithmetic (the same values on one CPU thread), with ``up`` and ``da`` read in their
    own dtype (elementwise ops promote them on the fly) rather than copied, so its float32 temporaries
    are three [rows, F]."""
    f = check_operands(da, h)
    dh = torch.empty_like(h)
    a = torch.empty(h.shape[0], f, dtype=h.dtype, device=h.device)
    gate, up = h[:, :f].to(torch.float32, copy=True), h[:, f:]  # a copy: h is never written
    sig = torch.sigmoid(gate)
    silu = gate * sig
    torch.mul(silu, up, out=a)
    torch.mul(silu, da, out=dh[:, f:])
    dh[:, :f].copy_(gate.sub_(silu).add_(1.0).mul_(sig).mul_(up).mul_(da))
    return dh, a
