"""Hopper (sm90a) grouped GEMM: TMA loads, wgmma, warp specialization, persistent CTAs.

One producer warp streams A and B K-slices into a multi-stage shared-memory ring with TMA; two
consumer warpgroups run wgmma on a 128 x tile_n tile (64 rows each) with an FP32 accumulator and store
it themselves. Every CTA walks the tile order of :func:`cutlass_kernels.cute_base.tile_work` from a
prefix it builds from the device ``offs``, so a new routing needs neither a recompile nor a host sync
and the launch can be captured in a CUDA graph.

M-grouped (fprop, dgrad): A's rows are grouped; group boundaries fall anywhere, so the stores are
predicated per element on the group's last row (and on N): a tile's rows past its group belong to
another group and are never written. A loads past the tensor end are zero-filled by TMA. B may be
K-major (fprop) or N-major (dgrad reads B^T in place). K-grouped (wgrad): A = dY^T and B = X^T, both
N-major views of row-padded copies, each group reducing over its own row chunks.

Trace-time switches, all off in the default kernel (each registered variant of
:mod:`cutlass_kernels.registry` turns some on; with all off the code traced is the default's alone):

- ``tma_store``: C goes through shared memory (``stmatrix`` for 16-bit C) in ``tile_m x epi_n``
  slices. A tile with all its rows in one group leaves by one asynchronous TMA store per slice, so
  the global writes overlap the next tile's main loop (the N tail is clipped by TMA itself); a tile
  cut by a group end leaves by 16-byte stores of its rows inside the group only. Chosen over
  ping-pong consumers because it keeps the 128 x 256 tile both warpgroups share: a 128 x 256 FP32
  accumulator does not fit one warpgroup, so ping-pong would halve the tile and double A's traffic
  per FLOP.
- ``skip_empty_halves``: each consumer warpgroup owns 64 rows of the tile; one whose rows all lie
  past the group end (a group's last tile with at most 64 rows left) consumes the ring without
  issuing wgmma, which halves that tile's tensor-core time.
- ``cluster_m = 2``: a 2x1 thread-block cluster takes two consecutive M tiles of one (group, N tile);
  each CTA loads half of the B tile and multicasts it to both. The walk runs over 256-row pairs; a
  pair with rows for one tile only is split into two 64-row halves, one per CTA
  (:func:`cutlass_kernels.tile_schedule.cluster_rows`). A CTA whose share has no rows still takes
  part in every stage (it receives and sends B, releases stages to both CTAs) but issues no wgmma
  and stores nothing. Implies ``skip_empty_halves``.
- ``in_place`` (K-grouped only): dY and X are read where they lie, row-major, instead of from
  per-group zero-padded copies (which cost a scatter of both operands before every launch). The
  producer TMA-loads every chunk of group ``g`` from row ``offs[g-1] + 64 j``; a group's last chunk
  then also holds the rows after the group's end (the next group's, or those past ``offs[-1]``).
  Zeroing one operand there is not enough: 0 x Inf and 0 x NaN are NaN, so each consumer warpgroup
  zeroes, in shared memory, the rows past the group's end of both operands (its own half of the dY^T
  tile and half of the X^T tile, which both warpgroups read), fences those generic-proxy stores
  against the async proxy wgmma reads through, and syncs both warpgroups on a named barrier before
  either issues the wgmma. Only a group's last chunk is touched, and only when its size is not a
  multiple of 64.
- ``ragged`` (K-grouped only): dY and X are read in place too, but each group's rows are bounded in
  the loads themselves, so TMA zero-fills a chunk's rows past the group's end in both operands and
  no thread touches shared memory between the loads and the wgmma. Each operand's TMA view is a
  4-D "ragged" tensor over the same memory, (cols, B, W, W) with strides (1, s, 2^34 - s, s) and
  ``B = 2^30`` (:func:`ragged_view`): group ``g``'s row ``r`` is coordinate
  ``(col, B - len_g + r, B, end_g)``, in bounds exactly while ``r < len_g``, and its address is
  ``base + col + (B - len_g + r) s + B (2^34 - s) + end_g s = base + col + (start_g + r) s`` modulo
  2^64 bytes (``B 2^34`` elements is a multiple of 2^64 bytes). The base address itself is never
  moved, which TMA loads need (they fault on a descriptor whose base lies outside mapped memory).
- ``tile_store`` (K-grouped only): the whole output tile is staged in shared memory and leaves by
  TMA while the next tile's main loop runs. Each consumer warpgroup owns its 64 rows: it waits for
  its previous tile's stores to have read the buffer (not before), writes its accumulator there
  (``stmatrix`` for 16-bit C), and one of its threads issues a TMA store per 128-byte-wide box and
  commits them as one bulk group. dW is viewed as (N, K, G), so TMA clips the tile at N and K and no
  tile is ever cut by hand. A BF16 tile (64 KB) is staged whole; an FP32 one (128 KB) in two halves.
- ``band`` (K-grouped only): the tile order walks each group's output grid in bands of ``band`` M
  tiles (:func:`cutlass_kernels.tile_schedule.decode_k_grouped`), so that the CTAs running at once
  share a few A and B slabs in L2.

Switches combine: each user of a named barrier has an id of its own (:class:`Barrier`).
"""

from typing import Any, NamedTuple

import cutlass
import cutlass.cute as cute
import cutlass.memory as memory
import cutlass.pipeline as pipeline
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup
from cutlass.tensor_utils import LayoutEnum

from cutlass_kernels import tile_schedule
from cutlass_kernels.cute_base import DEVICE, MAX_GROUPS, CtaWalk, GroupedGemm, build_tile_prefix, tile_work
from cutlass_kernels.tile_schedule import GroupedProblem

