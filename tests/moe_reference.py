"""Independent float64 reference of the MoE layer: token repeat + masked indexing, one expert at a time,
as in the token-repeat reference workload. No dispatch, no sorting, no grouped GEMM.

With ``mx_mode`` set, operands (tokens, expert weights, the SwiGLU activation) take their MXFP8 values
with a straight-through gradient, which defines what the layers' MXFP8 paths compute.
"""

from __future__ import annotations

import torch

from cutlass_kernels.mxfp8 import fake_quantize


def _ste(t: torch.Tensor, mode: str | None, dtype: torch.dtype) -> torch.Tensor:
    if mode is None:
        return t
    return t + (fake_quantize(t.detach().to(dtype), mode).double() - t).detach()


def _ffn(x, w1, w2, mode, dtype):
    gate, up = (x @ _ste(w1, mode, dtype).T).chunk(2, dim=-1)
    a = torch.nn.functional.silu(gate) * up
    return _ste(a, mode, dtype) @ _ste(w2, mode, dtype).T


def reference_moe(
    x: torch.Tensor,
    topk_idx: torch.Tensor,
    topk_weight: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    shared_w1: torch.Tensor,
    shared_w2: torch.Tensor,
    mx_mode: str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """All float64 tensors; x [T, D] of all tokens, full weights. Returns y [T, D]."""
    t, k = topk_idx.shape
    x_rep = x.repeat_interleave(k, dim=0)
    x_routed = _ste(x_rep, mx_mode, dtype)
    flat = topk_idx.reshape(-1)
    out = torch.zeros_like(x_rep)
    for e in range(w1.shape[0]):
        mask = flat == e
        if mask.any():
            out = out.index_put((mask.nonzero()[:, 0],), _ffn(x_routed[mask], w1[e], w2[e], mx_mode, dtype))
    y = (out.view(t, k, -1) * topk_weight.double().unsqueeze(-1)).sum(dim=1)
    for s in range(shared_w1.shape[0]):
        y = y + _ffn(x, shared_w1[s], shared_w2[s], None, dtype)
    return y
