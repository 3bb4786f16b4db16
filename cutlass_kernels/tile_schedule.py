"""Group-aware tile order of the contiguous M-grouped GEMMs, shared by the kernels and their tests.

Output tiles are numbered group by group: group ``g`` owns ``ceil(size_g / tile_m) * n_tiles``
consecutive tile indices, M tiles fastest (CTAs running side by side share one B tile through L2).
A persistent CTA walks indices ``cta, cta + grid, ...`` and finds each one's group by advancing a
cursor over the per-group prefix of M-tile counts, which the kernel builds on the device from
``offs``: routing never reaches the host. The arithmetic below is written once and runs both on
Python ints (tests) and on the DSL's device integers (kernels). :func:`pad_rows_per_tile` is the
same order applied to tensors with torch on the device (wgrad operands, MX scales).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch


def m_tiles(rows: Any, tile_m: int) -> Any:
    """M tiles of a group of ``rows >= 0`` rows."""
    return (rows + (tile_m - 1)) // tile_m


def decode(local: Any, group_m_tiles: Any) -> tuple[Any, Any]:
    """(M tile within the group, N tile) of the ``local``-th tile of a group."""
    return local % group_m_tiles, local // group_m_tiles


def decode_k_grouped(tile: Any, tiles_m: Any, tiles_n: Any) -> tuple[Any, Any, Any]:
    """(group, M tile, N tile) of linear ``tile`` when every group owns a whole ``tiles_m x tiles_n``
    output grid (wgrad): group-major, M tiles fastest."""
    per_group = tiles_m * tiles_n
    group = tile // per_group
    m_local, n_tile = decode(tile - group * per_group, tiles_m)
    return group, m_local, n_tile


def cluster_rows(
    pair_row: Any, end: Any, rank: Any, tile_m: int, minimum: Any = min, maximum: Any = max
) -> tuple[Any, Any]:
    """(first row, row end) of CTA ``rank`` (0 or 1) of a 2x1 cluster whose walk, in ``2 * tile_m``
    row pairs, put it at ``pair_row`` of a group ending at row ``end``. With rows for both M tiles
    each CTA takes one; with rows for one tile only, each takes one ``tile_m / 2``-row half of it, so
    that no CTA idles a whole tile beside its partner (a half without rows has first row >= end).
    ``minimum`` / ``maximum``: ``min`` / ``max`` on Python ints, the DSL's on device integers."""
    both = minimum(1, maximum(0, end - pair_row - tile_m))  # 1: rows past the first tile
    step = (tile_m // 2) * (1 + both)
    row = pair_row + rank * step
    return row, minimum(end, row + step)


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


def cta_tiles(
    offs: list[int], tile_m: int, n_tiles: int, cta: int, grid: int
) -> Iterator[tuple[int, int, int, int]]:
    """The tiles one CTA computes, as (group, first row, row end, N tile), in the kernel's order."""
    prefix = m_tile_prefix(offs, tile_m)
    total = prefix[-1] * n_tiles
    group = 0
    tile = cta
    while tile < total:
        while prefix[group + 1] * n_tiles <= tile:
            group += 1
        m_local, n_tile = decode(tile - prefix[group] * n_tiles, prefix[group + 1] - prefix[group])
        start = offs[group - 1] if group > 0 else 0
        yield group, start + m_local * tile_m, offs[group], n_tile
        tile += grid


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
