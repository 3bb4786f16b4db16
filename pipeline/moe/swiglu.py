"""The SwiGLU backward of the routed experts, in two forms with one interface.

From dA (the gradient of the SwiGLU output A = silu(gate) * up, i.e. GEMM-2's data gradient) and the
saved GEMM-1 output H = [gate | up], both give d(gate, up) = [dA * up * silu'(gate) | dA * silu(gate)]
(silu'(g) = s + g * s * (1 - s), s = sigmoid(g)) and A itself (the weight gradient of GEMM-2 needs it),
in H's dtype, with float32 arithmetic.

- ``swiglu_backward``: the unfused form (MoK's native policy): whole-tensor steps, each a full pass
  over memory with its own temporary, then a concatenation.
- ``swiglu_backward_fused``: Dist-MoE's fused backward: one pass over blocks of rows, each block's
  float32 temporaries small enough to stay in cache, written straight into the two outputs. A single
  function over the tensors, so torch.compile or a Triton / CuTe DSL kernel can take its place.
"""

from __future__ import annotations

import torch

# Elements (rows x F) per block of the fused pass: its float32 temporaries (a few blocks' worth)
# stay in a core's cache (benchmarks/swiglu_backward.py).
BLOCK_ELEMENTS = 1 << 15


def _check(da: torch.Tensor, h: torch.Tensor) -> int:
    if h.dim() != 2 or h.shape[1] % 2 or da.shape != (h.shape[0], h.shape[1] // 2):
        raise ValueError(f"need h [rows, 2F] and da [rows, F]; got h {list(h.shape)} and da {list(da.shape)}")
    return h.shape[1] // 2


def swiglu_backward(da: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(d(gate, up) [rows, 2F], A [rows, F]), unfused."""
    _check(da, h)
    gate, up = h.float().chunk(2, dim=-1)
    sig = torch.sigmoid(gate)
    silu = gate * sig
    a = (silu * up).to(h.dtype)
    da = da.float()
    dgate = da * up * sig * (1 + gate * (1 - sig))
    return torch.cat([dgate, da * silu], dim=-1).to(h.dtype), a


def swiglu_backward_fused(da: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(d(gate, up) [rows, 2F], A [rows, F]) in one blocked pass."""
    f = _check(da, h)
    dh = torch.empty_like(h)
    a = torch.empty(h.shape[0], f, dtype=h.dtype, device=h.device)
    step = max(1, BLOCK_ELEMENTS // max(f, 1))
    for start in range(0, h.shape[0], step):
        rows = slice(start, start + step)
        _block(da[rows], h[rows], dh[rows], a[rows], f)
    return dh, a


def _block(da: torch.Tensor, h: torch.Tensor, dh: torch.Tensor, a: torch.Tensor, f: int) -> None:
    """One block of rows; ``gate`` may be a view of ``h`` (float32), so it is never written."""
    gate, up, d = h[:, :f].float(), h[:, f:].float(), da.float()
    sig = torch.sigmoid(gate)
    silu = gate * sig
    a.copy_(silu * up)
    # silu'(g) = s + silu * (1 - s) = s * (1 + g - silu)
    slope = (gate - silu).add_(1.0).mul_(sig)
    dh[:, :f].copy_(slope.mul_(up).mul_(d))
    dh[:, f:].copy_(silu.mul_(d))


def backward_form(fused: bool, device: torch.device) -> str:
    """The form of the SwiGLU backward a layer runs on ``device``: MoK's ``unfused`` whole-tensor
    steps, or Dist-MoE's fused backward, a blocked pass on CPUs."""
    return "fused, blocked" if fused else "unfused"
