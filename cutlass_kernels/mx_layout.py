"""E8M0 scale factors in the layout the sm100 block-scaled MMA reads, built with torch on the device.

tcgen05 block-scaled MMA takes its scales from 128-row x 4-column atoms (512 bytes: byte
``16 * (r % 32) + 4 * (r // 32) + c`` of the atom holds row ``r``, scale column ``c``), atoms ordered
K-block fastest, then row block, then group (CUTLASS's ``tile_atom_to_shape_SF`` for 32-element
blocks). A grouped GEMM's A tiles start at arbitrary rows, so the A scales are first re-laid per
tile: tile ``t`` of the kernel's tile order (:mod:`cutlass_kernels.tile_schedule`) gets rows
``[128 t, 128 t + 128)`` of a padded matrix, computed from ``offs`` with device ops only.
"""

from __future__ import annotations

import torch

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


def padded_rows(rows: int, groups: int) -> int:
    """Rows of the per-tile padded scale matrix: enough for every routing of ``rows`` rows."""
    return -(-(rows + groups * (ATOM_ROWS - 1)) // ATOM_ROWS) * ATOM_ROWS


def pad_per_tile(scale: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """Row ``i`` of ``scale`` [M, C], local row ``l`` of its group ``g``, moves to row
    ``128 * (tiles before g + l // 128) + l % 128``; rows no tile owns stay zero. No host sync."""
    rows = scale.shape[0]
    ends = offs.to(torch.int64)
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    tiles = (ends - starts).clamp_min(0).add(ATOM_ROWS - 1).div(ATOM_ROWS, rounding_mode="floor")
    tiles_before = tiles.cumsum(0) - tiles
    row = torch.arange(rows, device=scale.device)
    group = torch.searchsorted(ends, row, right=True).clamp_max(ends.shape[0] - 1)
    local = row - starts[group]
    dest = (tiles_before[group] + local.div(ATOM_ROWS, rounding_mode="floor")) * ATOM_ROWS + local % ATOM_ROWS
    padded = padded_rows(rows, ends.shape[0])
    dest = torch.where(row < ends[-1], dest, padded)  # rows past offs[-1]: one discarded row
    out = scale.new_zeros(padded + 1, scale.shape[1])
    out[dest] = scale
    return out[:padded]
