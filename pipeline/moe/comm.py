"""Expert-parallel all-to-all over a torch.distributed group, with uneven splits and autograd.

Rows travel as raw bytes (each row viewed as uint8), so any dtype — BF16, float32, E4M3 payloads and
E8M0 scales — goes over gloo and NCCL alike. A group of one rank (or no initialized group) is a local
copy with no collective, unless it is a *loopback* (:meth:`Group.loopback_of`): one rank that still
calls every collective of the exchange, to itself, so that one GPU runs NCCL's count exchange and
row all-to-alls (inside a captured CUDA graph too) as a cluster's ranks do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from pipeline.moe.ranges import phase


@dataclass(frozen=True)
class Group:
    """A process group (None = the default group) with its size and this process's rank; a
    ``loopback`` group of one rank calls the collectives all the same."""

    handle: dist.ProcessGroup | None
    size: int
    rank: int
    loopback: bool = False

    @property
    def exchanges(self) -> bool:
        """Whether rows and counts go through the collectives (more than one rank, or a loopback)."""
        return self.size > 1 or self.loopback

    @classmethod
    def resolve(cls, group: dist.ProcessGroup | Group | None) -> Group:
        if isinstance(group, Group):
            return group
        if not (dist.is_available() and dist.is_initialized()):
            if group is not None:
                raise ValueError("a process group was given but torch.distributed is not initialized")
            return cls(None, 1, 0)
        return cls(group, dist.get_world_size(group), dist.get_rank(group))

    @classmethod
    def loopback_of(cls, group: dist.ProcessGroup | None = None) -> Group:
        """The one-rank ``group`` (None: the default one) as a loopback; a ValueError for more ranks."""
        if not (dist.is_available() and dist.is_initialized()):
            raise ValueError(
                "a loopback needs a process group of one rank; torch.distributed is not initialized"
            )
        size = dist.get_world_size(group)
        if size != 1:
            raise ValueError(f"a loopback is a process group of one rank; this one has {size}")
        return cls(group, 1, 0, loopback=True)


def exchange_counts(send_counts: torch.Tensor, group: Group) -> torch.Tensor:
    """send_counts [W, n] (rows for each destination's n slots) -> what every source sends me, [W, n]."""
    if not group.exchanges:
        return send_counts.clone()
    recv = torch.empty_like(send_counts)
    dist.all_to_all_single(recv, send_counts.contiguous(), group=group.handle)
    return recv


def all_to_all_rows(
    rows: torch.Tensor,
    send_splits: list[int],
    recv_splits: list[int],
    group: Group,
    into: torch.Tensor | None = None,
    *,
    name: str,
) -> torch.Tensor:
    """Send ``rows`` [N, ...] in ``send_splits`` chunks to the ranks; receive ``recv_splits`` chunks,
    into the front of the flat uint8 buffer ``into`` when it is large enough (else a new tensor): the
    communication of layer phase ``name`` (``dispatch`` or ``combine``). A single rank keeps its rows
    (no copy, no communication); a loopback sends them to itself."""
    if not group.exchanges:
        return rows
    with phase(name):
        return _all_to_all(rows, send_splits, recv_splits, group, into)


def _all_to_all(
    rows: torch.Tensor,
    send_splits: list[int],
    recv_splits: list[int],
    group: Group,
    into: torch.Tensor | None,
) -> torch.Tensor:
    rows = rows.contiguous()
    wire = rows.view(rows.shape[0], math.prod(rows.shape[1:])).view(torch.uint8)
    size = sum(recv_splits) * wire.shape[1]
    if into is not None and into.numel() >= size:
        out = into[:size].view(sum(recv_splits), wire.shape[1])
    else:
        out = wire.new_empty(sum(recv_splits), wire.shape[1])
    dist.all_to_all_single(out, wire, recv_splits, send_splits, group=group.handle)
    return out.view(rows.dtype).view(out.shape[0], *rows.shape[1:])


class AllToAll(torch.autograd.Function):
    """Differentiable all-to-all: the backward sends gradients back along the reversed splits; both
    directions are the communication of the layer phase ``name`` (``dispatch`` or ``combine``)."""

    @staticmethod
    def forward(
        ctx,
        rows: torch.Tensor,
        send_splits: list[int],
        recv_splits: list[int],
        group: Group,
        into: torch.Tensor | None,
        name: str,
    ):
        ctx.splits, ctx.group, ctx.name = (send_splits, recv_splits), group, name
        return all_to_all_rows(rows, send_splits, recv_splits, group, into, name=name)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        send_splits, recv_splits = ctx.splits
        back = all_to_all_rows(grad, recv_splits, send_splits, ctx.group, name=ctx.name)
        return back, None, None, None, None, None
