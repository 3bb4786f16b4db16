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
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass.cute.nvgpu import cpasync, warpgroup

from cutlass_kernels.cute_base import MAX_GROUPS, GroupedProblem, build_tile_prefix, tile_work, total_tiles

_SMEM_BYTES = 232448  # sm90 dynamic shared memory per CTA
_THREADS_PER_WG = 128


class Sm90GroupedGemm:
    """A compiled-once grouped GEMM ``C[rows of g] = A[rows of g] @ op(B[g])`` (or, K-grouped,
    ``C[g] = A[:, rows of g] @ B[:, rows of g]^T``) for one tile shape."""

    def __init__(self, tile_m: int = 128, tile_n: int = 256, k_grouped: bool = False) -> None:
        if tile_m != 128 or tile_n not in (128, 256):
            raise ValueError(f"sm90 tile {tile_m}x{tile_n} is not allowed; allowed: 128x128, 128x256")
        self.tile_m, self.tile_n, self.k_grouped = tile_m, tile_n, k_grouped
        self.acc_dtype = cutlass.Float32
        self.num_mma_wg = 2
        self.threads = (1 + self.num_mma_wg) * _THREADS_PER_WG

    def _setup(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor) -> None:
        self.a_dtype, self.b_dtype, self.c_dtype = a.element_type, b.element_type, c.element_type
        self.a_layout = utils.LayoutEnum.from_tensor(a)
        self.b_layout = utils.LayoutEnum.from_tensor(b)
        self.tiled_mma = sm90_utils.make_trivial_tiled_mma(
            self.a_dtype,
            self.b_dtype,
            self.a_layout.sm90_mma_major_mode(),
            self.b_layout.sm90_mma_major_mode(),
            self.acc_dtype,
            (self.num_mma_wg, 1, 1),
            tiler_mn=(64, self.tile_n),
        )
        tile_k = cute.size(self.tiled_mma.shape_mnk, mode=[2]) * 4
        self.tile_mnk = (self.tile_m, self.tile_n, tile_k)
        self.problem = GroupedProblem(self.k_grouped, self.tile_m, self.tile_n, tile_k)
        stage_bytes = (self.tile_m + self.tile_n) * tile_k * self.a_dtype.width // 8
        self.stages = (_SMEM_BYTES - 4 * (MAX_GROUPS + 1) - 1024) // stage_bytes
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
        """M-grouped: a (M, K); b (N, K, G) K- or N-major; c (M, N). K-grouped: a (N, R) and b (K, R),
        both N-major over the padded rows R; c (G * N, K). offs (G,) int32 row ends; num_ctas
        persistent CTAs (the SM count)."""
        if cutlass.const_expr(self.k_grouped):
            b = cute.make_tensor(b.iterator, cute.append(b.layout, cute.make_layout(1)))
        self._setup(a, b, c)
        a_tile = cute.slice_(self.a_smem, (None, None, 0))
        b_tile = cute.slice_(self.b_smem, (None, None, 0))
        tma_a, mA = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), a, a_tile, (self.tile_m, self.tile_mnk[2])
        )
        tma_b, mB = cpasync.make_tiled_tma_atom(
            cpasync.CopyBulkTensorTileG2SOp(), b, b_tile, (self.tile_n, self.tile_mnk[2])
        )

        @cute.struct
        class Storage:
            ring_barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            tile_prefix: cute.struct.MemRange[cutlass.Int32, MAX_GROUPS + 1]
            sA: cute.struct.Align[cute.struct.MemRange[self.a_dtype, cute.cosize(self.a_smem)], 1024]
            sB: cute.struct.Align[cute.struct.MemRange[self.b_dtype, cute.cosize(self.b_smem)], 1024]

        self.storage = Storage
        self.kernel(tma_a, mA, tma_b, mB, c, offs, self.tiled_mma, self.a_smem, self.b_smem).launch(
            grid=(num_ctas, 1, 1), block=(self.threads, 1, 1), stream=stream
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
    ) -> None:
        tidx, _, _ = cute.arch.thread_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        cta, _, _ = cute.arch.block_idx()
        grid, _, _ = cute.arch.grid_dim()
        if warp == 0:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)

        storage = cutlass.utils.SmemAllocator().allocate(self.storage)
        bytes_per_stage = cute.size_in_bytes(
            self.a_dtype, cute.slice_(a_smem, (None, None, 0))
        ) + cute.size_in_bytes(self.b_dtype, cute.slice_(b_smem, (None, None, 0)))
        ring = pipeline.PipelineTmaAsync.create(
            barrier_storage=storage.ring_barriers.data_ptr(),
            num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.num_mma_wg * 4),
            tx_count=bytes_per_stage,
            cta_layout_vmnk=cute.make_layout((1, 1, 1, 1)),
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
        tiles_m = cute.ceil_div(rows_out, self.tile_m)
        tiles_n = cute.ceil_div(n_total, self.tile_n)
        k_tiles = cute.ceil_div(cute.size(mA, mode=[1]), self.tile_mnk[2])
        total = total_tiles(self.problem, prefix, cute.size(offs), tiles_m, tiles_n)

        # B K-slices for every (n tile, k tile, group): (TMA, RestN, RestK, G)
        gB = cute.local_tile(mB, cute.select(self.tile_mnk, mode=[1, 2]), (None, None, None))
        tBsB, tBgB = cpasync.tma_partition(
            tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2)
        )

        wg = cute.arch.make_warp_uniform(tidx // _THREADS_PER_WG)
        if wg == 0:
            cute.arch.setmaxregister_decrease(40)
            if warp == 0:
                state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
                group = cutlass.Int32(0)
                tile = cta
                while tile < total:
                    group, a_row, n_tile, k_begin, k_end, _, _, _ = tile_work(
                        self.problem, prefix, offs, group, tile, tiles_m, tiles_n, k_tiles, rows_out
                    )
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
                        )
                        ring.producer_commit(state)
                        state.advance()
                    tile = tile + grid
                ring.producer_tail(state)
        else:
            cute.arch.setmaxregister_increase(232)
            # A/B fragments are per warpgroup (smem descriptors); C positions are per thread
            thr_mma = tiled_mma.get_slice((wg - 1) * _THREADS_PER_WG)
            thr_c = tiled_mma.get_slice(tidx - _THREADS_PER_WG)
            tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
            tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
            tile_mn = cute.select(self.tile_mnk, mode=[0, 1])
            tCcC = thr_c.partition_C(cute.make_identity_tensor(tile_mn))
            acc = cute.make_rmem_tensor(tCcC.shape, self.acc_dtype)
            out = cute.make_rmem_tensor(tCcC.shape, self.c_dtype)
            read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            group = cutlass.Int32(0)
            tile = cta
            while tile < total:
                group, _, n_tile, k_begin, k_end, row, row_end, _ = tile_work(
                    self.problem, prefix, offs, group, tile, tiles_m, tiles_n, k_tiles, rows_out
                )
                # the first K tile's wgmma batch is peeled so that every later wait is unconditional:
                # one batch stays in flight and the stage read before it is released. A K-grouped tile
                # of an empty group has no K tiles and stores zeros.
                acc.fill(0.0)
                tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
                warpgroup.fence()
                if k_end > k_begin:
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

                out.store(acc.load().to(self.c_dtype))
                gC = cute.local_tile(cute.domain_offset((row, 0), mC), tile_mn, (0, n_tile))
                tCgC = thr_c.partition_C(gC)
                rows_left = row_end - row
                cols_left = n_total - n_tile * self.tile_n
                if (rows_left >= self.tile_m) & (cols_left >= self.tile_n):
                    cute.autovec_copy(out, tCgC)
                else:
                    for i in cutlass.range_constexpr(cute.size(out)):
                        r, col = tCcC[i]
                        if (r < rows_left) & (col < cols_left):
                            tCgC[i] = self.c_dtype(acc[i])
                tile = tile + grid

    @cute.jit
    def _mma_k_tile(self, tiled_mma, acc, tCrA, tCrB, ring, read) -> None:
        """Wait for one K tile in shared memory and issue its wgmma batch (not waited for)."""
        ring.consumer_wait(read)
        for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            cute.gemm(
                tiled_mma, acc, tCrA[(None, None, kb, read.index)], tCrB[(None, None, kb, read.index)], acc
            )
        warpgroup.commit_group()
