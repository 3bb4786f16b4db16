"""The kernels' group-aware tile walk (``tile_schedule.tile_work``, the function the kernels trace, run
here on Python ints) against a naive enumeration of every group's output tiles."""

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


TAIL = 5  # rows of C past offs[-1]: no group owns them


def cta_tiles(offs: list[int], tile_m: int, n_tiles: int, cta: int, grid: int, k_tiles: int = 7):
    """(group, first row, row end, N tile) of every tile CTA ``cta`` of ``grid`` computes in an
    M-grouped launch, walked as the kernels walk it; checks what else each tile says."""
    problem = tile_schedule.GroupedProblem(False, tile_m, 256, 64)
    shape = tile_schedule.WalkShape(0, n_tiles, k_tiles, (offs[-1] if offs else 0) + TAIL)
    prefix = tile_schedule.m_tile_prefix(offs, tile_m)
    for w in tile_schedule.walk(problem, offs, shape, cta, grid):
        start = offs[w.group - 1] if w.group else 0
        assert (w.a_row, w.k_begin, w.k_end) == (w.row, 0, k_tiles)
        assert w.m_tile == prefix[w.group] + (w.row - start) // tile_m  # where MX scales are padded
        yield w.group, w.row, w.row_end, w.n_tile


@pytest.mark.parametrize("seed", range(8))
def test_ctas_cover_every_tile_once(seed: int):
    rng = random.Random(seed)
    groups = rng.randint(1, 70)
    sizes = [rng.choice([0, 0, 1, 127, 128, 129, rng.randint(0, 600)]) for _ in range(groups)]
    tile_m, n_tiles, grid = 128, rng.randint(1, 5), rng.randint(1, 40)

    seen = [t for cta in range(grid) for t in cta_tiles(_offs(sizes), tile_m, n_tiles, cta, grid)]

    assert len(seen) == len(set(seen))
    assert set(seen) == _naive_tiles(sizes, tile_m, n_tiles)
    for g, row, end, _ in seen:
        assert sizes[g] > 0 and row < end


def test_ctas_of_one_wave_share_the_group_n_tile():
    # group-major, M tiles fastest: the first CTAs take consecutive M tiles of one (group, N tile)
    offs = _offs([512, 256])
    first = [next(cta_tiles(offs, 128, 3, cta, 4)) for cta in range(4)]
    assert first == [(0, 0, 512, 0), (0, 128, 512, 0), (0, 256, 512, 0), (0, 384, 512, 0)]


def test_prefix_counts_m_tiles_and_ignores_negative_sizes():
    assert tile_schedule.m_tile_prefix([0, 1, 129, 129, 100], 128) == [0, 0, 1, 2, 2, 2]


def test_empty_problem_has_no_tiles():
    assert list(cta_tiles([0, 0, 0], 128, 4, 0, 1)) == []


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


