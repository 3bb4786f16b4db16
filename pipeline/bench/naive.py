"""Seed 003's naive formulation of the MoE forward, and the check of a timed forward against it (the
gate's ``case`` check, for a suite that asks for it: ``check: case``).

The formulation is written as the seed states it, and apart from the layer's path (no dispatch, no
sorting, no grouped GEMM, no kernel, nothing of :mod:`pipeline.moe` but the weights' draw): each token
repeated top-k times, each expert's rows found by masked indexing and passed through its SwiGLU FFN,
the routing weights applied before the sum over a token's k rows; in float64, with MXFP8 operands
(the repeated tokens, the weights, the SwiGLU output) taking the values the layer quantizes them to.
An expert's weights come from a callable, so a rank checks tokens routed to experts it does not hold:
it draws them again from their seeds (:meth:`pipeline.moe.ExpertWeights.drawn`), the values every
rank draws for them.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from cutlass_kernels.mxfp8 import fake_quantize
from pipeline.moe import ExpertWeights, MoELayer

CASE_TOKENS = 2048  # tokens per rank checked, the first of its input (all of them at the CPU scales)

Weights = Callable[[int], tuple[torch.Tensor, torch.Tensor]]  # expert id -> (W1 [2F, D], W2 [D, F])


def naive_forward(
    x: torch.Tensor,
    topk_idx: torch.Tensor,
    topk_weight: torch.Tensor,
    expert: Weights,
    shared: tuple[torch.Tensor, torch.Tensor],
    mx_mode: str | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """y [T, D] in float64 of tokens ``x`` [T, D] routed to ``topk_idx`` [T, K] with ``topk_weight``;
    ``shared`` = (W1 [S, 2F, D], W2 [S, D, F]) of the shared experts; ``mx_mode`` the layer's E8M0
    scale selection where its routed GEMMs run in MXFP8 (None: in ``dtype``)."""

    def operand(t: torch.Tensor) -> torch.Tensor:
        return t if mx_mode is None else fake_quantize(t.to(dtype), mx_mode).double()

    tokens, k = topk_idx.shape
    repeated = x.double().repeat_interleave(k, dim=0)  # each token repeated top-k times
    rows = operand(repeated)
    chosen = topk_idx.reshape(-1)
    out = torch.zeros_like(repeated)
    for e in torch.unique(chosen).tolist():
        mask = chosen == e  # masked indexing: the rows of expert e
        w1, w2 = expert(e)
        gate, up = (rows[mask] @ operand(w1.double()).T).chunk(2, dim=-1)
        out[mask] = operand(torch.nn.functional.silu(gate) * up) @ operand(w2.double()).T
    y = (out.view(tokens, k, -1) * topk_weight.double().unsqueeze(-1)).sum(dim=1)  # weights, then the sum
    for w1, w2 in zip(*shared, strict=True):
        gate, up = (x.double() @ w1.double().T).chunk(2, dim=-1)
        y = y + (torch.nn.functional.silu(gate) * up) @ w2.double().T
    return y


def case_error(
    layer: MoELayer, x: torch.Tensor, topk_idx: torch.Tensor, topk_weight: torch.Tensor, seed: int
) -> float:
    """The normwise relative error of ``layer``'s forward of its timed input (every rank at once: a
    collective) against :func:`naive_forward` over this rank's first :data:`CASE_TOKENS` tokens;
    ``seed`` is the weights' (the execution's). NaN counts as infinite."""
    cfg = layer.cfg
    with torch.inference_mode():
        y = layer(x.detach(), topk_idx, topk_weight)
    local = layer.w1.shape[0]
    first = layer.group.rank * local

    def expert(e: int) -> tuple[torch.Tensor, torch.Tensor]:
        if first <= e < first + local:
            return layer.w1[e - first].detach(), layer.w2[e - first].detach()
        w1, w2 = ExpertWeights.drawn(cfg, range(e, e + 1), seed, layer.w1.device, layer.index)
        return w1[0], w2[0]

    n = min(x.shape[0], CASE_TOKENS)
    mode = cfg.mx_scale_mode if cfg.precision == "mxfp8" else None
    shared = (layer.shared_w1.detach(), layer.shared_w2.detach())
    ref = naive_forward(x[:n].detach(), topk_idx[:n], topk_weight[:n], expert, shared, mode, cfg.dtype)
    diff = float(torch.linalg.vector_norm(y[:n].double() - ref))
    scale = float(torch.linalg.vector_norm(ref))
    error = diff / scale if scale > 0 else diff
    return float("inf") if error != error else error
