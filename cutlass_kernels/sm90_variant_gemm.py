"""The Hopper grouped GEMM with its tuning options, for side-by-side measurement against
:class:`cutlass_kernels.sm90_gemm.Sm90GroupedGemm` (same operands, tile order and group bounds).

Each option is one trace-time switch; the named variants (``sm90_tma_epilogue``, ``sm90_tail64``,
``sm90_cluster``) pick them, so one kernel body carries every combination:

- ``tma_store``: C goes through shared memory (``stmatrix`` for 16-bit C) in ``tile_m x epi_n``
  slices. A tile with all its rows in one group leaves by one asynchronous TMA store per slice, so
  the global writes overlap the next tile's main loop (the N tail is clipped by TMA itself); a tile
  cut by a group end leaves by 16-byte stores of its rows inside the group only (its rows past the
  group belong to another group's tile).
- ``skip_empty_halves``: each consumer warpgroup owns 64 rows of the tile; one whose rows all lie
  past the group end (a group's last tile with at most 64 rows left) consumes the ring without
  issuing wgmma, which halves that tile's tensor-core time (a 64-row tail tile).
- ``cluster_m = 2``: a 2x1 thread-block cluster takes two consecutive M tiles of one (group, N tile);
  each CTA loads half of the B tile and multicasts it to both. The tile walk runs over 256-row pairs;
  a pair with rows for one tile only is split into two 64-row halves, one per CTA
  (:func:`cutlass_kernels.tile_schedule.cluster_rows`). A CTA whose share has no rows still takes
  part in every stage (it receives and sends B, releases stages to both CTAs) but issues no wgmma
  and stores nothing.
"""

from __future__ import annotations

from typing import Any

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup

from cutlass_kernels import tile_schedule
from cutlass_kernels.cute_base import MAX_GROUPS, GroupedProblem, build_tile_prefix, tile_work, total_tiles

_SMEM_BYTES = 232448  # sm90 dynamic shared memory per CTA
_THREADS_PER_WG = 128
_EPI_BUFFER_BYTES = 8192  # one tile_m x epi_n slice of C in shared memory
_EPI_BUFFERS = 3  # TMA stores in flight; with 4 ring stages of 128x256x64 they still fit
_EPI_BARRIER = 1  # named barrier of the consumer warpgroups (0 is the CTA barrier)
_STORE_THREAD = 4 * 32  # the first consumer thread issues, commits and waits for the TMA stores
CLUSTER_SHAPES = (1, 2)


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


