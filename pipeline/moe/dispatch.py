"""Dispatch and combine: routed rows from their tokens to the experts' ranks and back.

Split sizes are exchanged first (one all-to-all of per-expert counts), so every rank knows what it
sends and receives; rows then travel sorted by destination and are regrouped by local expert for the
grouped GEMM. With ``fp8`` on the wire, E4M3 payloads and their E8M0 scales travel instead of the
layer dtype, and gradients come back in the layer dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from cutlass_kernels import MXTensor, quantize_mx
from pipeline.moe.comm import AllToAll, Group, all_to_all_rows, exchange_counts
from pipeline.moe.ranges import phase


@dataclass(frozen=True)
class DispatchPlan:
    """Index bookkeeping of one forward: ``order`` sorts this rank's T x K rows by expert; ``perm``
    regroups the received rows (source-major) by local expert (None on one rank, where they already
    are); ``offs`` are the local group ends."""

    order: torch.Tensor
    token_of_row: torch.Tensor
    send_splits: list[int]
    recv_splits: list[int]
    perm: torch.Tensor | None
    perm_inverse: torch.Tensor | None
    offs: torch.Tensor

    @property
    def received_rows(self) -> int:
        return sum(self.recv_splits)

    @classmethod
    def build(cls, topk_idx: torch.Tensor, num_experts: int, group: Group) -> DispatchPlan:
        """The plan of this rank's routing: one count exchange over ``group``, then :meth:`from_counts`."""
        local = num_experts // group.size
        send_counts = torch.bincount(topk_idx.reshape(-1), minlength=num_experts).view(group.size, local)
        recv_counts = exchange_counts(send_counts, group)
        return cls.from_counts(topk_idx, send_counts, recv_counts, regroup=group.exchanges)

    @classmethod
    def from_counts(
        cls,
        topk_idx: torch.Tensor,
        send_counts: torch.Tensor,
        recv_counts: torch.Tensor,
        regroup: bool | None = None,
    ) -> DispatchPlan:
        """The plan from this rank's routing, its row counts per (destination, local expert)
        ``send_counts`` [W, E/W] and what each source sends to each of its local experts
        ``recv_counts`` [W, E/W] (the count exchange's result); ``regroup`` (default: more than one
        rank) whether received rows are regrouped by a permutation. Host-synchronizing: the splits
        become Python lists."""
        flat = topk_idx.reshape(-1)
        order = torch.sort(flat, stable=True).indices
        ranks, local = recv_counts.shape
        recv_splits = recv_counts.sum(1).tolist()
        perm = perm_inverse = None
        if regroup is None:
            regroup = ranks > 1
        if regroup:
            expert_of_row = torch.repeat_interleave(
                torch.arange(local, device=flat.device).repeat(ranks),
                recv_counts.reshape(-1),
                output_size=sum(recv_splits),
            )
            perm = torch.sort(expert_of_row, stable=True).indices
            perm_inverse = torch.argsort(perm)
        return cls(
            order=order,
            token_of_row=order // topk_idx.shape[1],
            send_splits=send_counts.sum(1).tolist(),
            recv_splits=recv_splits,
            perm=perm,
            perm_inverse=perm_inverse,
            offs=torch.cumsum(recv_counts.sum(0), 0).to(torch.int32),
        )

    def to(self, device: torch.device) -> DispatchPlan:
        """The same plan with its index tensors on ``device``."""

        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t.to(device)

        return replace(
            self,
            order=self.order.to(device),
            token_of_row=self.token_of_row.to(device),
            perm=move(self.perm),
            perm_inverse=move(self.perm_inverse),
            offs=self.offs.to(device),
        )


def _take(rows: torch.Tensor, index: torch.Tensor | None) -> torch.Tensor:
    return rows if index is None else rows.index_select(0, index)


