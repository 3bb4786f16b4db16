"""Routed-expert compute: SwiGLU over rows sorted by local expert, through the grouped-GEMM dispatch.

The forward keeps the first ``retained`` rows' GEMM-1 outputs (the activation state a policy granted),
written into the policy's buffer (``store``) when it has one, and recomputes the remaining rows' from
their dispatched inputs in backward. The SwiGLU backward is fused for Dist-MoE and unfused for MoK
(:mod:`pipeline.moe.swiglu`; ``MoEConfig.fused_swiglu_backward``). Under MXFP8 the forward
GEMMs take MX operands; the backward runs in the layer dtype on the values the forward actually
multiplied (dequantized operands: the straight-through rule for the quantizers).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import torch

from cutlass_kernels import MXTensor, fake_quantize, swiglu, swiglu_mx
from cutlass_kernels.api import grouped_gemm, grouped_gemm_dgrad, grouped_gemm_mx, grouped_gemm_wgrad
from cutlass_kernels.swiglu_torch import swiglu_backward
from pipeline.moe.ranges import phase
from pipeline.moe.swiglu import swiglu_backward_fused


@dataclass
class MXOperands:
    """Forward operands of an MXFP8 layer: quantized weights, their dequantized values (for backward),
    the quantized dispatched rows, and the scale mode used for the intermediate activation."""

    w1: MXTensor
    w2: MXTensor
    w1_values: torch.Tensor
    w2_values: torch.Tensor
    rows: MXTensor
    mode: str


class Release:
    """Gives a reservation back exactly once: after backward, or when the graph is dropped unused."""

    def __init__(self, release: Callable[[int], None], rows: int) -> None:
        self._release, self._rows = release, rows

    def __call__(self) -> None:
        if self._rows:
            rows, self._rows = self._rows, 0
            self._release(rows)


def tail_offsets(offs: torch.Tensor, start: int) -> torch.Tensor:
    """Group ends of rows ``[start, M)`` counted from ``start`` (groups before it become empty)."""
    return (offs - start).clamp_min(0).to(torch.int32)


class GroupedSwiGLU(torch.autograd.Function):
    """y = W2_g (silu(W1gate_g x) * W1up_g x) for each row x of group g."""

    @staticmethod
    def forward(
        ctx,
        x: torch.Tensor,
        w1: torch.Tensor,
        w2: torch.Tensor,
        offs: torch.Tensor,
        retained: int,
        store: torch.Tensor | None,
        mx: MXOperands | None,
        backend: str,
        release: Release | None,
        fused: bool,
    ) -> torch.Tensor:
        if mx is None:
            with phase("fprop"):
                h = grouped_gemm(x, w1, offs, backend=backend)
            with phase("swiglu"):
                a = swiglu(h)
            with phase("fprop"):
                y = grouped_gemm(a, w2, offs, backend=backend)
        else:
            with phase("fprop", mx=True):
                h = grouped_gemm_mx(
                    mx.rows, mx.w1, offs, out_dtype=x.dtype, backend=backend, b_values=mx.w1_values
                )
            with phase("swiglu"):  # quantized as the down projection multiplies it, in the same pass
                a_mx = swiglu_mx(h, mx.mode, backend)
            with phase("fprop", mx=True):
                y = grouped_gemm_mx(
                    a_mx, mx.w2, offs, out_dtype=x.dtype, backend=backend, b_values=mx.w2_values
                )
        ctx.save_for_backward(x, offs)
        # Kept off save_for_backward: a policy buffer is written again by later layers' forwards (other
        # rows of a shared slot), which autograd's version check would take for a change of these rows.
        ctx.h_kept = _keep(h, retained, store)
        ctx.weights = (w1, w2) if mx is None else (mx.w1_values, mx.w2_values)
        ctx.mx, ctx.retained, ctx.backend, ctx.release, ctx.fused = mx, retained, backend, release, fused
        if mx is not None:  # the overflow rows' MX inputs, for an exact recompute
            with phase("quantize"):
                ctx.mx_tail = mx.rows.index_rows(slice(retained, None))
        if release is not None:
            weakref.finalize(ctx, release)
        return y

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        x, offs = ctx.saved_tensors
        w1, w2 = ctx.weights
        h = torch.cat([ctx.h_kept, GroupedSwiGLU._recompute(ctx, x, w1, offs)])
        ctx.h_kept = None
        dy = dy.contiguous()
        with phase("dgrad"):
            da = grouped_gemm_dgrad(dy, w2, offs, backend=ctx.backend)
        with phase("swiglu"):
            dh, a = (swiglu_backward_fused if ctx.fused else swiglu_backward)(da, h)
        if ctx.mx is not None:
            with phase("quantize"):
                a = fake_quantize(a, ctx.mx.mode)
        with phase("wgrad"):
            dw2 = grouped_gemm_wgrad(dy, a, offs, backend=ctx.backend)
        with phase("dgrad"):
            dx = grouped_gemm_dgrad(dh, w1, offs, backend=ctx.backend)
        with phase("wgrad"):
            dw1 = grouped_gemm_wgrad(dh, x, offs, backend=ctx.backend)
        if ctx.release is not None:
            ctx.release()
        return dx, dw1, dw2, None, None, None, None, None, None, None

    @staticmethod
    def _recompute(ctx, x: torch.Tensor, w1: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        start = ctx.retained
        tail = tail_offsets(offs, start)
        if ctx.mx is not None:
            mx = ctx.mx
            with phase("fprop", mx=True):  # recompute: a forward GEMM again (no useful work)
                return grouped_gemm_mx(
                    ctx.mx_tail, mx.w1, tail, out_dtype=x.dtype, backend=ctx.backend, b_values=mx.w1_values
                )
        with phase("fprop"):
            return grouped_gemm(x[start:], w1, tail, backend=ctx.backend)


def _keep(h: torch.Tensor, retained: int, store: torch.Tensor | None) -> torch.Tensor:
    """The first ``retained`` GEMM-1 rows, in ``store`` (the policy's buffer rows) when given."""
    if store is not None:
        return store.copy_(h[:retained])
    return h if retained >= h.shape[0] else h[:retained].clone()


def grouped_swiglu(
    x: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    offs: torch.Tensor,
    retained: int,
    mx: MXOperands | None = None,
    backend: str = "auto",
    release: Release | None = None,
    store: torch.Tensor | None = None,
    fused: bool = False,
) -> torch.Tensor:
    """Routed experts on rows sorted by local expert (``offs`` = cumulative group ends); ``store``
    ([retained, 2F], a policy buffer's rows) receives the retained GEMM-1 outputs; ``fused`` picks
    the fused SwiGLU backward."""
    return GroupedSwiGLU.apply(x, w1, w2, offs, retained, store, mx, backend, release, fused)


def shared_swiglu(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """Sum of the shared experts (dense: every token through every one); w1 [S, 2F, D], w2 [S, D, F]."""
    out = torch.zeros_like(x)
    for s in range(w1.shape[0]):
        out = out + swiglu(x @ w1[s].T) @ w2[s].T
    return out