class Sm90VariantGemm:
    """A compiled-once grouped GEMM with the interface of ``Sm90GroupedGemm``, plus the switches in
    the module docstring."""

    def __init__(
        self,
        tile_m: int = 128,
        tile_n: int = 256,
        k_grouped: bool = False,
        *,
        tma_store: bool = False,
        skip_empty_halves: bool = False,
        cluster_m: int = 1,
    ) -> None:
        if tile_m != 128 or tile_n not in (128, 256):
            raise ValueError(f"sm90 tile {tile_m}x{tile_n} is not allowed; allowed: 128x128, 128x256")
        if cluster_m not in CLUSTER_SHAPES:
            raise ValueError(f"cluster_m={cluster_m} is not allowed; allowed: {CLUSTER_SHAPES}")
        self.tile_m, self.tile_n, self.k_grouped = tile_m, tile_n, k_grouped
        self.tma_store, self.cluster_m = tma_store, cluster_m
        # a cluster's CTA without rows must skip its wgmma, so clusters imply the skip
        self.skip_empty_halves = skip_empty_halves or cluster_m > 1
        self.acc_dtype = cutlass.Float32
        self.num_mma_wg = 2
        self.half_m = tile_m // self.num_mma_wg
        self.consumer_threads = self.num_mma_wg * _THREADS_PER_WG
        self.threads = _THREADS_PER_WG + self.consumer_threads

    def _setup(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor) -> None:
        self.a_dtype, self.b_dtype, self.c_dtype = a.element_type, b.element_type, c.element_type
        self.a_layout = utils.LayoutEnum.from_tensor(a)
        self.b_layout = utils.LayoutEnum.from_tensor(b)
        self.c_layout = utils.LayoutEnum.from_tensor(c)
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
        self.problem = GroupedProblem(self.k_grouped, self.tile_m * self.cluster_m, self.tile_n, tile_k)
        # C slices: their layout is built (and passed to the kernel) either way, allocated with tma_store
        self.epi_tile = epilogue_tile(self.tile_m, self.c_dtype.width)
        self.epi_smem = sm90_utils.make_smem_layout_epi(
            self.c_dtype, self.c_layout, self.epi_tile, _EPI_BUFFERS
        )
        epi_bytes = _EPI_BUFFERS * _EPI_BUFFER_BYTES if self.tma_store else 0
        stage_bytes = (self.tile_m + self.tile_n) * tile_k * self.a_dtype.width // 8
        self.stages = (_SMEM_BYTES - 4 * (MAX_GROUPS + 1) - 2048 - epi_bytes) // stage_bytes
        self.a_smem = sm90_utils.make_smem_layout_a(self.a_layout, self.tile_mnk, self.a_dtype, self.stages)
        self.b_smem = sm90_utils.make_smem_layout_b(self.b_layout, self.tile_mnk, self.b_dtype, self.stages)

    @cute.jit
    def __call__(
        self,
        a: cute.Tensor,
        b: cute.Tensor,
        c: cute.Tensor,
        offs: cute.Tensor,
        num_ctas: cutlass.Int32,
        stream,
    ) -> None:
        """Operands as for ``Sm90GroupedGemm``; with clusters, ``num_ctas`` is rounded down to whole
        clusters (at least one)."""
        if cutlass.const_expr(self.k_grouped):
            b = cute.make_tensor(b.iterator, cute.append(b.layout, cute.make_layout(1)))
        self._setup(a, b, c)
        a_tile = cute.slice_(self.a_smem, (None, None, 0))
        b_tile = cute.slice_(self.b_smem, (None, None, 0))
        tma_a, mA = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), a, a_tile, (self.tile_m, self.tile_mnk[2])
        )
        b_op = cpasync.CopyBulkTensorTileG2SOp()
        if cutlass.const_expr(self.cluster_m > 1):
            b_op = cpasync.CopyBulkTensorTileG2SMulticastOp()
        tma_b, mB = cpasync.make_tiled_tma_atom(
            b_op, b, b_tile, (self.tile_n, self.tile_mnk[2]), num_multicast=self.cluster_m
        )
        # without a TMA store the C operands are plain copies of c (never read by the kernel)
        tma_c, mC_tma = tma_a, c
        epi_cosize = 1
        if cutlass.const_expr(self.tma_store):
            tma_c, mC_tma = cpasync.make_tiled_tma_atom(
                cpasync.CopyBulkTensorTileS2GOp(),
                c,
                cute.slice_(self.epi_smem, (None, None, 0)),
                self.epi_tile,
            )
            epi_cosize = cute.cosize(self.epi_smem)

        @cute.struct
        class Storage:
            ring_barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            tile_prefix: cute.struct.MemRange[cutlass.Int32, MAX_GROUPS + 1]
            sA: cute.struct.Align[cute.struct.MemRange[self.a_dtype, cute.cosize(self.a_smem)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.b_dtype, cute.cosize(self.b_smem)], 1024]
            sC: cute.struct.Align[cute.struct.MemRange[self.c_dtype, epi_cosize], 1024]

        self.storage = Storage
        grid = num_ctas
        if cutlass.const_expr(self.cluster_m > 1):
            grid = cutlass.max(num_ctas // self.cluster_m, 1) * self.cluster_m
        self.kernel(
            tma_a,
            mA,
            tma_b,
            mB,
            tma_c,
            mC_tma,
            c,
            offs,
            self.tiled_mma,
            self.a_smem,
            self.b_smem,
            self.epi_smem,
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
        tma_c: cute.CopyAtom,
        mC_tma: cute.Tensor,
        mC: cute.Tensor,
        offs: cute.Tensor,
        tiled_mma: cute.TiledMma,
        a_smem: cute.ComposedLayout,
        b_smem: cute.ComposedLayout,
        epi_smem: cute.ComposedLayout,
    ) -> None:
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        cta, _, _ = cute.arch.block_idx()
        grid, _, _ = cute.arch.grid_dim()
        if warp == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            if cutlass.const_expr(self.tma_store):
                cpasync.prefetch_descriptor(tma_c)
        # a cluster is cluster_m consecutive CTAs of the 1-D grid; it walks the pair order as one
        rank = cta % self.cluster_m
        walker, walkers = cta // self.cluster_m, grid // self.cluster_m
        cluster_layout = cute.make_layout((self.cluster_m, 1, 1))

        storage = cutlass.utils.SmemAllocator().allocate(self.storage)
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
        # C rows per group when K-grouped (A's row count), else C's row count
        rows_out = cute.size(mA, mode=[0]) if cutlass.const_expr(self.k_grouped) else m_total
        tiles_m = cute.ceil_div(rows_out, self.problem.tile_m)
        tiles_n = cute.ceil_div(n_total, self.tile_n)
        k_tiles = cute.ceil_div(cute.size(mA, mode=[1]), self.tile_mnk[2])
        total = total_tiles(self.problem, prefix, cute.size(offs), tiles_m, tiles_n)

        # B K-slices for every (n tile, k tile, group): (TMA, RestN, RestK, G); with a cluster each
        # CTA loads its 1/cluster_m share and multicasts it
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
            b_mask = cute.make_layout_image_mask(cluster_layout, (rank, 0, 0), mode=0)

        wg = cute.arch.make_warp_uniform(tidx // _THREADS_PER_WG)
        if wg == 0:
            cute.arch.setmaxregister_decrease(40)
            if warp == 0:
                state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
                group = cutlass.Int32(0)
                tile = walker
                while tile < total:
                    group, a_row, n_tile, k_begin, k_end, row, row_end, _ = tile_work(
                        self.problem, prefix, offs, group, tile, tiles_m, tiles_n, k_tiles, rows_out
                    )
                    a_row = a_row + self._cta_rows(row, row_end, rank)[0] - row
                    b_group = 0 if cutlass.const_expr(self.k_grouped) else group
                    gA = cute.local_tile(
                        cute.domain_offset((a_row, 0), mA), cute.select(self.tile_mnk, mode=[0, 2]), (0, None)
                    )
                    tAsA, tAgA = cpasync.tma_partition(
                        tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2)
                    )
                    for k in cutlass.range(k_begin, k_end):
                        ring.producer_acquire(state)
                        barrier = ring.producer_get_barrier(state)
                        cute.copy(tma_a, tAgA[(None, k)], tAsA[(None, state.index)], tma_bar_ptr=barrier)
                        cute.copy(
                            tma_b,
                            tBgB[(None, n_tile, k, b_group)],
                            tBsB[(None, state.index)],
                            tma_bar_ptr=barrier,
                            mcast_mask=b_mask,
                        )
                        ring.producer_commit(state)
                        state.advance()
                    tile = tile + walkers
                ring.producer_tail(state)
        else:
            cute.arch.setmaxregister_increase(232)
            self._consume(
                tiled_mma, ring, sA, sB, tma_c, mC_tma, mC, storage, epi_smem, prefix, offs, walker, walkers,
                rank, total, tiles_m, tiles_n, k_tiles, rows_out, tidx, wg,
            )  # fmt: skip

    @cute.jit
    def _consume(
        self, tiled_mma, ring, sA, sB, tma_c, mC_tma, mC, storage, epi_smem, prefix, offs, walker, walkers,
        rank, total, tiles_m, tiles_n, k_tiles, rows_out, tidx, wg,
    ) -> None:  # fmt: skip
        """The consumer warpgroups: main loop and epilogue of every tile of this CTA."""
        n_total = mC.shape[1]
        # A/B fragments are per warpgroup (smem descriptors); C positions are per thread
        thr_mma = tiled_mma.get_slice((wg - 1) * _THREADS_PER_WG)
        consumer_tidx = tidx - _THREADS_PER_WG
        thr_c = tiled_mma.get_slice(consumer_tidx)
        tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
        tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
        tile_mn = cute.select(self.tile_mnk, mode=[0, 1])
        tCcC = thr_c.partition_C(cute.make_identity_tensor(tile_mn))
        acc = cute.make_rmem_tensor(tCcC.shape, self.acc_dtype)
        out = cute.make_rmem_tensor(tCcC.shape, self.c_dtype)
        read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
        epi: Any = None
        if cutlass.const_expr(self.tma_store):
            epi = self._make_epilogue(tiled_mma, storage, epi_smem, consumer_tidx)
        epi_count = cutlass.Int32(0)  # slices stored through shared memory so far (buffer rotation)
        group = cutlass.Int32(0)
        tile = walker
        while tile < total:
            group, _, n_tile, k_begin, k_end, row, row_end, _ = tile_work(
                self.problem, prefix, offs, group, tile, tiles_m, tiles_n, k_tiles, rows_out
            )
            row, row_end = self._cta_rows(row, row_end, rank)
            rows_left = row_end - row
            active = True
            if cutlass.const_expr(self.skip_empty_halves):
                active = tile_schedule.half_has_rows(rows_left, wg - 1, self.half_m)
            # the first K tile's wgmma batch is peeled so that every later wait is unconditional: one
            # batch stays in flight and the stage read before it is released. A K-grouped tile of an
            # empty group has no K tiles and stores zeros.
            acc.fill(0.0)
            tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
            warpgroup.fence()
            if k_end > k_begin:
                if active:
                    self._mma_k_tile(tiled_mma, acc, tCrA, tCrB, ring, read)
                    read.advance()
                    for _k in cutlass.range(k_begin + 1, k_end):
                        self._mma_k_tile(tiled_mma, acc, tCrA, tCrB, ring, read)
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

            cols_left = n_total - n_tile * self.tile_n
            whole_rows = rows_left >= self.tile_m
            if cutlass.const_expr(self.tma_store):
                epi_count = self._store_staged(
                    epi, acc, tma_c, mC_tma, mC, row, n_tile, rows_left, cols_left, epi_count, tidx
                )
            else:
                out.store(acc.load().to(self.c_dtype))
                if whole_rows & (cols_left >= self.tile_n):
                    gC = cute.local_tile(cute.domain_offset((row, 0), mC), tile_mn, (0, n_tile))
                    cute.autovec_copy(out, thr_c.partition_C(gC))
                else:
                    self._store_predicated(acc, tCcC, thr_c, mC, row, n_tile, rows_left, cols_left)
            tile = tile + walkers
        if cutlass.const_expr(self.tma_store):
            if tidx == _STORE_THREAD:
                epi[-1].producer_tail()

    @cute.jit
    def _cta_rows(self, row, row_end, rank):
        """This CTA's (first row, row end) of the walk's unit at ``row``: the unit itself without a
        cluster, else the CTA's tile or half tile of the pair (:func:`tile_schedule.cluster_rows`)."""
        rows = (row, row_end)
        if cutlass.const_expr(self.cluster_m > 1):
            rows = tile_schedule.cluster_rows(row, row_end, rank, self.tile_m, cutlass.min, cutlass.max)
        return rows

    @cute.jit
    def _mma_k_tile(self, tiled_mma, acc, tCrA, tCrB, ring, read) -> None:
        """Wait for one K tile in shared memory and issue its wgmma batch (not waited for)."""
        ring.consumer_wait(read)
        for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            cute.gemm(
                tiled_mma, acc, tCrA[(None, None, kb, read.index)], tCrB[(None, None, kb, read.index)], acc
            )
        warpgroup.commit_group()

    @cute.jit
    def _store_predicated(self, acc, tCcC, thr_c, mC, row, n_tile, rows_left, cols_left) -> None:
        """Per-element stores of a tile cut by its group's end or by N: rows at or past ``rows_left``
        belong to another group and are never written."""
        tile_mn = cute.select(self.tile_mnk, mode=[0, 1])
        tCgC = thr_c.partition_C(cute.local_tile(cute.domain_offset((row, 0), mC), tile_mn, (0, n_tile)))
        for i in cutlass.range_constexpr(cute.size(acc)):
            r, col = tCcC[i]
            if (r < rows_left) & (col < cols_left):
                tCgC[i] = self.c_dtype(acc[i])

    @cute.jit
    def _make_epilogue(self, tiled_mma, storage, epi_smem, consumer_tidx):
        """The staged C buffers with their two partitions: the register -> shared copy (stmatrix for
        16-bit C) and the shared -> global copy of cut tiles (16 bytes a thread, row by row); the
        coordinates of the latter; and the TMA store group that rotates the buffers."""
        sC = storage.sC.get_tensor(epi_smem.outer, swizzle=epi_smem.inner)
        r2s = epilogue_r2s(tiled_mma, self.c_dtype, self.c_layout, self.acc_dtype)
        s2g = epilogue_s2g(self.c_dtype, self.epi_tile, self.consumer_threads)
        thr_s2g = s2g.get_slice(consumer_tidx)
        store_group = pipeline.PipelineTmaStore.create(
            num_stages=_EPI_BUFFERS,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.consumer_threads),
        )
        return (
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
    def _store_staged(self, epi, acc, tma_c, mC_tma, mC, row, n_tile, rows_left, cols_left, epi_count, tidx):
        """Store a tile slice by slice through a free shared buffer. A tile whose rows all belong to
        its group leaves by one asynchronous TMA store per slice (N past the tensor end is clipped);
        a tile cut by its group end by 16-byte stores of the rows inside the group (and N) only."""
        r2s, tRS_sC, sC, s2g, thr_s2g, tSG_sC, tSG_cC, store_group = epi
        barrier = pipeline.NamedBarrier(barrier_id=_EPI_BARRIER, num_threads=self.consumer_threads)
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
