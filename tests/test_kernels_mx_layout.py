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


def test_a_scales_are_padded_to_128_row_tiles():
    offs = torch.tensor([3, 3, 200], dtype=torch.int32)
    scale = torch.arange(1, 201, dtype=torch.int32).unsqueeze(1)
    padded = mx_layout.pad_per_tile(scale, offs)
    assert padded.shape == (tile_schedule.padded_rows(200, 3, 128), 1)
    assert padded[:3, 0].tolist() == [1, 2, 3] and padded[128:256, 0].tolist() == list(range(4, 132))
    assert padded[256:325, 0].tolist() == list(range(132, 201))


def test_a_scales_of_cta_pair_kernels_are_padded_to_256_row_tiles():
    offs = torch.tensor([3, 3, 300], dtype=torch.int32)  # an empty group; the last spans two tiles
    scale = torch.arange(1, 301, dtype=torch.int32).unsqueeze(1)
    padded = mx_layout.pad_per_tile(scale, offs, 256)
    assert padded.shape == (tile_schedule.padded_rows(300, 3, 256), 1)
    assert padded[:3, 0].tolist() == [1, 2, 3] and not padded[3:256].any()
    assert padded[256:512, 0].tolist() == list(range(4, 260)) and padded[512:553, 0].tolist() == list(
        range(260, 301)
    )
    with pytest.raises(ValueError, match="tiles of 192 rows"):
        mx_layout.pad_per_tile(scale, offs, 192)
