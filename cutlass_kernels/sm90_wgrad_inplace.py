"""Hopper (sm90a) K-grouped wgrad that reads dY and X in place: no per-group zero-padded copies.

The default wgrad kernel reduces over 64-row chunks of row-padded copies of dY and X, which costs a
torch scatter over both operands before every launch (read + write of 2 * M * (N + K) BF16 bytes).
Here the producer TMA-loads every chunk of group ``g`` straight from the row-major operands, at row
``offs[g-1] + 64 j`` (TMA takes any row coordinate and zero-fills past the tensor end). A group's last
chunk then also holds the first rows of the next group; the product over rows is zero for rows where
either operand is zero, so each consumer warpgroup zeroes, in shared memory, the rows past the
group's end of its own half of the dY^T tile, fences the generic-proxy stores against the async proxy
that wgmma reads through, and syncs its 128 threads on a named barrier before issuing the wgmma. Only
a group's last chunk is touched, and only when the group's size is not a multiple of 64.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass.cute.nvgpu import cpasync, warpgroup

from cutlass_kernels.cute_base import MAX_GROUPS, build_tile_prefix, tile_work, total_tiles
from cutlass_kernels.sm90_gemm import Sm90GroupedGemm

_THREADS_PER_WG = 128
_ROWS_PER_MMA_WG = 64  # A rows (dY^T rows = N) of one consumer warpgroup's wgmma


class Sm90InPlaceWgrad(Sm90GroupedGemm):
    """``C[g] = A[:, rows of g] @ B[:, rows of g]^T`` with A = dY^T (N, M) and B = X^T (K, M), both
    N-major views of the row-major operands; the launch interface of :class:`Sm90GroupedGemm`."""

    def __init__(self, tile_m: int = 128, tile_n: int = 256) -> None:
        super().__init__(tile_m, tile_n, k_grouped=True)

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
        _, n_total = mC.shape
        rows_out = cute.size(mA, mode=[0])  # C rows per group: dY's width N
        tiles_m = cute.ceil_div(rows_out, self.tile_m)
        tiles_n = cute.ceil_div(n_total, self.tile_n)
        chunk = self.tile_mnk[2]
        total = total_tiles(self.problem, prefix, cute.size(offs), tiles_m, tiles_n)

        wg = cute.arch.make_warp_uniform(tidx // _THREADS_PER_WG)
        if wg == 0:
            cute.arch.setmaxregister_decrease(40)
            if warp == 0:
                state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.stages)
                group = cutlass.Int32(0)
                tile = cta
                while tile < total:
                    group, a_row, n_tile, k_begin, k_end, _, _, _ = tile_work(
                        self.problem, prefix, offs, group, tile, tiles_m, tiles_n, 0, rows_out
                    )
                    start = self._group_start(offs, group)
                    # this group's chunks of A = dY^T and B = X^T, from its first row on: (TMA, chunk)
                    gA = cute.local_tile(
                        cute.domain_offset((0, start), mA),
                        cute.select(self.tile_mnk, mode=[0, 2]),
                        (a_row // self.tile_m, None),
                    )
                    gB = cute.local_tile(
                        cute.domain_offset((0, start, 0), mB),
                        cute.select(self.tile_mnk, mode=[1, 2]),
                        (n_tile, None, 0),
                    )
                    tAsA, tAgA = cpasync.tma_partition(
                        tma_a, 0, cute.make_layout(1), cute.group_modes(sA, 0, 2), cute.group_modes(gA, 0, 2)
                    )
                    tBsB, tBgB = cpasync.tma_partition(
                        tma_b, 0, cute.make_layout(1), cute.group_modes(sB, 0, 2), cute.group_modes(gB, 0, 2)
                    )
                    for k in cutlass.range(k_end - k_begin):
                        ring.producer_acquire(state)
                        barrier = ring.producer_get_barrier(state)
                        cute.copy(tma_a, tAgA[(None, k)], tAsA[(None, state.index)], tma_bar_ptr=barrier)
                        cute.copy(tma_b, tBgB[(None, k)], tBsB[(None, state.index)], tma_bar_ptr=barrier)
                        ring.producer_commit(state)
                        state.advance()
                    tile = tile + grid
                ring.producer_tail(state)
        else:
            cute.arch.setmaxregister_increase(232)
            mma_wg = wg - 1
            thr_mma = tiled_mma.get_slice(mma_wg * _THREADS_PER_WG)
            thr_c = tiled_mma.get_slice(tidx - _THREADS_PER_WG)
            tCrA = tiled_mma.make_fragment_A(thr_mma.partition_A(sA))
            tCrB = tiled_mma.make_fragment_B(thr_mma.partition_B(sB))
            tile_mn = cute.select(self.tile_mnk, mode=[0, 1])
            tCcC = thr_c.partition_C(cute.make_identity_tensor(tile_mn))
            acc = cute.make_rmem_tensor(tCcC.shape, self.acc_dtype)
            out = cute.make_rmem_tensor(tCcC.shape, self.c_dtype)
            read = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            release = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.stages)
            lane = tidx % _THREADS_PER_WG
            group = cutlass.Int32(0)
            tile = cta
            while tile < total:
                group, _, n_tile, k_begin, k_end, row, row_end, _ = tile_work(
                    self.problem, prefix, offs, group, tile, tiles_m, tiles_n, 0, rows_out
                )
                rows_left = offs[group] - self._group_start(offs, group)  # the group's rows
                acc.fill(0.0)
                tiled_mma.set(warpgroup.Field.ACCUMULATE, True)
                warpgroup.fence()
                # as in the default kernel: the first chunk's batch is peeled, one batch stays in flight
                if k_end > k_begin:
                    self._mma_chunk(tiled_mma, acc, tCrA, tCrB, sA, ring, read, rows_left, mma_wg, lane)
                    read.advance()
                    for _k in cutlass.range(k_begin + 1, k_end):
                        rows_left = rows_left - chunk
                        self._mma_chunk(tiled_mma, acc, tCrA, tCrB, sA, ring, read, rows_left, mma_wg, lane)
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
                c_rows_left = row_end - row
                cols_left = n_total - n_tile * self.tile_n
                if (c_rows_left >= self.tile_m) & (cols_left >= self.tile_n):
                    cute.autovec_copy(out, tCgC)
                else:
                    for i in cutlass.range_constexpr(cute.size(out)):
                        r, col = tCcC[i]
                        if (r < c_rows_left) & (col < cols_left):
                            tCgC[i] = self.c_dtype(acc[i])
                tile = tile + grid

    @cute.jit
    def _group_start(self, offs: cute.Tensor, group: cutlass.Int32) -> cutlass.Int32:
        start = cutlass.Int32(0)
        if group > 0:
            start = offs[group - 1]
        return start

    @cute.jit
    def _mma_chunk(self, tiled_mma, acc, tCrA, tCrB, sA, ring, read, rows_left, mma_wg, lane) -> None:
        """Wait for one chunk in shared memory; where the group ends inside it (``rows_left`` < 64),
        zero this warpgroup's half of the dY^T rows past the end first; then issue its wgmma batch."""
        chunk = self.tile_mnk[2]
        ring.consumer_wait(read)
        if rows_left < chunk:
            m = mma_wg * _ROWS_PER_MMA_WG + lane % _ROWS_PER_MMA_WG
            lanes_per_row = _THREADS_PER_WG // _ROWS_PER_MMA_WG
            for kk in cutlass.range(rows_left + lane // _ROWS_PER_MMA_WG, chunk, lanes_per_row):
                sA[(m, kk, read.index)] = self.a_dtype(0)
            cute.arch.fence_proxy("async.shared", space="cta")
            cute.arch.barrier(barrier_id=1 + mma_wg, number_of_threads=_THREADS_PER_WG)
        for kb in cutlass.range_constexpr(cute.size(tCrA, mode=[2])):
            cute.gemm(
                tiled_mma, acc, tCrA[(None, None, kb, read.index)], tCrB[(None, None, kb, read.index)], acc
            )
        warpgroup.commit_group()
