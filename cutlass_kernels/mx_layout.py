"""E8M0 scale factors in the layout the sm100 block-scaled MMA reads, built with torch on the device.

tcgen05 block-scaled MMA takes its scales from 128-row x 4-column atoms (512 bytes: byte
``16 * (r % 32) + 4 * (r // 32) + c`` of the atom holds row ``r``, scale column ``c``), atoms ordered
K-block fastest, then row block, then group (CUTLASS's ``tile_atom_to_shape_SF`` for 32-element
blocks). A grouped GEMM's A tiles start at arbitrary rows, so the A scales are first re-laid per
tile: tile ``t`` of the kernel's tile order (:mod:`cutlass_kernels.tile_schedule`) gets rows
``[T t, T t + T)`` of a padded matrix (``T``: the kernel's M tile, 128, or 256 on CTA pairs),
computed from ``offs`` with device ops only.
"""

from __future__ import annotations

import torch

from cutlass_kernels import tile_schedule

ATOM_ROWS = 128
ATOM_COLS = 4


def atom_layout(scale: torch.Tensor) -> torch.Tensor:
    """``scale`` [..., R, C] (R % 128 == 0, C % 4 == 0) -> flat bytes in the MMA's atom layout."""
    *lead, rows, cols = scale.shape
    if rows % ATOM_ROWS or cols % ATOM_COLS:
        raise ValueError(f"scale shape {tuple(scale.shape)} needs rows % 128 == 0 and columns % 4 == 0")
    # [..., row block, r // 32, r % 32, K block, c] -> [..., row block, K block, r % 32, r // 32, c]
    blocks = scale.reshape(*lead, rows // ATOM_ROWS, 4, 32, cols // ATOM_COLS, ATOM_COLS)
    n = len(lead)
    order = (*range(n), n, n + 3, n + 2, n + 1, n + 4)
    return blocks.permute(order).contiguous().reshape(-1)


def pad_per_tile(scale: torch.Tensor, offs: torch.Tensor, tile_rows: int = ATOM_ROWS) -> torch.Tensor:
    """A's scale rows moved to their M tiles of ``tile_rows`` (a multiple of 128) rows
    (:func:`tile_schedule.pad_rows_per_tile`)."""
    if tile_rows % ATOM_ROWS:
        raise ValueError(
            f"scale tiles of {tile_rows} rows are not allowed; allowed: multiples of {ATOM_ROWS}"
        )
    return tile_schedule.pad_rows_per_tile(scale, offs, tile_rows)
