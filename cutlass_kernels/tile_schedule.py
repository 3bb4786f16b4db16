"""The group-aware tile walk of the grouped GEMMs, written once: the kernels trace it, the tests run
it on Python ints, and both run the same lines.

Output tiles are numbered group by group: group ``g`` owns ``ceil(size_g / tile_m) * n_tiles``
consecutive tile indices, M tiles fastest (CTAs running side by side share one B tile through L2).
A persistent CTA walks indices ``cta, cta + grid, ...`` and finds each one's group by advancing a
cursor over the per-group prefix of M-tile counts, which the kernel builds on the device from
``offs``: routing never reaches the host. K-grouped (wgrad) launches give every group a whole output
grid instead, reducing over the group's own row chunks.

The walk's functions take an :class:`Arithmetic`: :data:`HOST` (Python's ``int``, ``min``, ``max``;
tests, :func:`walk`) or the DSL's (``cute_base.DEVICE``), with which ``cute_base`` wraps them in
``cute.jit`` so that their loops and branches become device control flow. So they hold only what
the DSL can trace: arithmetic, comparisons, indexing, ``while`` / ``if`` on device values, and
``ops.const_expr`` for trace-time choices. :func:`pad_rows_per_tile` is the same order applied to
tensors with torch on the device (wgrad operands, MX scales).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

WGRAD_CHUNK = 64  # rows per reduction step of the K-grouped (wgrad) kernels: their BF16 K tile


class Arithmetic(NamedTuple):
    """What the walk needs beyond operators: an int32 constructor, ``min``, ``max`` and the trace-time
    test (``const_expr``: the DSL's, which the tracer recognizes by name)."""

    int32: Callable[[Any], Any]
    min: Callable[[Any, Any], Any]
    max: Callable[[Any, Any], Any]
    const_expr: Callable[[Any], Any]


HOST = Arithmetic(int, min, max, bool)


class _Traced:
    """``@traced.jit`` marks the functions of this module that the kernels trace. It is the identity:
    the DSL's preprocessor rewrites only a function whose source carries a decorator named ``jit``, so
    this mark lets ``cute_base`` hand the DSL a copy of each to rewrite while the function itself
    stays plain Python."""

    @staticmethod
    def jit(fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn


traced = _Traced()


@dataclass(frozen=True)
class GroupedProblem:
    """Trace-time description of one launch, shared by the warps that walk its tiles.

    M-grouped (fprop / dgrad / MX): A's rows are grouped, every tile reduces over all of K, and the
    tile order is group-major over the M-tile ``prefix``. K-grouped (wgrad): every group owns a whole
    output tile grid and reduces over its own ``chunk``-row slices ``prefix[g] .. prefix[g + 1]`` of
    the zero-padded operands.
    """

    k_grouped: bool
    tile_m: int
    tile_n: int
    chunk: int  # rows per reduction step of the K-grouped form (the kernel's K tile)
    band: int = 0  # K-grouped: M tiles per band of the order (:func:`decode_k_grouped`); 0: no bands

    def __post_init__(self) -> None:
        if self.k_grouped and self.chunk != WGRAD_CHUNK:
            raise ValueError(
                f"K-grouped kernels reduce over {WGRAD_CHUNK}-row chunks, this one over {self.chunk}"
            )
        if self.band < 0 or (self.band and not self.k_grouped):
            raise ValueError(f"band={self.band} is not allowed; allowed: 0, or > 0 for K-grouped walks")

    @property
    def prefix_unit(self) -> int:
        """Rows per prefix count: M tiles, or reduction chunks when K-grouped."""
        return self.chunk if self.k_grouped else self.tile_m


class WalkShape(NamedTuple):
    """The launch's extents in tiles: ``tiles_m`` M tiles per group (K-grouped only), ``tiles_n`` N
    tiles, ``k_tiles`` K tiles of an M-grouped tile, and ``rows_out``: C's row count, or each group's
    output rows when K-grouped."""

    tiles_m: Any
    tiles_n: Any
    k_tiles: Any
    rows_out: Any


class TileWork(NamedTuple):
    """What one linear tile computes."""

    group: Any
    a_row: Any  # A's first row (K-grouped: the tile's first row of dY^T)
    n_tile: Any
    k_begin: Any  # first and end K tile (K-grouped: the group's reduction chunks)
    k_end: Any
    row: Any  # C's first row and row end (the group's end, or C's)
    row_end: Any
    m_tile: Any  # M tile index over all groups (where MX scales are padded per tile)


def m_tiles(rows: Any, tile_m: int) -> Any:
    """M tiles of a group of ``rows >= 0`` rows."""
    return (rows + (tile_m - 1)) // tile_m


def decode(local: Any, group_m_tiles: Any) -> tuple[Any, Any]:
    """(M tile within the group, N tile) of the ``local``-th tile of a group."""
    return local % group_m_tiles, local // group_m_tiles


def decode_k_grouped(
    tile: Any, tiles_m: Any, tiles_n: Any, band: int = 0, ops: Arithmetic = HOST
) -> tuple[Any, Any, Any]:
    """(group, M tile, N tile) of linear ``tile`` when every group owns a whole ``tiles_m x tiles_n``
    output grid (wgrad): group-major, M tiles fastest. With ``band`` (a trace-time int), a group's
    grid is walked in bands of ``band`` M tiles (the last one narrower), each band N tile by N tile,
    its M tiles fastest: the tiles running at once then read a few A and B slabs each
    (``band`` x ``ceil(CTAs / band)``) instead of every A slab of the group, and the slabs stay in L2."""
    per_group = tiles_m * tiles_n
    group = tile // per_group
    local = tile - group * per_group
    if band:
        full = band * tiles_n  # tiles of a whole band
        first = (local // full) * band  # the band's first M tile
        width = ops.min(band, tiles_m - first)
        rest = local - (first // band) * full
        m_local, n_tile = first + rest % width, rest // width
    else:
        m_local, n_tile = decode(local, tiles_m)
    return group, m_local, n_tile


def cluster_rows(pair_row: Any, end: Any, rank: Any, tile_m: int, ops: Arithmetic = HOST) -> tuple[Any, Any]:
    """(first row, row end) of CTA ``rank`` (0 or 1) of a 2x1 cluster whose walk, in ``2 * tile_m``
    row pairs, put it at ``pair_row`` of a group ending at row ``end``. With rows for both M tiles
    each CTA takes one; with rows for one tile only, each takes one ``tile_m / 2``-row half of it, so
    that no CTA idles a whole tile beside its partner (a half without rows has first row >= end)."""
    both = ops.min(1, ops.max(0, end - pair_row - tile_m))  # 1: rows past the first tile
    step = (tile_m // 2) * (1 + both)
    row = pair_row + rank * step
    return row, ops.min(end, row + step)


def half_has_rows(rows_left: Any, half: Any, half_m: int) -> Any:
    """Whether the ``half``-th ``half_m``-row slice of a tile with ``rows_left`` rows in its group
    holds any of them (a consumer warpgroup whose slice holds none skips its MMA)."""
    return half * half_m < rows_left


def m_tile_prefix(offs: list[int], tile_m: int) -> list[int]:
    """Cumulative M-tile counts, ``[0, t_0, t_0 + t_1, ...]`` (what the kernel keeps in shared memory)."""
    prefix = [0]
    start = 0
    for end in offs:
        prefix.append(prefix[-1] + m_tiles(max(end - start, 0), tile_m))
        start = end
    return prefix


@traced.jit
def total_tiles(
    problem: GroupedProblem, prefix: Any, groups: Any, tiles_m: Any, tiles_n: Any, ops: Arithmetic
):
    """Output tiles of the launch (``tiles_m``: M tiles per group, K-grouped only)."""
    total = prefix[groups] * tiles_n
    if ops.const_expr(problem.k_grouped):
        total = groups * tiles_m * tiles_n
    return total


@traced.jit
def tile_work(
    problem: GroupedProblem, prefix: Any, offs: Any, group: Any, tile: Any, shape: WalkShape, ops: Arithmetic
) -> TileWork:
    """What linear ``tile`` computes. ``group`` is the previous tile's (M-grouped walks go forward
    from it: tiles only increase)."""
    if ops.const_expr(problem.k_grouped):
        group, m_local, n_tile = decode_k_grouped(tile, shape.tiles_m, shape.tiles_n, problem.band, ops)
        a_row = m_local * problem.tile_m
        work = TileWork(
            group,
            a_row,
            n_tile,
            prefix[group],
            prefix[group + 1],
            group * shape.rows_out + a_row,
            (group + 1) * shape.rows_out,
            m_local,
        )
    else:
        while prefix[group + 1] * shape.tiles_n <= tile:
            group = group + 1
        first = prefix[group]
        m_local, n_tile = decode(tile - first * shape.tiles_n, prefix[group + 1] - first)
        row = m_local * problem.tile_m
        if group > 0:
            row = row + offs[group - 1]
        end = ops.min(offs[group], shape.rows_out)
        work = TileWork(group, row, n_tile, ops.int32(0), shape.k_tiles, row, end, first + m_local)
    return work


def walk(
    problem: GroupedProblem, offs: Sequence[int], shape: WalkShape, walker: int, walkers: int
) -> Iterator[TileWork]:
    """The tiles walker ``walker`` of ``walkers`` (a CTA, or a cluster) computes, in the kernels'
    order, on Python ints: the loop every role of a kernel runs over :func:`tile_work`."""
    prefix = m_tile_prefix(list(offs), problem.prefix_unit)
    total = total_tiles(problem, prefix, len(offs), shape.tiles_m, shape.tiles_n, HOST)
    group, tile = 0, walker
    while tile < total:
        work = tile_work(problem, prefix, offs, group, tile, shape, HOST)
        yield work
        group, tile = work.group, tile + walkers


def padded_rows(rows: int, groups: int, tile_rows: int) -> int:
    """Rows of a per-tile padded copy: enough for every routing of ``rows`` rows over ``groups``."""
    return -(-(rows + groups * (tile_rows - 1)) // tile_rows) * tile_rows


def pad_rows_per_tile(x: torch.Tensor, offs: torch.Tensor, tile_rows: int) -> torch.Tensor:
    """Row ``i`` of ``x``, local row ``l`` of its group ``g``, moves to row
    ``tile_rows * (tiles of groups before g + l // tile_rows) + l % tile_rows``; rows no tile owns are
    zero. Device ops only: no host sync."""
    rows = x.shape[0]
    ends = offs.to(torch.int64)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    tiles = (ends - starts).clamp_min(0).add(tile_rows - 1).div(tile_rows, rounding_mode="floor")
    tiles_before = tiles.cumsum(0) - tiles
    row = torch.arange(rows, device=x.device)
    group = torch.searchsorted(ends, row, right=True).clamp_max(ends.shape[0] - 1)
    local = row - starts[group]
    dest = (tiles_before[group] + local.div(tile_rows, rounding_mode="floor")) * tile_rows + local % tile_rows
    padded = padded_rows(rows, ends.shape[0], tile_rows)
    dest = torch.where(row < ends[-1], dest, padded)  # rows past offs[-1]: one discarded row
    out = x.new_zeros(padded + 1, *x.shape[1:])
    out[dest] = x
    return out[:padded]