@pytest.mark.parametrize("grid", [1, 4, 7])
def test_k_grouped_walk_covers_every_group_grid_once_over_its_own_chunks(grid: int):
    sizes, rows_out, tiles_n = [70, 0, 64, 129, 1], 300, 4  # rows_out: dW rows per group (N)
    tiles_m = tile_schedule.m_tiles(rows_out, 128)
    problem = tile_schedule.GroupedProblem(True, 128, 256, tile_schedule.WGRAD_CHUNK)
    shape = tile_schedule.WalkShape(tiles_m, tiles_n, 0, rows_out)
    chunks = tile_schedule.m_tile_prefix(_offs(sizes), tile_schedule.WGRAD_CHUNK)
    assert chunks == [0, 2, 2, 3, 6, 7]
    seen = []
    for cta in range(grid):
        for w in tile_schedule.walk(problem, _offs(sizes), shape, cta, grid):
            m = w.a_row // 128
            assert (w.k_begin, w.k_end) == (chunks[w.group], chunks[w.group + 1])
            assert (w.row, w.row_end, w.m_tile) == (w.group * rows_out + w.a_row, (w.group + 1) * rows_out, m)
            seen.append((w.group, m, w.n_tile))
    assert sorted(seen) == [
        (g, m, n) for g in range(len(sizes)) for m in range(tiles_m) for n in range(tiles_n)
    ]
    first = [
        (w.group, w.a_row // 128, w.n_tile) for w in tile_schedule.walk(problem, _offs(sizes), shape, 0, 1)
    ]
    assert first[:4] == [(0, 0, 0), (0, 1, 0), (0, 2, 0), (0, 0, 1)]  # group-major, M tiles fastest


def test_the_kernels_trace_these_very_functions_and_leave_them_plain():
    pytest.importorskip("cutlass")
    from cutlass_kernels import cute_base

    for traced, plain in (
        (cute_base._tile_work, tile_schedule.tile_work),
        (cute_base._total_tiles, tile_schedule.total_tiles),
    ):
        copy = traced.__wrapped__  # what the DSL rewrites and traces
        assert copy is not plain and copy.__qualname__ == plain.__qualname__
        # the very code object (the DSL keeps it as _original_code once it has rewritten the copy)
        assert getattr(copy, "_original_code", copy.__code__) is plain.__code__
        assert copy.__globals__ is vars(tile_schedule)
        assert not hasattr(plain, "_preprocessed")  # the host's stays plain Python


def _banded(tiles_m: int, tiles_n: int, band: int) -> list[tuple[int, int]]:
    """A group's (M tile, N tile) in the banded order, written out naively: band by band, each band N
    tile by N tile, its M tiles fastest."""
    return [
        (m, n)
        for first in range(0, tiles_m, band)
        for n in range(tiles_n)
        for m in range(first, min(first + band, tiles_m))
    ]


@pytest.mark.parametrize(
    ("tiles_m", "tiles_n", "band"), [(48, 28, 16), (56, 12, 16), (5, 3, 2), (7, 4, 16), (1, 1, 3), (9, 2, 4)]
)
def test_the_banded_k_grouped_order_walks_each_group_band_by_band(tiles_m: int, tiles_n: int, band: int):
    groups = 3
    decoded = [
        tile_schedule.decode_k_grouped(t, tiles_m, tiles_n, band) for t in range(groups * tiles_m * tiles_n)
    ]
    for g in range(groups):
        assert [(m, n) for group, m, n in decoded if group == g] == _banded(tiles_m, tiles_n, band)
    assert decoded[: tiles_m * tiles_n] == [(0, m, n) for m, n in _banded(tiles_m, tiles_n, band)]
    # the walk the kernels run takes every tile once in that order
    problem = tile_schedule.GroupedProblem(True, 128, 256, tile_schedule.WGRAD_CHUNK, band)
    shape = tile_schedule.WalkShape(tiles_m, tiles_n, 0, tiles_m * 128)
    walked = [(w.group, w.m_tile, w.n_tile) for w in tile_schedule.walk(problem, [64, 64, 200], shape, 0, 1)]
    assert walked == decoded


def test_bands_shrink_what_the_ctas_running_at_once_read():
    # the 132 tiles of a wave of H200 CTAs at the up projection's dW (N = 6144, K = 7168): rows of
    # dY^T (128 per M tile) and X^T (256 per N tile) they read
    def footprint(band: int) -> int:
        wave = [tile_schedule.decode_k_grouped(t, 48, 28, band) for t in range(132)]
        return 128 * len({m for _, m, _ in wave}) + 256 * len({n for _, _, n in wave})

    assert footprint(0) == 128 * 48 + 256 * 3
    assert footprint(16) == 128 * 16 + 256 * 9 < 0.7 * footprint(0)


def test_bands_are_for_k_grouped_walks():
    with pytest.raises(ValueError, match="band=4 is not allowed"):
        tile_schedule.GroupedProblem(False, 128, 256, 64, 4)