SMEM_LIMIT = 232448  # sm90 dynamic shared memory per CTA
_THREADS_PER_WG = 128
_EPI_BUFFER_BYTES = 8192  # one tile_m x epi_n slice of C in shared memory
_EPI_BUFFERS = 3  # TMA stores in flight; with 4 ring stages of 128x256x64 they still fit
_STORE_THREAD = 4 * 32  # the first consumer thread issues, commits and waits for the TMA stores
_ROWS_PER_MMA_WG = 64  # A rows of one consumer warpgroup's wgmma (in place: dY^T rows = N)
_TILE_STORE_BYTES = 65536  # ``tile_store``: the staged C buffers, a whole BF16 128 x 256 tile
_BOX_ROW_BYTES = 128  # ``tile_store``: one TMA store box row, the width of the 128-byte swizzle
CLUSTER_SHAPES = (1, 2)
RAGGED_BOUND = 2**30  # ``ragged``: the extent of the bounded row mode (B of the module docstring)
RAGGED_WRAP = 2**34  # elements: RAGGED_BOUND * RAGGED_WRAP elements is a multiple of 2^64 bytes
RAGGED_EXTENT = 2**31 - 1  # the extent of the two modes that select a group's rows


class Barrier:
    """Named barrier ids (hardware has 16; 0 is the CTA's, of ``sync_threads``). Each user has an
    id of its own, so that every switch combines with every other
    (:meth:`Sm90GroupedGemm.named_barriers` checks it)."""

    STAGED_EPILOGUE = 1  # the consumer warpgroups, around each C slice in shared memory
    ZEROING = 2  # the consumer warpgroups, between zeroing rows past a group's end and the wgmma
    TILE_STORE = (3, 4)  # each consumer warpgroup alone, around its rows of the staged tile


class _Loads(NamedTuple):
    """The producer's operands: TMA atoms and global views of A and B, their shared-memory rings,
    B's TMA partition (all groups; None in place, where B's slices start at each group), the
    multicast mask of B and this CTA's rank in its cluster."""

    tma_a: Any
    mA: Any
    sA: Any
    tma_b: Any
    mB: Any
    sB: Any
    tBsB: Any
    tBgB: Any
    b_mask: Any
    rank: Any


class _Output(NamedTuple):
    """C (plain stores), its staging buffers in shared memory and its TMA view (``tma_store``,
    ``tile_store``), and with ``tile_store`` the same buffers as TMA store boxes."""

    mC: Any
    sC: Any
    tma_c: Any
    mC_tma: Any
    sC_boxes: Any


class _ZeroTail(NamedTuple):
    """In place: what a consumer warpgroup needs to zero the operands' rows past its group's end."""

    sA: Any
    sB: Any
    group_rows: Any
    k_begin: Any  # the group's first K tile
    mma_wg: Any  # the consumer warpgroup, 0 or 1
    lane: Any  # the thread within it


class _StagedEpilogue(NamedTuple):
    """``tma_store``: the C buffers with their copies: register -> shared (stmatrix for 16-bit C)
    and its destination partition, shared -> global of cut tiles (16 bytes a thread, row by row)
    with its source partition and coordinates, and the TMA store group that rotates the buffers."""

    r2s: Any
    tRS_sC: Any
    sC: Any
    s2g: Any
    thr_s2g: Any
    tSG_sC: Any
    tSG_cC: Any
    store_group: Any


def epilogue_tile(tile_m: int, c_width: int) -> tuple[int, int]:
    """The ``tile_m x epi_n`` slice of C one shared buffer holds (``c_width`` bits per element)."""
    return tile_m, _EPI_BUFFER_BYTES * 8 // (tile_m * c_width)


def epilogue_r2s(tiled_mma: Any, c_dtype: Any, c_layout: Any, acc_dtype: Any) -> Any:
    """The register -> shared copy of the accumulator, laid out as the stmatrix atom tiled over
    ``tiled_mma``'s C (``stmatrix`` itself for 16-bit C, vector shared stores otherwise)."""
    r2s_atom = sm90_utils.get_smem_store_op(c_layout, c_dtype, acc_dtype)
    c_atom = cute.make_copy_atom(cute.nvgpu.warp.StMatrix8x8x16bOp(c_layout.is_m_major_c(), 4), c_dtype)
    return cute.make_tiled_copy_S(r2s_atom, cute.make_tiled_copy_C_atom(c_atom, tiled_mma))