class _DispatchFP8(torch.autograd.Function):
    """Rows leave as MXFP8 (scales selected by ``mode``) and arrive dequantized, beside the E4M3 data
    and E8M0 scales that travelled (no gradient); gradients return unquantized."""

    @staticmethod
    def forward(
        ctx, x: torch.Tensor, plan: DispatchPlan, group: Group, scratch: torch.Tensor | None, mode: str
    ):
        with phase("quantize"):
            q = quantize_mx(x, mode)
        data_into, scale_into = _split_scratch(scratch, plan.received_rows * q.data.shape[1])
        with phase("permute"):
            data_rows, scale_rows = q.data[plan.token_of_row], q.scale[plan.token_of_row]
        sends = (plan.send_splits, plan.recv_splits, group)
        data = all_to_all_rows(data_rows, *sends, data_into, name="dispatch")
        scale = all_to_all_rows(scale_rows, *sends, scale_into, name="dispatch")
        received = MXTensor(data, scale)
        if plan.perm is not None:
            with phase("permute"):
                received = received.index_rows(plan.perm)
        ctx.mark_non_differentiable(received.data, received.scale)
        ctx.plan, ctx.group, ctx.tokens = plan, group, x.shape[0]
        with phase("quantize"):
            values = received.dequantize(x.dtype)
        return values, received.data, received.scale

    @staticmethod
    def backward(ctx, grad: torch.Tensor, _data: None, _scale: None):
        plan = ctx.plan
        with phase("permute"):
            grad = _take(grad, plan.perm_inverse)
        back = all_to_all_rows(grad, plan.recv_splits, plan.send_splits, ctx.group, name="dispatch")
        with phase("permute"):
            dx = torch.zeros(ctx.tokens, grad.shape[1], dtype=grad.dtype, device=grad.device)
            dx.index_add_(0, plan.token_of_row, back)
        return dx, None, None, None, None


def _split_scratch(
    scratch: torch.Tensor | None, data_bytes: int
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The receive scratch as two regions: E4M3 payloads first, their E8M0 scales after them."""
    if scratch is None or scratch.numel() < data_bytes:
        return None, None
    return scratch[:data_bytes], scratch[data_bytes:]


def dispatch(
    x: torch.Tensor,
    plan: DispatchPlan,
    group: Group,
    fp8: str | None,
    scratch: torch.Tensor | None = None,
) -> tuple[torch.Tensor, MXTensor | None]:
    """Rows of ``x`` [T, D] for every (token, expert) pair, on the experts' ranks, grouped by local
    expert. Returns the rows in the layer dtype and, when ``fp8`` names the implementation's MX scale
    mode (rows travel as MXFP8), the MX tensor that travelled. ``scratch`` (flat uint8) is the receive
    buffer the rows arrive in when they fit (Dist-MoE)."""
    if fp8 is not None:
        rows, data, scale = _DispatchFP8.apply(x, plan, group, scratch, fp8)
        return rows, MXTensor(data, scale)
    with phase("permute"):
        rows = x.index_select(0, plan.token_of_row)
    if not group.exchanges:
        return rows, None
    rows = AllToAll.apply(rows, plan.send_splits, plan.recv_splits, group, scratch, "dispatch")
    with phase("permute"):
        return _take(rows, plan.perm), None


def combine(
    y: torch.Tensor, weight: torch.Tensor, plan: DispatchPlan, group: Group, tokens: int
) -> torch.Tensor:
    """Expert outputs (grouped by local expert) back to their tokens' ranks, each scaled by its routing
    weight and summed per token (float32 accumulation): [T, D] in float32."""
    if not group.exchanges:
        back = y
    else:
        with phase("permute"):
            y = _take(y, plan.perm_inverse)
        back = AllToAll.apply(y, plan.recv_splits, plan.send_splits, group, None, "combine")
    with phase("permute"):  # the weighted scatter-add to the tokens
        scaled = back.float() * weight.reshape(-1)[plan.order].unsqueeze(-1)
        return scaled.new_zeros(tokens, y.shape[1]).index_add(0, plan.token_of_row, scaled)
