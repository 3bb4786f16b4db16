"""Group-aware tile order of the contiguous M-grouped GEMMs, shared by the kernels and their tests.

Output tiles are numbered group by group: group ``g`` owns ``ceil(size_g / tile_m) * n_tiles``
consecutive tile indices, M tiles fastest (CTAs running side by side share one B tile through L2).
A persistent CTA walks indices ``cta, cta + grid, ...`` and finds each one's group by advancing a
cursor over the per-group prefix of M-tile counts, which the kernel builds on the device from
``offs``: routing never reaches the host. The arithmetic below is written once and runs both on
Python ints (tests) and on the DSL's device integers (kernels).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def m_tiles(rows: Any, tile_m: int) -> Any:
    """M tiles of a group of ``rows >= 0`` rows."""
    return (rows + (tile_m - 1)) // tile_m


def decode(local: Any, group_m_tiles: Any) -> tuple[Any, Any]:
    """(M tile within the group, N tile) of the ``local``-th tile of a group."""
    return local % group_m_tiles, local // group_m_tiles


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
