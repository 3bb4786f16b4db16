"""The sm90 kernel variants: their tile walks against a naive enumeration of every (group, row, N
tile), and (slow, about 25 s a variant) their compiled PTX holding what each variant claims, with
no register spills."""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import math
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cutlass_kernels import tile_schedule
from tests.test_kernels_schedule import _naive_tiles, _offs, cta_tiles

TILE_M, HALF_M = 128, 64


def _random_sizes(rng: random.Random) -> list[int]:
    return [
        rng.choice([0, 0, 1, 64, 65, 127, 128, 129, 256, 257, rng.randint(0, 900)])
        for _ in range(rng.randint(1, 60))
    ]


def _naive_rows(sizes: list[int], n_tiles: int) -> list[tuple[int, int, int]]:
    """Every output (group, row, N tile) of an M-grouped problem."""
    starts = [0, *_offs(sizes)]
    return [
        (g, r, n)
        for g, size in enumerate(sizes)
        for r in range(starts[g], starts[g] + size)
        for n in range(n_tiles)
    ]


def _cta_share(pair_row: int, end: int, rank: int) -> tuple[int, int]:
    row, row_end = tile_schedule.cluster_rows(pair_row, end, rank, TILE_M)
    assert row_end - row <= TILE_M  # never more than the CTA's own tile
    return row, row_end


@pytest.mark.parametrize("seed", range(10))
def test_cluster_pairs_cover_every_row_once_and_share_the_b_tile(seed: int):
    rng = random.Random(seed)
    sizes = _random_sizes(rng)
    n_tiles, clusters = rng.randint(1, 5), rng.randint(1, 30)
    covered, idle, split = [], 0, 0
    for cluster in range(clusters):
        # the walk of a cluster: both CTAs decode the same (group, pair, N tile), hence the same B tile
        for group, pair_row, end, n in cta_tiles(_offs(sizes), 2 * TILE_M, n_tiles, cluster, clusters):
            shares = [_cta_share(pair_row, end, rank) for rank in range(2)]
            covered += [(group, r, n) for row, row_end in shares for r in range(row, row_end)]
            idle += sum(row >= row_end for row, row_end in shares)
            if pair_row + TILE_M >= end:  # rows for one tile only: halves, so one warpgroup each
                split += 1
                assert all(not tile_schedule.half_has_rows(e - r, 1, HALF_M) for r, e in shares)

    assert sorted(covered) == sorted(_naive_rows(sizes, n_tiles))  # every row once, none invented
    # a pair with rows for one tile only exists per group of odd M-tile count; a CTA idles only
    # where that last tile has at most 64 rows
    odd = [size for size in sizes if tile_schedule.m_tiles(size, TILE_M) % 2]
    assert split == len(odd) * n_tiles
    assert idle == sum(1 for size in odd if size % TILE_M and size % TILE_M <= HALF_M) * n_tiles


@pytest.mark.parametrize("rows_out", [1, 64, 65, 128, 129, 200, 256, 300, 640])
def test_cluster_pairs_of_the_k_grouped_walk_cover_every_output_row(rows_out: int):
    # K-grouped: every group owns a whole grid of row pairs over its rows_out output rows of C
    groups, n_tiles = 3, 2
    pairs = tile_schedule.m_tiles(rows_out, 2 * TILE_M)
    problem = tile_schedule.GroupedProblem(True, 2 * TILE_M, 256, tile_schedule.WGRAD_CHUNK)
    shape = tile_schedule.WalkShape(pairs, n_tiles, 0, rows_out)
    covered = []
    for w in tile_schedule.walk(problem, [10, 10, 20], shape, 0, 1):
        for rank in range(2):
            row, row_end = _cta_share(w.row, w.row_end, rank)
            covered += [(w.group, r - w.group * rows_out, w.n_tile) for r in range(row, row_end)]
    expected = [(g, r, n) for g in range(groups) for r in range(rows_out) for n in range(n_tiles)]
    assert sorted(covered) == sorted(expected)


@pytest.mark.parametrize("seed", range(6))
def test_active_halves_are_exactly_the_64_row_tiles(seed: int):
    rng = random.Random(100 + seed)
    sizes = _random_sizes(rng)
    n_tiles = rng.randint(1, 4)
    halves = [
        (group, row + half * HALF_M, end, n)
        for group, row, end, n in _naive_tiles(sizes, TILE_M, n_tiles)
        for half in range(2)
        if tile_schedule.half_has_rows(end - row, half, HALF_M)
    ]
    assert sorted(halves) == sorted(_naive_tiles(sizes, HALF_M, n_tiles))


