"""The kernels' group-aware tile order against a naive enumeration of every group's output tiles."""

from __future__ import annotations

import random

import pytest
import torch

from cutlass_kernels import tile_schedule


def _naive_tiles(sizes: list[int], tile_m: int, n_tiles: int) -> set[tuple[int, int, int, int]]:
    tiles, start = set(), 0
    for g, size in enumerate(sizes):
        for row in range(start, start + size, tile_m):
            for n in range(n_tiles):
                tiles.add((g, row, start + size, n))
        start += size
    return tiles


def _offs(sizes: list[int]) -> list[int]:
    ends, total = [], 0
    for s in sizes:
        total += s
        ends.append(total)
    return ends


@pytest.mark.parametrize("seed", range(8))
def test_ctas_cover_every_tile_once(seed: int):
    rng = random.Random(seed)
    groups = rng.randint(1, 70)
    sizes = [rng.choice([0, 0, 1, 127, 128, 129, rng.randint(0, 600)]) for _ in range(groups)]
    tile_m, n_tiles, grid = 128, rng.randint(1, 5), rng.randint(1, 40)

    seen = [
        t for cta in range(grid) for t in tile_schedule.cta_tiles(_offs(sizes), tile_m, n_tiles, cta, grid)
    ]

    assert len(seen) == len(set(seen))
    assert set(seen) == _naive_tiles(sizes, tile_m, n_tiles)
    for g, row, end, _ in seen:
        assert sizes[g] > 0 and row < end


def test_ctas_of_one_wave_share_the_group_n_tile():
    # group-major, M tiles fastest: the first CTAs take consecutive M tiles of one (group, N tile)
    offs = _offs([512, 256])
    first = [next(tile_schedule.cta_tiles(offs, 128, 3, cta, 4)) for cta in range(4)]
    assert first == [(0, 0, 512, 0), (0, 128, 512, 0), (0, 256, 512, 0), (0, 384, 512, 0)]


def test_prefix_counts_m_tiles_and_ignores_negative_sizes():
    assert tile_schedule.m_tile_prefix([0, 1, 129, 129, 100], 128) == [0, 0, 1, 2, 2, 2]


def test_empty_problem_has_no_tiles():
    assert list(tile_schedule.cta_tiles([0, 0, 0], 128, 4, 0, 1)) == []


@pytest.mark.parametrize("tile_rows", [64, 128])
@pytest.mark.parametrize("sizes", [[0, 1, 127, 128, 129, 0, 300], [5], [0, 0, 40], [200, 0]])
def test_pad_rows_per_tile_puts_each_tile_at_its_prefix_index(sizes: list[int], tile_rows: int):
    rows = sum(sizes) + 3  # three rows past offs[-1], owned by no group
    x = torch.arange(rows * 4, dtype=torch.int32).reshape(rows, 4) + 1
    offs = torch.tensor(sizes).cumsum(0).to(torch.int32)

    padded = tile_schedule.pad_rows_per_tile(x, offs, tile_rows)

    assert padded.shape == (tile_schedule.padded_rows(rows, len(sizes), tile_rows), 4)
    prefix = tile_schedule.m_tile_prefix(offs.tolist(), tile_rows)
    expected = torch.zeros_like(padded)
    start = 0
    for g, size in enumerate(sizes):
        for local in range(size):
            expected[(prefix[g] + local // tile_rows) * tile_rows + local % tile_rows] = x[start + local]
        start += size
    torch.testing.assert_close(padded, expected)


def test_k_grouped_order_covers_every_group_grid_once():
    groups, tiles_m, tiles_n = 5, 3, 4
    seen = [tile_schedule.decode_k_grouped(t, tiles_m, tiles_n) for t in range(groups * tiles_m * tiles_n)]
    assert sorted(seen) == [(g, m, n) for g in range(groups) for m in range(tiles_m) for n in range(tiles_n)]
    assert seen[:4] == [(0, 0, 0), (0, 1, 0), (0, 2, 0), (0, 0, 1)]