def epilogue_s2g(c_dtype: Any, epi_tile: tuple[int, int], threads: int) -> Any:
    """The shared -> global copy of one C slice: 16 bytes a thread, the threads of a row side by side,
    so every store is whole 16-byte pieces of one row (rows and N are multiples of them)."""
    vec = 128 // c_dtype.width
    per_row = epi_tile[1] // vec
    atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), c_dtype, num_bits_per_copy=128)
    thr = cute.make_layout((threads // per_row, per_row), stride=(per_row, 1))
    return cute.make_tiled_copy_tv(atom, thr, cute.make_layout((1, vec)))


def slice_value(s: int, v: int, per_slice: int) -> int:
    """Index, in the accumulator retiled by :func:`epilogue_r2s`, of value ``v`` of C slice ``s``."""
    return s * per_slice + v


def tile_store_shape(
    tile_m: int, tile_n: int, c_width: int
) -> tuple[tuple[int, int], tuple[int, int], int, int]:
    """``tile_store``'s staging of a ``tile_m x tile_n`` tile of ``c_width``-bit C: the 128-row slice
    (one 128-byte swizzle row wide), each warpgroup's half of it (a TMA store box), the slices the
    64 KB of buffers hold, and the rounds a tile takes through them."""
    epi_n = _BOX_ROW_BYTES * 8 // c_width
    slices = min(_TILE_STORE_BYTES * 8 // (tile_m * epi_n * c_width), tile_n // epi_n)
    return (tile_m, epi_n), (tile_m // 2, epi_n), slices, tile_n // (epi_n * slices)


def ragged_layout(cols: Any, s: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """(shape, stride) of the 4-D ragged view of a (cols, rows) operand with unit-stride columns and
    rows ``s`` elements apart (the module docstring's ``ragged``)."""
    return (cols, RAGGED_BOUND, RAGGED_EXTENT, RAGGED_EXTENT), (1, s, RAGGED_WRAP - s, s)


def ragged_rows(start: Any, length: Any) -> tuple[Any, tuple[Any, Any]]:
    """Where a group of ``length`` rows from row ``start`` lies in the ragged view: the offset of its
    row 0 in the bounded mode, and the coordinates of the two modes that select it."""
    return RAGGED_BOUND - length, (RAGGED_BOUND, start + length)


def ragged_view(t: cute.Tensor) -> cute.Tensor:
    """``t`` (cols, rows) as its 4-D ragged view over the same base address (:func:`ragged_layout`),
    so that TMA bounds a group's rows."""
    shape, stride = ragged_layout(cute.size(t, mode=[0]), t.layout.stride[1])
    return cute.make_tensor(t.iterator, cute.make_layout(shape, stride=stride))


class Sm90GroupedGemm(GroupedGemm):
    """A compiled-once grouped GEMM ``C[rows of g] = A[rows of g] @ op(B[g])`` (or, K-grouped,
    ``C[g] = A[:, rows of g] @ B[:, rows of g]^T``) for one tile shape, with the switches of the
    module docstring."""

    def __init__(
        self,
        tile_m: int = 128,
        tile_n: int = 256,
        k_grouped: bool = False,
        *,
        cluster_m: int = 1,
        tma_store: bool = False,
        skip_empty_halves: bool = False,
        in_place: bool = False,
        ragged: bool = False,
        tile_store: bool = False,
        band: int = 0,
    ) -> None:
        if tile_m != 128 or tile_n not in (128, 256):
            raise ValueError(f"sm90 tile {tile_m}x{tile_n} is not allowed; allowed: 128x128, 128x256")
        if cluster_m not in CLUSTER_SHAPES:
            raise ValueError(f"cluster_m={cluster_m} is not allowed; allowed: {CLUSTER_SHAPES}")
        switches = {"in_place": in_place, "ragged": ragged, "tile_store": tile_store, "band": band}
        if not k_grouped and any(switches.values()):
            on = ", ".join(name for name, value in switches.items() if value)
            raise ValueError(f"{on} is allowed for the K-grouped kernel only")
        if in_place and ragged:
            raise ValueError("in_place and ragged are two ways of reading rows in place; choose one")
        if (in_place or ragged) and cluster_m > 1:
            raise ValueError(
                f"reading rows in place is allowed without clusters only; got cluster_m={cluster_m}"
            )
        if tile_store and tma_store:
            raise ValueError("tile_store and tma_store are two epilogues; choose one")
        super().__init__(tile_m, tile_n, k_grouped)
        self.tma_store, self.cluster_m, self.in_place = tma_store, cluster_m, in_place
        self.ragged, self.tile_store, self.band = ragged, tile_store, band
        self.cluster_size = cluster_m  # CTAs per cluster
        # a cluster's CTA without rows must skip its wgmma, so clusters imply the skip
        self.skip_empty_halves = skip_empty_halves or cluster_m > 1
        self.num_mma_wg = 2
        self.half_m = tile_m // self.num_mma_wg
        self.consumer_threads = self.num_mma_wg * _THREADS_PER_WG
        self.threads = _THREADS_PER_WG + self.consumer_threads
        self.named_barriers()

    @property
    def reads_in_place(self) -> bool:
        """Whether the K-grouped operands are read where they lie (no padded copies)."""
        return self.in_place or self.ragged

    def named_barriers(self) -> dict[str, int]:
        """The named barriers this kernel's switches use, by user; a ValueError where two users would
        share an id (they would wait for each other's arrivals)."""
        used: dict[str, int] = {}
        if self.tma_store:
            used["staged epilogue"] = Barrier.STAGED_EPILOGUE
        if self.in_place:
            used["zeroing"] = Barrier.ZEROING
        if self.tile_store:
            for wg, barrier_id in enumerate(Barrier.TILE_STORE):
                used[f"tile store of warpgroup {wg}"] = barrier_id
        if len(set(used.values())) < len(used) or 0 in used.values():
            raise ValueError(f"named barriers {used} share an id; each needs one of its own (not 0)")
        return used

    def _setup(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor) -> None:
        self.a_dtype, self.b_dtype, self.c_dtype = a.element_type, b.element_type, c.element_type
        self.a_layout = LayoutEnum.from_tensor(a)
        self.b_layout = LayoutEnum.from_tensor(b)
        self.c_layout = LayoutEnum.from_tensor(c)
        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.a_dtype,
            self.b_dtype,
            self.a_layout.sm90_mma_major_mode(),
            self.b_layout.sm90_mma_major_mode(),
            self.acc_dtype,
            (self.num_mma_wg, 1, 1),
            tiler_mn=(self.half_m, self.tile_n),
        )
        tile_k = cute.size(self.tiled_mma.shape_mnk, mode=[2]) * 4
        self.tile_mnk = (self.tile_m, self.tile_n, tile_k)
        # the walk runs over cluster_m consecutive M tiles of one group at a time
        self.problem = GroupedProblem(
            self.k_grouped, self.tile_m * self.cluster_m, self.tile_n, tile_k, self.band
        )
        reserved = 4 * (MAX_GROUPS + 1) + 1024
        if self.tma_store:
            self.epi_tile = epilogue_tile(self.tile_m, self.c_dtype.width)
            self.epi_smem = sm90_utils.make_smem_layout_epi(
                self.c_dtype, self.c_layout, self.epi_tile, _EPI_BUFFERS
            )
            reserved += 1024 + _EPI_BUFFERS * _EPI_BUFFER_BYTES  # the C slices, 1024-byte aligned
        if self.tile_store:
            if not self.c_layout.is_n_major_c():
                raise ValueError("tile_store stages a row-major C only")
            self.epi_tile, self.box_tile, self.box_slices, self.store_rounds = tile_store_shape(
                self.tile_m, self.tile_n, self.c_dtype.width
            )
            # the same bytes as 128-row slices (what the register -> shared copy fills) and as each
            # warpgroup's 64-row boxes (what TMA stores): box 2 j + w is warpgroup w's half of slice j
            self.epi_smem = sm90_utils.make_smem_layout_epi(
                self.c_dtype, self.c_layout, self.epi_tile, self.box_slices
            )
            self.box_smem = sm90_utils.make_smem_layout_epi(
                self.c_dtype, self.c_layout, self.box_tile, self.box_slices * self.num_mma_wg
            )
            reserved += 1024 + _TILE_STORE_BYTES
        stage_bytes = (self.tile_m + self.tile_n) * tile_k * self.a_dtype.width // 8
        self.stages = (SMEM_LIMIT - reserved) // stage_bytes
        self.a_smem = sm90_utils.make_smem_layout_a(self.a_layout, self.tile_mnk, self.a_dtype, self.stages)
        self.b_smem = sm90_utils.make_smem_layout_b(self.b_layout, self.tile_mnk, self.b_dtype, self.stages)

    def _launch(self, a, b, c, offs, ctas, stream) -> None:
        """Trace-time body of ``__call__``: TMA atoms (B multicast across a cluster), shared storage,
        kernel launch on ``ctas`` rounded down to whole clusters, at least one."""
        self._setup(a, b, c)
        a_tile = cute.slice_(self.a_smem, (None, None, 0))
        b_tile = cute.slice_(self.b_smem, (None, None, 0))
        a_rows, b_rows = a, b
        if cutlass.const_expr(self.ragged):
            # every group's rows bounded in the loads: dY^T and X^T as ragged views (B's group mode of
            # one, added by __call__, dropped first)
            a_rows = ragged_view(a)
            b_rows = ragged_view(cute.make_tensor(b.iterator, cute.select(b.layout, mode=[0, 1])))
        tma_a, mA = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), a_rows, a_tile, (self.tile_m, self.tile_mnk[2])
        )
        b_op = cpasync.CopyBulkTensorTileG2SOp()
        if cutlass.const_expr(self.cluster_m > 1):
            b_op = cpasync.CopyBulkTensorTileG2SMulticastOp()
        tma_b, mB = cpasync.make_tiled_tma_atom(
            b_op, b_rows, b_tile, (self.tile_n, self.tile_mnk[2]), num_multicast=self.cluster_m
        )
        tma_c, mC_tma, epi_smem = None, None, None
        if cutlass.const_expr(self.tma_store):
            epi_smem = self.epi_smem
            tma_c, mC_tma = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileS2GOp(), c, cute.slice_(epi_smem, (None, None, 0)), self.epi_tile
            )
        if cutlass.const_expr(self.tile_store):
            epi_smem = self.epi_smem
            # dW (G * N, K) as (N, K, G): TMA clips every box at N and K
            n_rows, groups = cute.size(a, mode=[0]), cute.size(offs)
            ld_c = c.layout.stride[0]
            per_group = cute.make_layout(
                (n_rows, cute.size(c, mode=[1]), groups), stride=(ld_c, 1, n_rows * ld_c)
            )
            tma_c, mC_tma = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileS2GOp(),
                cute.make_tensor(c.iterator, per_group),
                cute.slice_(self.box_smem, (None, None, 0)),
                self.box_tile,
            )

        @cute.struct
        class Storage:
            ring_barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            tile_prefix: cute.struct.MemRange[cutlass.Int32, MAX_GROUPS + 1]
            sA: cute.struct.Align[cute.struct.MemRange[self.a_dtype, cute.cosize(self.a_smem)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.b_dtype, cute.cosize(self.b_smem)], 1024]

        self.storage = Storage
        # what the launch takes: the struct, then the C buffers at the next 1024-byte boundary
        struct_bytes: int = Storage.__sizeof__()  # type: ignore[call-arg]  # the DSL's struct: a class method
        self.shared_bytes = -(-struct_bytes // 1024) * 1024
        if cutlass.const_expr(epi_smem is not None):
            self.shared_bytes += cute.cosize(epi_smem) * self.c_dtype.width // 8
        grid = ctas
        if cutlass.const_expr(self.cluster_m > 1):
            grid = cutlass.max(ctas // self.cluster_m, 1) * self.cluster_m
        box_smem = self.box_smem if cutlass.const_expr(self.tile_store) else None
        self.kernel(
            tma_a,
            mA,
            tma_b,
            mB,
            c,
            offs,
            self.tiled_mma,
            self.a_smem,
            self.b_smem,
            tma_c,
            mC_tma,
            epi_smem,
            box_smem,
        ).launch(
            grid=(grid, 1, 1),
            block=(self.threads, 1, 1),
            cluster=(self.cluster_m, 1, 1) if self.cluster_m > 1 else None,
            stream=stream,
        )

    @cute.kernel
    def kernel(
        self,
        tma_a: cute.CopyAtom,
        mA: cute.Tensor,
        tma_b: cute.CopyAtom,
        mB: cute.Tensor,
        mC: cute.Tensor,
        offs: cute.Tensor,
        tiled_mma: cute.TiledMma,
        a_smem: cute.ComposedLayout,
        b_smem: cute.ComposedLayout,
        tma_c: cute.CopyAtom | None,
        mC_tma: cute.Tensor | None,
        epi_smem: Any,  # a ComposedLayout with tma_store or tile_store, else None
        box_smem: Any,  # with tile_store, the same bytes as each warpgroup's TMA store boxes
    ) -> None:
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        cta, _, _ = cute.arch.block_idx()
        grid, _, _ = cute.arch.grid_dim()
        if warp == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            if cutlass.const_expr(self.tma_store or self.tile_store):
                cpasync.prefetch_descriptor(tma_c)
        # a cluster is cluster_m consecutive CTAs of the 1-D grid; it walks the pair order as one
        rank, walker, walkers = 0, cta, grid
        if cutlass.const_expr(self.cluster_m > 1):
            rank = cta % self.cluster_m
            walker, walkers = cta // self.cluster_m, grid // self.cluster_m

        smem = memory.SmemAllocator()
        storage = smem.allocate(self.storage)
        sC: Any = None
        sC_boxes = None
        if cutlass.const_expr(self.tma_store or self.tile_store):
            sC = smem.allocate_tensor(
                self.c_dtype, epi_smem.outer, byte_alignment=1024, swizzle=epi_smem.inner
            )
        if cutlass.const_expr(self.tile_store):
            sC_boxes = cute.make_tensor(sC.iterator, box_smem.outer)
        bytes_per_stage = cute.size_in_bytes(
            self.a_dtype, cute.slice_(a_smem, (None, None, 0))
        ) + cute.size_in_bytes(self.b_dtype, cute.slice_(b_smem, (None, None, 0)))
        # every consumer warp of every CTA the stage's B came from releases it
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ring_barriers.data_ptr(),
            num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(
                pipeline.Agent.Thread, self.cluster_m * self.num_mma_wg * 4
            ),
            tx_count=bytes_per_stage,
            cta_layout_vmnk=cute.make_layout((1, self.cluster_m, 1, 1)),
        )
        prefix = storage.tile_prefix.get_tensor(cute.make_layout(MAX_GROUPS + 1))
        if warp == 0:
            build_tile_prefix(offs, prefix, self.problem.prefix_unit)
        cute.arch.sync_threads()

        sA = storage.sA.get_tensor(a_smem.outer, swizzle=a_smem.inner)
        sB = storage.sB.get_tensor(b_smem.outer, swizzle=b_smem.inner)
        m_total, n_total = mC.shape
        walk = self._walk(prefix, offs, mA, m_total, n_total, walker, walkers)

        # B K-slices for every (n tile, k tile, group): (TMA, RestN, RestK, G); with a cluster each
        # CTA loads its 1/cluster_m share and multicasts it. In place, B's slices start at each group.
        tBsB, tBgB = None, None
        if cutlass.const_expr(not self.reads_in_place):
            gB = cute.local_tile(mB, cute.select(self.tile_mnk, mode=[1, 2]), (None, None, None))
            tBsB, tBgB = cpasync.tma_partition(
                tma_b,
                rank,
                cute.make_layout(self.cluster_m),
                cute.group_modes(sB, 0, 2),
                cute.group_modes(gB, 0, 2),
            )
        b_mask = None
        if cutlass.const_expr(self.cluster_m > 1):
            b_mask = cute.make_layout_image_mask(
                cute.make_layout((self.cluster_m, 1, 1)), (rank, 0, 0), mode=0
            )

        wg = cute.arch.make_warp_uniform(tidx // _THREADS_PER_WG)
        if wg == 0:
            cute.arch.setmaxregister_decrease(40)
            if warp == 0:
                self._produce(ring, walk, _Loads(tma_a, mA, sA, tma_b, mB, sB, tBsB, tBgB, b_mask, rank))
        else:
            cute.arch.setmaxregister_increase(232)
            out = _Output(mC, sC, tma_c, mC_tma, sC_boxes)
            self._consume(ring, walk, tiled_mma, sA, sB, out, rank, tidx, wg)

    @cute.jit
    def _produce(self, ring, walk: CtaWalk, loads: _Loads) -> None:
        """The producer warp: the TMA loads of every K tile of every tile this CTA computes, into the
        ring (in place: from each group's first row; with a cluster, this CTA's share of B multicast)."""
        state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
        group = cutlass.Int32(0)
        tile = walk.walker
        while tile < walk.total:
            work = tile_work(self.problem, walk.prefix, walk.offs, group, tile, walk.shape)
            group, a_row, n_tile, k_begin, k_end = (
                work.group,
                work.a_row,
                work.n_tile,
                work.k_begin,
                work.k_end,
            )
            if cutlass.const_expr(self.reads_in_place):
                # this group's chunks of A = dY^T and B = X^T, from its first row on
                if cutlass.const_expr(self.ragged):
                    tAsA, tAgA = self._a_slices(
                        loads.tma_a,
                        loads.sA,
                        self._ragged_rows(loads.mA, walk.offs, group),
                        a_row // self.tile_m,
                    )
                    gB_group = cute.local_tile(
                        self._ragged_rows(loads.mB, walk.offs, group),
                        cute.select(self.tile_mnk, mode=[1, 2]),
                        (n_tile, None),
                    )
                else:
                    start = self._group_start(walk.offs, group)
                    tAsA, tAgA = self._a_slices(
                        loads.tma_a, loads.sA, cute.domain_offset((0, start), loads.mA), a_row // self.tile_m
                    )
                    gB_group = cute.local_tile(
                        cute.domain_offset((0, start, 0), loads.mB),
                        cute.select(self.tile_mnk, mode=[1, 2]),
                        (n_tile, None, 0),
                    )
                sB_stages, gB_chunks = cpasync.tma_partition(
                    loads.tma_b,
                    0,
                    cute.make_layout(1),
                    cute.group_modes(loads.sB, 0, 2),
                    cute.group_modes(gB_group, 0, 2),
                )
                k_begin, k_end = 0, k_end - k_begin
            else:
                if cutlass.const_expr(self.cluster_m > 1):
                    a_row = a_row + self._cta_rows(work.row, work.row_end, loads.rank)[0] - work.row
                tAsA, tAgA = self._a_slices(
                    loads.tma_a, loads.sA, cute.domain_offset((a_row, 0), loads.mA), 0
                )
            b_group = 0 if cutlass.const_expr(self.k_grouped) else group
            for k in cutlass.range(k_begin, k_end):
                ring.producer_acquire(state)
                barrier = ring.producer_get_barrier(state)
                cute.copy(loads.tma_a, tAgA[(None, k)], tAsA[(None, state.index)], tma_bar_ptr=barrier)
                if cutlass.const_expr(self.reads_in_place):
                    cute.copy(
                        loads.tma_b, gB_chunks[(None, k)], sB_stages[(None, state.index)], tma_bar_ptr=barrier
                    )
                else:
                    cute.copy(
                        loads.tma_b,
                        loads.tBgB[(None, n_tile, k, b_group)],
                        loads.tBsB[(None, state.index)],
                        tma_bar_ptr=barrier,
                        mcast_mask=loads.b_mask,
                    )
                ring.producer_commit(state)
                state.advance()
            tile = tile + walk.walkers
        ring.producer_tail(state)

    @cute.jit
    def _a_slices(self, tma_a, sA, mA_from, m_tile):
        """TMA source/destination views of the A K-slices of the tile starting at ``mA_from``'s
        ``m_tile``-th M tile: ((TMA), stage) and ((TMA), k tile)."""
        gA = cute.local_tile(mA_from, cute.select(self.tile_mnk, mode=[0, 2]), (m_tile, None))
        return cpasync.tma_partition(
            tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2)
        )

    @cute.jit
    def _consume(self, ring, walk: CtaWalk, tiled_mma, sA, sB, out: _Output, rank, tidx, wg) -> None:
        """The consumer warpgroups: the wgmma main loop of every tile this CTA computes, then its
        epilogue (:meth:`_epilogue`, or :meth:`_store_staged` with TMA stores)."""
        n_total = out.mC.shape[1]
        # A/B fragments are per warpgroup (smem descriptors); C positions are per thread
        thr_mma = tiled_mma.get_slice((wg - 1) * _THREADS_PER_WG)
        consumer_tidx = tidx - _THREADS_PER_WG
        thr_c = tiled_mma.get_slice(consumer_tidx)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        tile_mn = cute.select(self.tile_mnk, mode=[0, 1])
        tCcC = thr_c.partition_C(cute.make_identity_tensor(tile_mn))
        acc = cute.make_rmem_tensor(tCcC.shape, self.acc_dtype)
        frag = cute.make_rmem_tensor(tCcC.shape, self.c_dtype)
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        epi: Any = None
        if cutlass.const_expr(self.tma_store):
            epi = self._make_epilogue(tiled_mma, out.sC, consumer_tidx)
        if cutlass.const_expr(self.tile_store):
            r2s = epilogue_r2s(tiled_mma, self.c_dtype, self.c_layout, self.acc_dtype)
            epi = (r2s, r2s.get_slice(consumer_tidx).partition_D(out.sC))
        epi_count = cutlass.Int32(0)  # slices stored through shared memory so far (buffer rotation)
        group = cutlass.Int32(0)
        tile = walk.walker
        while tile < walk.total:
            work = tile_work(self.problem, walk.prefix, walk.offs, group, tile, walk.shape)
            group, n_tile, k_begin, k_end, row, row_end = (
                work.group, work.n_tile, work.k_begin, work.k_end, work.row, work.row_end
            )  # fmt: skip
            if cutlass.const_expr(self.cluster_m > 1):
                row, row_end = self._cta_rows(row, row_end, rank)
            active = True
            if cutlass.const_expr(self.skip_empty_halves):
                active = tile_schedule.half_has_rows(row_end - row, wg - 1, self.half_m)
            # in place: what zeroing the rows past the group's end needs
            zero = None
            if cutlass.const_expr(self.in_place):
                zero = _ZeroTail(
                    sA,
                    sB,
                    walk.offs[group] - self._group_start(walk.offs, group),
                    k_begin,
                    wg - 1,
                    tidx % _THREADS_PER_WG,
                )
            # the first K tile's wgmma batch is peeled so that every later wait is unconditional: one
            # batch stays in flight and the stage read before it is released. A K-grouped tile of an
            # empty group has no K tiles and stores zeros.
            acc.fill(0.0)
            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
            warpgroup.fence()
            if k_end > k_begin:
                if active:
                    self._mma_k_tile(tiled_mma, acc, tCrA, tCrB, ring, read, k_begin, zero)
                    read.advance()
                    for k in cutlass.range(k_begin + 1, k_end):
                        self._mma_k_tile(tiled_mma, acc, tCrA, tCrB, ring, read, k, zero)
                        read.advance()
                        warpgroup.wait_group(1)
                        ring.consumer_release(release)
                        release.advance()
                    warpgroup.wait_group(0)
                    ring.consumer_release(release)
                    release.advance()
                else:
                    # rows past the group end: take part in every stage, compute nothing
                    for _k in cutlass.range(k_begin, k_end):
                        ring.consumer_wait(read)
                        read.advance()
                        ring.consumer_release(release)
                        release.advance()

            if cutlass.const_expr(self.tma_store):
                epi_count = self._store_staged(
                    epi, acc, out, row, n_tile, row_end - row, n_total - n_tile * self.tile_n, epi_count, tidx
                )
            elif cutlass.const_expr(self.tile_store):
                self._store_tile(epi, acc, out, group, work.a_row // self.tile_m, n_tile, tidx, wg)
            else:
                self._epilogue(acc, frag, thr_c, tCcC, out.mC, row, row_end, n_tile, n_total)
            tile = tile + walk.walkers
        if cutlass.const_expr(self.tma_store):
            store_group = epi.store_group  # (the DSL carries a name, not a field, through the if)
            if tidx == _STORE_THREAD:
                store_group.producer_tail()
        if cutlass.const_expr(self.tile_store):
            if tidx == wg * _THREADS_PER_WG:  # the shared buffers outlive every store reading them
                cute.arch.cp_async_bulk_wait_group(0, read=True)

    @cute.jit
    def _epilogue(self, acc, frag, thr_c, tCcC, mC, row, row_end, n_tile, n_total) -> None:
        """Store one tile from registers: whole tiles by vector stores, a tile cut by its group's end
        (or by N) element by element, rows inside the group only."""
        frag.store(acc.load().to(self.c_dtype))
        gC = cute.local_tile(
            cute.domain_offset((row, 0), mC), cute.select(self.tile_mnk, mode=[0, 1]), (0, n_tile)
        )
        tCgC = thr_c.partition_C(gC)
        rows_left = row_end - row
        cols_left = n_total - n_tile * self.tile_n
        if (rows_left >= self.tile_m) & (cols_left >= self.tile_n):
            cute.autovec_copy(frag, tCgC)
        else:
            for i in cutlass.range_constexpr(cute.size(frag)):
                r, col = tCcC[i]
                if (r < rows_left) & (col < cols_left):
                    tCgC[i] = self.c_dtype(acc[i])

    @cute.jit
    def _cta_rows(self, row, row_end, rank):
        """This CTA's (first row, row end) of the cluster's pair at ``row``
        (:func:`tile_schedule.cluster_rows`)."""
        return tile_schedule.cluster_rows(row, row_end, rank, self.tile_m, DEVICE)

    @cute.jit
    def _group_start(self, offs: cute.Tensor, group: cutlass.Int32) -> cutlass.Int32:
        start = cutlass.Int32(0)
        if group > 0:
            start = offs[group - 1]
        return start

    @cute.jit
    def _ragged_rows(self, m: cute.Tensor, offs: cute.Tensor, group: cutlass.Int32) -> cute.Tensor:
        """The TMA coordinates of an operand's rows of ``group`` in its 4-D ragged view
        (:func:`ragged_view`), as (cols, rows from the group's first): past the group's end TMA reads
        zeros."""
        start = self._group_start(offs, group)
        first, (bound, end) = ragged_rows(start, cutlass.max(offs[group] - start, cutlass.Int32(0)))
        return cute.domain_offset((0, first), m[(None, None, bound, end)])

    @cute.jit
    def _mma_k_tile(self, tiled_mma, acc, tCrA, tCrB, ring, read, k, zero) -> None:
        """Wait for K tile ``k`` in shared memory and issue its wgmma batch (not waited for). In place
        (``zero`` given), where the group ends inside the tile, first zero this warpgroup's half of
        the dY^T and X^T rows past the end (both: 0 x Inf is NaN)."""
        ring.consumer_wait(read)
        if cutlass.const_expr(self.in_place):
            chunk = self.tile_mnk[2]
            rows_left = zero.group_rows - (k - zero.k_begin) * chunk
            if rows_left < chunk:
                # this warpgroup's rows of each tile: its own 64 of dY^T, half of X^T's tile_n
                for operand, rows in ((zero.sA, _ROWS_PER_MMA_WG), (zero.sB, self.tile_n // self.num_mma_wg)):
                    row = zero.mma_wg * rows + zero.lane % rows
                    for kk in cutlass.range(rows_left + zero.lane // rows, chunk, _THREADS_PER_WG // rows):
                        operand[(row, kk, read.index)] = self.a_dtype(0)
                cute.arch.fence_proxy("async.shared", space="cta")
                cute.arch.barrier(barrier_id=Barrier.ZEROING, number_of_threads=self.consumer_threads)
        for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            cute.gemm(
                tiled_mma, acc, tCrA[(None, None, kb, read.index)], tCrB[(None, None, kb, read.index)], acc
            )
        warpgroup.commit_group()

    @cute.jit
    def _make_epilogue(self, tiled_mma, sC, consumer_tidx):
        """The staged C buffers with their two partitions: the register -> shared copy (stmatrix for
        16-bit C) and the shared -> global copy of cut tiles (16 bytes a thread, row by row); the
        coordinates of the latter; and the TMA store group that rotates the buffers."""
        r2s = epilogue_r2s(tiled_mma, self.c_dtype, self.c_layout, self.acc_dtype)
        s2g = epilogue_s2g(self.c_dtype, self.epi_tile, self.consumer_threads)
        thr_s2g = s2g.get_slice(consumer_tidx)
        store_group = pipeline.PipelineTmaStore.create(
            num_stages=_EPI_BUFFERS,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.consumer_threads),
        )
        return _StagedEpilogue(
            r2s,
            r2s.get_slice(consumer_tidx).partition_D(sC),
            sC,
            s2g,
            thr_s2g,
            thr_s2g.partition_S(sC),
            thr_s2g.partition_D(cute.make_identity_tensor(self.epi_tile)),
            store_group,
        )

    @cute.jit
    def _store_staged(
        self, epi: _StagedEpilogue, acc, out: _Output, row, n_tile, rows_left, cols_left, epi_count, tidx
    ):
        """Store a tile slice by slice through a free shared buffer. A tile whose rows all belong to
        its group leaves by one asynchronous TMA store per slice (N past the tensor end is clipped);
        a tile cut by its group end by 16-byte stores of the rows inside the group (and N) only."""
        r2s, tRS_sC, sC, s2g, thr_s2g, tSG_sC, tSG_cC, store_group = epi
        tma_c, mC_tma, mC = out.tma_c, out.mC_tma, out.mC
        barrier = pipeline.NamedBarrier(barrier_id=Barrier.STAGED_EPILOGUE, num_threads=self.consumer_threads)
        whole = rows_left >= self.tile_m
        tRS_acc = r2s.retile(acc)
        slice_shape = cute.shape(tRS_sC[(None, None, None, 0)])
        frag = cute.make_rmem_tensor(slice_shape, self.acc_dtype)
        frag_out = cute.make_rmem_tensor(slice_shape, self.c_dtype)
        per_slice = cute.size(frag)
        slices = self.tile_n // self.epi_tile[1]
        tile_mn = cute.select(self.tile_mnk, mode=[0, 1])
        gC = cute.local_tile(cute.domain_offset((row, 0), mC_tma), tile_mn, (0, n_tile))
        bSG_sC, bSG_gC = cpasync.tma_partition(
            tma_c, 0, cute.make_layout(1), cute.group_modes(sC, 0, 2), cute.zipped_divide(gC, self.epi_tile)
        )
        if not whole:
            # plain stores reuse buffers that no TMA store may still be reading
            if tidx == _STORE_THREAD:
                store_group.producer_tail()
            barrier.arrive_and_wait()
        for s in cutlass.range_constexpr(slices):
            for v in cutlass.range_constexpr(per_slice):
                frag[v] = tRS_acc[slice_value(s, v, per_slice)]
            frag_out.store(frag.load().to(self.c_dtype))
            buffer = (epi_count + s) % _EPI_BUFFERS
            cute.copy(r2s, frag_out, tRS_sC[(None, None, None, buffer)])
            # make the shared writes visible to the TMA unit (and to the other threads)
            cute.arch.fence_proxy("async.shared", space="cta")
            barrier.arrive_and_wait()
            if whole:
                # one thread: a bulk store is per thread (the DSL elects none for stores, unlike loads)
                if tidx == _STORE_THREAD:
                    cute.copy(tma_c, bSG_sC[(None, buffer)], bSG_gC[(None, (0, s))])
                    store_group.producer_commit()
                    # the next slice's buffer is free once at most _EPI_BUFFERS - 1 stores still read
                    store_group.producer_acquire()
            else:
                gS = cute.local_tile(
                    cute.domain_offset((row, 0), mC), self.epi_tile, (0, n_tile * slices + s)
                )
                tSG_gC = thr_s2g.partition_D(gS)
                for i in cutlass.range_constexpr(cute.size(tSG_gC, mode=[1])):
                    for j in cutlass.range_constexpr(cute.size(tSG_gC, mode=[2])):
                        r, col = tSG_cC[(0, i, j)]
                        if (r < rows_left) & (col + s * self.epi_tile[1] < cols_left):
                            cute.copy(s2g, tSG_sC[(None, i, j, buffer)], tSG_gC[(None, i, j)])
            barrier.arrive_and_wait()
        return epi_count + slices

    @cute.jit
    def _store_tile(self, epi, acc, out: _Output, group, m_tile, n_tile, tidx, wg) -> None:
        """``tile_store``: consumer warpgroup ``wg`` stores its 64 rows of a K-grouped tile. Its first
        thread waits until its previous stores have read the buffers (the wait the whole next main
        loop has covered), the warpgroup writes its accumulator there, and that thread issues one TMA
        store per box and commits them as one bulk group, which drains while the next tile runs. An
        FP32 tile takes two such rounds through the 64 KB of buffers."""
        r2s, tRS_sC = epi
        half = wg - 1
        store_thread = wg * _THREADS_PER_WG
        barrier_id = Barrier.TILE_STORE[0] + half
        tRS_acc = r2s.retile(acc)
        slice_shape = cute.shape(tRS_sC[(None, None, None, 0)])
        frag = cute.make_rmem_tensor(slice_shape, self.acc_dtype)
        frag_out = cute.make_rmem_tensor(slice_shape, self.c_dtype)
        per_slice = cute.size(frag)
        slices = self.tile_n // self.epi_tile[1]  # 128-row slices of the tile, as many boxes per half
        # this warpgroup's boxes of dW's (N, K, G) view: (box rows, box columns, column box)
        gC = cute.local_tile(out.mC_tma[(None, None, group)], self.box_tile, (m_tile * 2 + half, None))
        bSG_sC, bSG_gC = cpasync.tma_partition(
            out.tma_c,
            0,
            cute.make_layout(1),
            cute.group_modes(out.sC_boxes, 0, 2),
            cute.group_modes(gC, 0, 2),
        )
        for r in cutlass.range_constexpr(self.store_rounds):
            if tidx == store_thread:
                cute.arch.cp_async_bulk_wait_group(0, read=True)
            cute.arch.barrier(barrier_id=barrier_id, number_of_threads=_THREADS_PER_WG)
            for j in cutlass.range_constexpr(self.box_slices):
                for v in cutlass.range_constexpr(per_slice):
                    frag[v] = tRS_acc[slice_value(r * self.box_slices + j, v, per_slice)]
                frag_out.store(frag.load().to(self.c_dtype))
                cute.copy(r2s, frag_out, tRS_sC[(None, None, None, j)])
            # make the shared writes visible to the TMA unit, then let the store thread issue
            cute.arch.fence_proxy("async.shared", space="cta")
            cute.arch.barrier(barrier_id=barrier_id, number_of_threads=_THREADS_PER_WG)
            if tidx == store_thread:
                for j in cutlass.range_constexpr(self.box_slices):
                    column_box = n_tile * slices + r * self.box_slices + j
                    cute.copy(out.tma_c, bSG_sC[(None, 2 * j + half)], bSG_gC[(None, column_box)])
                cute.arch.cp_async_bulk_commit_group()