# ---- the wgrad kernels' arithmetic on the host: the ragged TMA view, the staged tile, the switches ----


@pytest.fixture
def sm90():
    pytest.importorskip("cutlass")
    from cutlass_kernels import sm90_gemm

    return sm90_gemm


@pytest.mark.parametrize("seed", range(4))
def test_the_ragged_view_addresses_each_groups_rows_and_bounds_them_at_its_end(seed: int, sm90):
    """TMA as the PTX ISA describes it: a box element is read where every coordinate lies in
    [0, extent), else zero-filled; its address is the base plus the coordinates times the byte
    strides, in 64-bit arithmetic. Every row of every group is found where it lies, and rows past a
    group's end (up to a whole 64-row chunk) read as zeros."""
    rng = random.Random(seed)
    elem = 2  # BF16
    cols, pitch = rng.choice([(16, 16), (24, 64), (7168, 7168), (3072, 3080)])  # pitch: 16-byte rows
    shape, stride = sm90.ragged_layout(cols, pitch)
    # what a TMA descriptor takes: byte strides multiples of 16 below 2^40, extents below 2^32
    assert stride[0] == 1 and all(s * elem % 16 == 0 and 0 < s * elem < 2**40 for s in stride[1:])
    assert all(0 < e < 2**32 for e in shape)
    start = 0
    for size in _random_sizes(rng):
        first, select = sm90.ragged_rows(start, size)
        for r in range(size + tile_schedule.WGRAD_CHUNK):
            for col in (0, cols - 1):
                coord = (col, first + r, *select)
                assert all(-(2**31) <= c < 2**31 for c in coord)  # TMA coordinates are int32
                inside = all(0 <= c < e for c, e in zip(coord, shape, strict=True))
                assert inside == (r < size)
                if inside:
                    address = sum(c * s for c, s in zip(coord, stride, strict=True)) * elem % 2**64
                    assert address == ((start + r) * pitch + col) * elem
        start += size


def test_tile_store_stages_a_bf16_tile_whole_and_an_fp32_tile_in_two_rounds(sm90):
    assert sm90.tile_store_shape(128, 256, 16) == ((128, 64), (64, 64), 4, 1)
    assert sm90.tile_store_shape(128, 256, 32) == ((128, 32), (64, 32), 4, 2)
    for width in (16, 32):
        for tile_n in (128, 256):
            slice_tile, box, slices, rounds = sm90.tile_store_shape(128, tile_n, width)
            assert slice_tile[1] * width == 1024 == box[1] * width  # a box row: one 128-byte swizzle row
            assert box == (64, slice_tile[1])  # one consumer warpgroup's rows of a slice
            assert slices * rounds * slice_tile[1] == tile_n  # every column once
            assert slices * 128 * slice_tile[1] * width // 8 <= 65536


def test_the_sm90_switches_refuse_what_they_cannot_do_and_combine_the_rest(sm90):
    kernel = sm90.Sm90GroupedGemm
    for switch in ("ragged", "tile_store", "in_place"):
        with pytest.raises(ValueError, match=f"{switch} is allowed for the K-grouped kernel only"):
            kernel(**{switch: True})
    with pytest.raises(ValueError, match="band is allowed for the K-grouped kernel only"):
        kernel(band=16)
    with pytest.raises(ValueError, match="choose one"):
        kernel(k_grouped=True, in_place=True, ragged=True)
    with pytest.raises(ValueError, match="choose one"):
        kernel(k_grouped=True, tile_store=True, tma_store=True)
    with pytest.raises(ValueError, match="cluster_m=2"):
        kernel(k_grouped=True, ragged=True, cluster_m=2)
    for rows in ({"in_place": True}, {"ragged": True}, {}):
        for epilogue in ({"tma_store": True}, {"tile_store": True}, {}):
            ids = list(kernel(k_grouped=True, band=16, **rows, **epilogue).named_barriers().values())
            assert len(set(ids)) == len(ids) and 0 not in ids


# ---- compiled PTX (fresh process per variant: the DSL reads its target arch when first imported) ----

