"""The sm100 scale-factor layouts against naive per-element placement."""

from __future__ import annotations

import pytest
import torch

from cutlass_kernels import mx_layout, tile_schedule


def test_atom_layout_matches_the_mma_atom_formula():
    gen = torch.Generator().manual_seed(0)
    groups, rows, cols = 2, 256, 8
    scale = torch.randint(0, 255, (groups, rows, cols), generator=gen, dtype=torch.uint8)
    flat = mx_layout.atom_layout(scale)
    col_blocks, atom = cols // 4, 512
    for g in range(groups):
        for r in range(rows):
            for c in range(cols):
                block = (g * (rows // 128) + r // 128) * col_blocks + c // 4
                within = 16 * (r % 128 % 32) + 4 * (r % 128 // 32) + c % 4
                assert flat[block * atom + within] == scale[g, r, c]


def test_atom_layout_rejects_partial_atoms():
    with pytest.raises(ValueError, match="rows % 128"):
        mx_layout.atom_layout(torch.zeros(100, 4, dtype=torch.uint8))


@pytest.mark.parametrize("sizes", [[0, 1, 127, 128, 129, 0, 300], [5], [0, 0, 40], [200, 0]])
def test_pad_per_tile_puts_each_tile_at_its_schedule_index(sizes: list[int]):
    rows = sum(sizes) + 3  # three rows past offs[-1], owned by no group
    scale = torch.arange(rows * 4, dtype=torch.int32).reshape(rows, 4) + 1
    offs = torch.tensor(sizes).cumsum(0).to(torch.int32)

    padded = mx_layout.pad_per_tile(scale, offs)

    assert padded.shape == (mx_layout.padded_rows(rows, len(sizes)), 4)
    prefix = tile_schedule.m_tile_prefix(offs.tolist(), 128)
    expected = torch.zeros_like(padded)
    start = 0
    for g, size in enumerate(sizes):
        for local in range(size):
            expected[(prefix[g] + local // 128) * 128 + local % 128] = scale[start + local]
        start += size
    torch.testing.assert_close(padded, expected)