needs_dsl = pytest.mark.skipif(
    importlib.util.find_spec("cutlass") is None, reason="the CUTLASS Python DSL cannot be imported"
)
OPS_OUTS = [(op, out) for op in ("fprop", "dgrad", "wgrad") for out in ("bfloat16", "float32")]
TMA_STORE = "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group"
# what a child process imports: this checkout's packages, wherever the tests run from
CHECKOUT_PATH = os.pathsep.join(
    filter(None, [str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")])
)
MULTICAST_LOAD = re.compile(
    r"cp\.async\.bulk\.tensor\.[23]d\.shared::cluster\.global\.tile\.\S*multicast::cluster"
)


def _variant_ptx(compiled_kernels, variant: str) -> dict[tuple[str, str], Path]:
    """The PTX file of each (op, output dtype) of a registered sm90 variant, from the session's compile."""
    out_dir = compiled_kernels("sm_90a")
    return {
        (op, out): out_dir / f"grouped_{op}_bfloat16-{out}_128x256_{variant}_sm_90a.ptx"
        for op, out in OPS_OUTS
    }


def _assert_no_spills(report: subprocess.CompletedProcess) -> None:
    """What ``ptxas -v`` said of a kernel (the session's ``ptxas_report``): no stack, no spills."""
    assert report.returncode == 0, report.stderr[-2000:]
    assert "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads" in report.stderr
    assert re.search(r"Used \d+ registers", report.stderr)


def _assert_common(ptx: str) -> None:
    assert ".target sm_90a" in ptx
    assert "wgmma.mma_async" in ptx


@needs_dsl
@pytest.mark.slow
def test_tma_epilogue_stores_through_shared_memory_with_tma(compiled_kernels, ptxas_report):
    for (op, out), path in _variant_ptx(compiled_kernels, "tma_epilogue").items():
        ptx = path.read_text()
        _assert_common(ptx)
        assert ptx.count(TMA_STORE) >= 8, (op, out)  # one per 8 KiB slice of a 128 x 256 tile
        assert "cp.async.bulk.commit_group" in ptx and "cp.async.bulk.wait_group.read" in ptx
        # 16-bit C goes registers -> shared by stmatrix, FP32 by vector shared stores
        assert ("stmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx) == (out == "bfloat16"), (op, out)
        # tiles cut by a group end: 16-byte stores of their rows from shared memory, no scalar ones
        assert "st.global.v4.b32" in ptx and "st.global.b16" not in ptx, (op, out)
        assert "multicast::cluster" not in ptx
        _assert_no_spills(ptxas_report("sm_90a", path))


# what each variant of plain stores (no TMA store) holds beside the default's code, and what it lacks
_PLAIN_STORE_CLAIMS = {
    # 64-row halves skip their wgmma: nothing new in the instruction mix
    "tail64": ((), ("multicast::cluster", "%cluster_ctarank")),
    # B multicast to both CTAs of the cluster, stages released to both
    "cluster2x1": (
        (
            "%cluster_ctarank",
            "barrier.cluster.wait",
            "mbarrier.arrive.shared::cluster.b64",
            "mapa.shared::cluster",
        ),
        (),
    ),
}


@needs_dsl
@pytest.mark.slow
@pytest.mark.parametrize("variant", sorted(_PLAIN_STORE_CLAIMS))
def test_plain_store_variants_hold_their_claims_and_keep_the_default_stores(
    variant: str, compiled_kernels, ptxas_report
):
    present, absent = _PLAIN_STORE_CLAIMS[variant]
    for (op, out), path in _variant_ptx(compiled_kernels, variant).items():
        ptx = path.read_text()
        _assert_common(ptx)
        assert TMA_STORE not in ptx and "stmatrix" not in ptx, (op, out)
        assert bool(MULTICAST_LOAD.search(ptx)) == (variant == "cluster2x1"), (op, out)
        assert all(claim in ptx for claim in present) and not any(claim in ptx for claim in absent), (op, out)
        _assert_no_spills(ptxas_report("sm_90a", path))


_EPILOGUE_MAP = """
import json, sys
import cutlass, cutlass.cute as cute, cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import warpgroup
from cutlass_kernels.sm90_gemm import epilogue_r2s, epilogue_s2g, epilogue_tile

SAMPLED = json.loads(sys.argv[1])
found = {}

def plain(x):
    # a coordinate, shape or stride as JSON: E(m) * k as {"scale": k, "mode": m}
    if isinstance(x, cute.ScaledBasis):
        (mode,) = x.mode
        return {"scale": int(x.value), "mode": mode}
    return [plain(e) for e in x] if isinstance(x, tuple) else int(x)

def points(coords, indices):
    return [[int(c) for c in coords[i]] for i in indices]

def record(maps, t, coords):
    # each thread's coordinates: where they start, and their layout; for the sampled threads, every
    # coordinate as the DSL indexes it
    for name, c in coords.items():
        maps.setdefault(name, []).append([plain(c.iterator), plain(c.layout.shape), plain(c.layout.stride)])
    if t in SAMPLED:
        acc, slice_, piece = coords["acc"], coords["slice"], coords["piece"]
        n = [cute.size(piece, mode=[m]) for m in range(3)]
        pieces = [[(v, i, j) for v in range(n[0])] for i in range(n[1]) for j in range(n[2])]
        maps.setdefault("sampled", {})[t] = {
            "acc": points(acc, range(cute.size(acc))),
            "slice": points(slice_, range(cute.size(slice_))),
            "piece": [points(piece, p) for p in pieces],
        }

@cute.jit
def walk(c_dtype: cutlass.Constexpr, maps: cutlass.Constexpr):
    # the kernel's tiled MMA: two consumer warpgroups of 64 x 256 each
    k = warpgroup.OperandMajorMode.K
    mma = sm90_utils.make_trivial_tiled_mma(
        cutlass.BFloat16, cutlass.BFloat16, k, k, cutlass.Float32, (2, 1, 1), tiler_mn=(64, 256)
    )
    r2s = epilogue_r2s(mma, c_dtype, utils.LayoutEnum.ROW_MAJOR, cutlass.Float32)
    epi = epilogue_tile(128, c_dtype.width)
    # the shared -> global copy of cut tiles: each thread's 16-byte pieces
    s2g = epilogue_s2g(c_dtype, epi, 256)
    maps["epi"] = list(epi)
    for t in cutlass.range_constexpr(256):
        acc = r2s.retile(mma.get_slice(t).partition_C(cute.make_identity_tensor((128, 256))))
        slice_ = r2s.get_slice(t).partition_S(cute.make_identity_tensor(epi))
        piece = s2g.get_slice(t).partition_D(cute.make_identity_tensor(epi))
        record(maps, t, {"acc": acc, "slice": slice_, "piece": piece})

for c_dtype in ("BFloat16", "Float32"):
    walk(getattr(cutlass, c_dtype), found.setdefault(c_dtype, {}))
print(json.dumps(found))
"""
# threads whose every coordinate the DSL indexes itself: the first and last of each warpgroup, one between
_SAMPLED = (0, 97, 127, 128, 255)


def _size(shape) -> int:
    return math.prod(_size(s) for s in shape) if isinstance(shape, list) else shape


def _point(layout: list, index) -> tuple[int, int]:
    """The (row, column) a thread's partition of an identity tensor holds at ``index``, from the
    partition's start and layout as the DSL gave them: an integer index taken apart
    colexicographically over the shape's modes (a coordinate per mode as given), each mode's
    coordinate times its stride, a stride E(m) * k adding k to component m."""
    point = list(layout[0])

    def add(index, shape, stride) -> None:
        if isinstance(shape, list):
            if isinstance(index, int):
                index, rest = [], index
                for s in shape:
                    index.append(rest % _size(s))
                    rest //= _size(s)
            for i, s, d in zip(index, shape, stride, strict=True):
                add(i, s, d)
        elif isinstance(stride, dict):
            point[stride["mode"]] += index * stride["scale"]
        else:
            assert stride == 0, stride  # a coordinate tensor's strides are bases, or 0 for a broadcast mode

    add(index, layout[1], layout[2])
    return point[0], point[1]


@pytest.fixture(scope="module")
def epilogue_maps(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Each thread's coordinates in the TMA epilogue (its start and layout; every coordinate of the
    :data:`_SAMPLED` threads as the DSL indexes them), for BF16 and FP32 C, from one process."""
    folder = tmp_path_factory.mktemp("epilogue")
    script = folder / "epilogue_map.py"  # the DSL compiles from source files only
    script.write_text(_EPILOGUE_MAP)
    done = subprocess.run(
        [sys.executable, str(script), json.dumps(_SAMPLED)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "CUTE_DSL_ARCH": "sm_90a", "PYTHONPATH": CHECKOUT_PATH},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@needs_dsl
@pytest.mark.slow
@pytest.mark.parametrize("c_dtype", ["BFloat16", "Float32"])
def test_tma_epilogue_slices_take_each_accumulator_value_to_its_own_position(
    c_dtype: str, epilogue_maps, sm90
):
    maps = epilogue_maps[c_dtype]
    epi_n = maps["epi"][1]
    # the layouts read as the DSL indexes them, every coordinate of the sampled threads
    assert sorted(maps["sampled"]) == sorted(str(t) for t in _SAMPLED)
    for t, dsl in maps["sampled"].items():
        acc, slice_, piece = (maps[name][int(t)] for name in ("acc", "slice", "piece"))
        assert [list(_point(acc, i)) for i in range(_size(acc[1]))] == dsl["acc"], t
        assert [list(_point(slice_, v)) for v in range(_size(slice_[1]))] == dsl["slice"], t
        n = [_size(m) for m in piece[1]]
        pieces = [
            [list(_point(piece, (v, i, j))) for v in range(n[0])] for i in range(n[1]) for j in range(n[2])
        ]
        assert pieces == dsl["piece"], t
    # every thread's accumulator value v of slice s must be the element the register -> shared copy
    # expects there: same (row, column) of the 128 x 256 tile, every element exactly once
    pairs = []
    for acc, slice_ in zip(maps["acc"], maps["slice"], strict=True):
        per = _size(slice_[1])
        for s in range(256 // epi_n):
            for v in range(per):
                r, c = _point(acc, sm90.slice_value(s, v, per))
                sr, sc = _point(slice_, v)
                pairs.append((r, c, sr, sc + s * epi_n))
    assert len(pairs) == 128 * 256
    assert all((r, c) == (sr, sc) for r, c, sr, sc in pairs)
    assert {(r, c) for r, c, _, _ in pairs} == {(r, c) for r in range(128) for c in range(256)}
    # cut tiles: 16-byte pieces, each within one row and contiguous, together the slice exactly once
    width, slice_cols = {"BFloat16": (8, 32), "Float32": (4, 16)}[c_dtype]  # a slice is 8 KiB
    pieces = []
    for piece in maps["piece"]:
        n = [_size(m) for m in piece[1]]
        pieces += [[_point(piece, (v, i, j)) for v in range(n[0])] for i in range(n[1]) for j in range(n[2])]
    assert all(len(p) == width and p == [(p[0][0], p[0][1] + v) for v in range(width)] for p in pieces)
    covered = sorted((r, c) for p in pieces for r, c in p)
    assert covered == sorted((r, c) for r in range(128) for c in range(slice_cols))


@needs_dsl
@pytest.mark.slow
def test_tma_cluster_combines_multicast_and_tma_stores(compiled_kernels, ptxas_report):
    for (op, out), path in _variant_ptx(compiled_kernels, "tma_cluster2x1").items():
        ptx = path.read_text()
        _assert_common(ptx)
        assert MULTICAST_LOAD.search(ptx) and ptx.count(TMA_STORE) >= 8, (op, out)
        assert ("stmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx) == (out == "bfloat16"), (op, out)
        _assert_no_spills(ptxas_report("sm_90a", path))


_LAUNCH_IR = """
import sys
from pathlib import Path
import torch
from cutlass_kernels import registry
from cutlass_kernels.cute_base import compile_spec
for variant in sys.argv[2:]:  # each variant's host IR renamed after its compile, so that they stay apart
    spec = registry.spec_for("sm_90a", "fprop", torch.bfloat16, torch.bfloat16, variant)
    compile_spec(spec, registry.kernel_for(spec), Path(sys.argv[1]))
    for i, ir in enumerate(sorted(Path.cwd().glob("*_clean.mlir"))):
        ir.rename(f"{variant}-{i}.host.mlir")
"""
_LAUNCHED = {"cluster2x1": True, "tma_epilogue": False}  # variant: launched on 2x1 clusters


@pytest.fixture(scope="module")
def launch_ir(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The host IR the DSL keeps of each :data:`_LAUNCHED` variant's fprop kernel, compiled in one process."""
    folder = tmp_path_factory.mktemp("launch-ir")
    env = {"CUTE_DSL_ARCH": "sm_90a", "CUTE_DSL_KEEP": "ir", "CUTE_DSL_DUMP_DIR": str(folder)}
    env["PYTHONPATH"] = CHECKOUT_PATH
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCH_IR, str(folder / "out"), *_LAUNCHED],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=folder,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {v: "\n".join(p.read_text() for p in sorted(folder.glob(f"{v}-*.host.mlir"))) for v in _LAUNCHED}


@needs_dsl
@pytest.mark.slow
@pytest.mark.parametrize(("variant", "clustered"), _LAUNCHED.items())
def test_cluster_variants_launch_on_2x1_clusters_and_the_others_plainly(
    variant: str, clustered: bool, launch_ir
):
    # the cluster shape is a launch attribute: it lives in the host IR the DSL keeps, not in the PTX
    ir = launch_ir[variant]
    assert ir.count("cluster_launch = true") == clustered
    assert ir.count("exact_cluster_dim = array<i64: 2, 1, 1>") == clustered
    assert ir.count("cluster_launch = false") == (not clustered)


_TILE_STORE = "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group"
_RAGGED_LOAD = "cp.async.bulk.tensor.4d.shared::cta.global.tile"
_TILE_STORE_VARIANTS = ("ragged_tile", "inplace_tile")


@needs_dsl
@pytest.mark.slow
@pytest.mark.parametrize("variant", _TILE_STORE_VARIANTS)
def test_the_wgrad_tile_store_kernels_stage_whole_tiles_and_store_them_by_tma(
    variant: str, compiled_kernels, ptxas_report
):
    out_dir = compiled_kernels("sm_90a")
    facts = json.loads((out_dir / "kernels.json").read_text())
    for c_dtype, rounds in (("bfloat16", 1), ("float32", 2)):
        name = f"grouped_wgrad_bfloat16-{c_dtype}_128x256_{variant}_sm_90a"
        path = out_dir / f"{name}.ptx"
        ptx = path.read_text()
        _assert_common(ptx)
        # a round: one 3-D TMA store of dW (N, K, G) per 64 x 128-byte box of the warpgroup's rows, the
        # four committed as one bulk group; its buffers waited for before they are written again, and
        # once more before the CTA exits
        assert ptx.count(_TILE_STORE) == 4 * rounds, c_dtype
        assert ptx.count("cp.async.bulk.commit_group") == rounds, c_dtype
        assert ptx.count("cp.async.bulk.wait_group.read") == rounds + 1, c_dtype
        assert re.search(r"bar\.sync\s+%r\d+, 128;", ptx), c_dtype  # the warpgroup's own barrier
        assert ("stmatrix.sync.aligned.m8n8.x4.shared.b16" in ptx) == (c_dtype == "bfloat16")
        # ragged: 4-D loads bounded at the group's end, nothing zeroed; in place: 2-D loads, zeroing
        assert (_RAGGED_LOAD in ptx) == (variant == "ragged_tile"), c_dtype
        assert ("st.shared.b16" in ptx) == (variant == "inplace_tile"), c_dtype
        assert "ld.local" not in ptx and "st.local" not in ptx
        _assert_no_spills(ptxas_report("sm_90a", path))
        # three 48 KB stages of the ring beside the 64 KB of C buffers, within an sm90 CTA's 227 KB
        assert facts[name]["stages"] == 3 and facts[name]["shared_bytes"] <= 232448, facts[name]


@needs_dsl
@pytest.mark.slow
def test_sm90_sass_has_tensor_core_mmas_no_local_memory_and_tma_stores_where_claimed(compiled_kernels):
    from cutlass_kernels import check

    tool = check.disassembler()
    if tool is None:
        pytest.skip("neither cuobjdump nor nvdisasm is installed")
    out_dir = compiled_kernels("sm_90a")
    # every variant's BF16-out kernels, and the FP32-out ones of the whole-tile epilogue
    cubins = [
        c
        for c in sorted(out_dir.glob("grouped_*.cubin"))
        if "-bfloat16_" in c.name or any(v in c.name for v in _TILE_STORE_VARIANTS)
    ]
    with_tma_stores = ("tma_epilogue", "tma_tail64", "tma_cluster2x1", *_TILE_STORE_VARIANTS)

    def sass(cubin: Path) -> str:
        done = subprocess.run([*tool, str(cubin)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        texts = dict(zip(cubins, pool.map(sass, cubins), strict=True))
    assert len(texts) >= 20
    for cubin, text in texts.items():
        counts = check.sass_counts(text)
        assert counts["mma"] > 0 and counts["local"] == 0, (cubin.name, counts)
        assert (counts["tma_store"] > 0) == any(v in cubin.name for v in with_tma_stores), cubin.name
        if any(v in cubin.name for v in _TILE_STORE_VARIANTS):
            rounds = 2 if "-float32_" in cubin.name else 1
            assert counts["tma_store"] == 4 * rounds, (cubin.name, counts)
            assert ("UTMALDG.4D" in text) == ("ragged" in cubin.name), cubin.name
