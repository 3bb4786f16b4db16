"""Blackwell (sm100a) grouped GEMM on CTA pairs: 2-CTA tcgen05 MMA (``cta_group::2``) on 256-row tiles,
and optionally two pairs per cluster multicasting A.

The pair (the two CTAs of a cluster's M mode) computes one 256 x tile_n tile of one group: each CTA
TMA-loads its own 128 rows of A and half of B's tile_n rows, and the leader CTA's MMA warp issues the
2-CTA MMA, which reads both CTAs' shared memory and leaves each CTA's 128 accumulator rows in its own
tensor memory. Every CTA thus pulls half the B bytes per FLOP of the 1-CTA kernel. With
``cluster_n=2`` the cluster holds two pairs on consecutive N tiles of the same rows, and A's loads are
multicast to both (another halving, of A). The tile order is that of
:func:`cutlass_kernels.cute_base.tile_work` over 256-row M tiles and ``cluster_n``-wide N tile groups,
walked per cluster; stores are predicated on the group's last row, so ragged groups work as in the
1-CTA kernel, at the cost of up to 255 masked rows per group instead of 127.
M-grouped only (fprop, dgrad).
"""

from typing import Any

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.blackwell_helpers as sm100_utils
from cutlass.cute.nvgpu import cpasync, tcgen05
from cutlass.utils import blockscaled_layout

from cutlass_kernels.cute_base import MAX_GROUPS, GroupedProblem, build_tile_prefix, tile_work, total_tiles
from cutlass_kernels.sm100_gemm import (
    _EPI_WARPS,
    _MMA_WARP,
    _SF_DTYPE,
    _SF_VEC,
    _TMA_WARP,
    Sm100GroupedGemm,
    Sm100MxGroupedGemm,
)

_PAIR = 2  # CTAs per 2-CTA MMA


class Sm100PairGroupedGemm(Sm100GroupedGemm):
    """``C[rows of g] = A[rows of g] @ op(B[g])`` on 2-CTA MMA tiles of ``tile_m`` (256) rows; the
    launch interface of :class:`Sm100GroupedGemm`."""

    def __init__(self, tile_m: int = 256, tile_n: int = 256, cluster_n: int = 1) -> None:
        if tile_m != 256 or tile_n not in (128, 256) or cluster_n not in (1, 2):
            raise ValueError(
                f"sm100 2-CTA tile {tile_m}x{tile_n}, cluster_n {cluster_n} is not allowed; "
                "allowed: 256x128 or 256x256, cluster_n 1 or 2"
            )
        super().__init__(128, tile_n)
        self.tile_m, self.cluster_n = tile_m, cluster_n
        self.use_2cta_instrs = True
        self.cta_group = tcgen05.CtaGroup.TWO
        self.cluster_shape_mnk = (_PAIR, cluster_n, 1)
        # MX only: the 1-CTA view of the MMA that B's scales are loaded by, and its cluster layout
        self.tiled_mma_sfb: Any = None
        self.cluster_sfb_vmnk: Any = None

    def _setup(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor) -> None:
        self.a_dtype, self.b_dtype, self.c_dtype = a.element_type, b.element_type, c.element_type
        self.c_layout = utils.LayoutEnum.from_tensor(c)
        majors = (
            utils.LayoutEnum.from_tensor(a).mma_major_mode(),
            utils.LayoutEnum.from_tensor(b).mma_major_mode(),
        )
        if cutlass.const_expr(self.mx):
            self.tiled_mma = sm100_utils.make_blockscaled_trivial_tiled_mma(
                self.a_dtype,
                self.b_dtype,
                *majors,
                _SF_DTYPE,
                _SF_VEC,
                tcgen05.CtaGroup.TWO,
                (self.tile_m, self.tile_n),
            )
            # B's scales are loaded per CTA for the whole N tile, by a 1-CTA view of the MMA
            self.tiled_mma_sfb = sm100_utils.make_blockscaled_trivial_tiled_mma(
                self.a_dtype,
                self.b_dtype,
                *majors,
                _SF_DTYPE,
                _SF_VEC,
                tcgen05.CtaGroup.ONE,
                (self.tile_m // _PAIR, self.tile_n),
            )
        else:
            self.tiled_mma = sm100_utils.make_trivial_tiled_mma(
                self.a_dtype, *majors, self.acc_dtype, tcgen05.CtaGroup.TWO, (self.tile_m, self.tile_n)
            )
        tile_k = cute.size(self.tiled_mma.shape_mnk, mode=[2]) * 4
        self.mma_tiler = (self.tile_m, self.tile_n, tile_k)
        self.problem = GroupedProblem(False, self.tile_m, self.tile_n, tile_k)
        self.cta_tile_shape_mnk = (self.tile_m // _PAIR, self.tile_n, tile_k)
        self.epi_tile = sm100_utils.compute_epilogue_tile_shape(
            self.cta_tile_shape_mnk, True, self.c_layout, self.c_dtype
        )
        self.cluster_vmnk = cute.tiled_divide(
            cute.make_layout(self.cluster_shape_mnk), (self.tiled_mma.thr_id.shape,)
        )
        one_a = sm100_utils.make_smem_layout_a(self.tiled_mma, self.mma_tiler, self.a_dtype, 1)
        one_b = sm100_utils.make_smem_layout_b(self.tiled_mma, self.mma_tiler, self.b_dtype, 1)
        stage_bytes = cute.size_in_bytes(self.a_dtype, one_a) + cute.size_in_bytes(self.b_dtype, one_b)
        self.sfa_smem, self.sfb_smem = None, None
        if cutlass.const_expr(self.mx):
            self.mma_tiler_sfb = (self.tile_m // _PAIR, self.tile_n, tile_k)
            self.cluster_sfb_vmnk = cute.tiled_divide(
                cute.make_layout(self.cluster_shape_mnk), (self.tiled_mma_sfb.thr_id.shape,)
            )
            for make in (blockscaled_layout.make_smem_layout_sfa, blockscaled_layout.make_smem_layout_sfb):
                stage_bytes += cute.size_in_bytes(_SF_DTYPE, make(self.tiled_mma, self.mma_tiler, _SF_VEC, 1))
        free = utils.get_smem_capacity_in_bytes("sm_100") - 4 * (MAX_GROUPS + 1) - 1024
        self.stages = free // stage_bytes
        self.a_smem = sm100_utils.make_smem_layout_a(
            self.tiled_mma, self.mma_tiler, self.a_dtype, self.stages
        )
        self.b_smem = sm100_utils.make_smem_layout_b(
            self.tiled_mma, self.mma_tiler, self.b_dtype, self.stages
        )
        self.tmem_cols = utils.get_num_tmem_alloc_cols(self._acc_fragment(self.tiled_mma), arch="sm_100")
        if cutlass.const_expr(self.mx):
            self.sfa_smem = blockscaled_layout.make_smem_layout_sfa(
                self.tiled_mma, self.mma_tiler, _SF_VEC, self.stages
            )
            self.sfb_smem = blockscaled_layout.make_smem_layout_sfb(
                self.tiled_mma, self.mma_tiler, _SF_VEC, self.stages
            )
            self.acc_cols = self.tile_n * self.acc_stages
            self.sfa_cols = self.tile_m // _PAIR // 32 * 4
            self.tmem_cols = cute.arch.get_max_tmem_alloc_cols("sm_100")

    def _launch(self, a, b, c, offs, sfa, sfb, num_ctas, stream) -> None:
        """Trace-time body of ``__call__``: TMA atoms (2-CTA, A multicast across pairs), storage,
        and a cluster launch over the largest multiple of the cluster size within ``num_ctas``."""
        self._setup(a, b, c)
        a_stage = cute.slice_(self.a_smem, (None, None, None, 0))
        b_stage = cute.slice_(self.b_smem, (None, None, None, 0))
        thr_id = self.tiled_mma.thr_id
        tma_a, mA = cute.nvgpu.make_tiled_tma_atom_A(
            sm100_utils.cluster_shape_to_tma_atom_A(self.cluster_shape_mnk, thr_id),
            a,
            a_stage,
            self.mma_tiler,
            self.tiled_mma,
            self.cluster_vmnk.shape,
        )
        tma_b, mB = cute.nvgpu.make_tiled_tma_atom_B(
            sm100_utils.cluster_shape_to_tma_atom_B(self.cluster_shape_mnk, thr_id),
            b,
            b_stage,
            self.mma_tiler,
            self.tiled_mma,
            self.cluster_vmnk.shape,
        )
        # the leader's full barrier counts both CTAs' bytes
        per_cta = cute.size_in_bytes(self.a_dtype, a_stage) + cute.size_in_bytes(self.b_dtype, b_stage)
        tma_sfa, mSFA, tma_sfb, mSFB = None, None, None, None
        if cutlass.const_expr(self.mx):
            tma_sfa, mSFA, tma_sfb, mSFB, scale_bytes = self._pair_scale_tmas(a, b, sfa, sfb)
            per_cta += scale_bytes
        self.tma_bytes = per_cta * _PAIR

        @cute.struct
        class Storage:
            ring_barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            acc_barriers: cute.struct.MemRange[cutlass.Int64, self.acc_stages * 2]
            tmem_dealloc: cutlass.Int64
            tmem_base: cutlass.Int32
            tile_prefix: cute.struct.MemRange[cutlass.Int32, MAX_GROUPS + 1]

        self.pair_storage = Storage
        cluster_size = _PAIR * self.cluster_n
        c3 = cute.make_tensor(c.iterator, cute.append(c.layout, cute.make_layout(1)))
        self.kernel(
            self.tiled_mma,
            tma_a,
            mA,
            tma_b,
            mB,
            c3,
            offs,
            self.cluster_vmnk,
            self.a_smem,
            self.b_smem,
            self.epi_tile,
            tma_sfa,
            mSFA,
            tma_sfb,
            mSFB,
            self.sfa_smem,
            self.sfb_smem,
            self.tiled_mma_sfb,
            self.cluster_sfb_vmnk,
        ).launch(
            grid=(num_ctas // cluster_size * cluster_size, 1, 1),
            block=(self.threads, 1, 1),
            cluster=(cluster_size, 1, 1),
            stream=stream,
        )

    def _pair_scale_tmas(self, a, b, sfa, sfb):
        """TMA atoms for the scales (:meth:`_scale_tensors`; A's padded per 256-row tile): A's per CTA
        half like A, B's for the whole N tile into both CTAs of the pair. Also the bytes they add to a
        stage per CTA."""
        mSFA, mSFB, sfa_stage, sfb_stage = self._scale_tensors(a, b, sfa, sfb)
        thr_id = self.tiled_mma.thr_id
        tma_sfa, mSFA = cute.nvgpu.make_tiled_tma_atom_A(
            sm100_utils.cluster_shape_to_tma_atom_A(self.cluster_shape_mnk, thr_id),
            mSFA,
            sfa_stage,
            self.mma_tiler,
            self.tiled_mma,
            self.cluster_vmnk.shape,
            internal_type=cutlass.Int16,
        )
        tma_sfb, mSFB = cute.nvgpu.make_tiled_tma_atom_B(
            sm100_utils.cluster_shape_to_tma_atom_SFB(self.cluster_shape_mnk, thr_id),
            mSFB,
            sfb_stage,
            self.mma_tiler_sfb,
            self.tiled_mma_sfb,
            self.cluster_sfb_vmnk.shape,
            internal_type=cutlass.Int16,
        )
        scale_bytes = cute.size_in_bytes(_SF_DTYPE, sfa_stage) + cute.size_in_bytes(_SF_DTYPE, sfb_stage)
        return tma_sfa, mSFA, tma_sfb, mSFB, scale_bytes

    @cute.kernel
    def kernel(
        self,
        tiled_mma: cute.TiledMma,
        tma_a: cute.CopyAtom,
        mA: cute.Tensor,
        tma_b: cute.CopyAtom,
        mB: cute.Tensor,
        mC: cute.Tensor,
        offs: cute.Tensor,
        cluster_vmnk: cute.Layout,
        a_smem: cute.ComposedLayout,
        b_smem: cute.ComposedLayout,
        epi_tile: cute.Tile,
        tma_sfa: cute.CopyAtom | None,
        mSFA: cute.Tensor | None,
        tma_sfb: cute.CopyAtom | None,
        mSFB: cute.Tensor | None,
        sfa_smem: cute.Layout | None,
        sfb_smem: cute.Layout | None,
        tiled_mma_sfb: Any,
        cluster_sfb_vmnk: Any,
    ) -> None:
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        tidx, _, _ = cute.arch.thread_idx()
        cta, _, _ = cute.arch.block_idx()
        grid, _, _ = cute.arch.grid_dim()
        rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
        v, _, n_in_cluster, _ = cluster_vmnk.get_flat_coord(rank)
        is_leader = v == 0
        cluster_size = _PAIR * self.cluster_n
        cluster, clusters = cta // cluster_size, grid // cluster_size
        if warp == _TMA_WARP:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            if cutlass.const_expr(self.mx):
                cpasync.prefetch_descriptor(tma_sfa)
                cpasync.prefetch_descriptor(tma_sfb)

        smem = utils.SmemAllocator()
        storage = smem.allocate(self.pair_storage)
        mcast_a = self.cluster_n  # pairs receiving each A load
        ab_producer, ab_consumer = pipeline.PipelineTmaUmma.create(
            barrier_storage=storage.ring_barriers.data_ptr(),
            num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, mcast_a),
            tx_count=self.tma_bytes,
            cta_layout_vmnk=cluster_vmnk,
            defer_sync=True,
        ).make_participants()
        acc_pipeline = pipeline.PipelineUmmaAsync.create(
            barrier_storage=storage.acc_barriers.data_ptr(),
            num_stages=self.acc_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, len(_EPI_WARPS) * _PAIR),
            cta_layout_vmnk=cluster_vmnk,
            defer_sync=True,
        )
        tmem = utils.TmemAllocator(
            storage.tmem_base.ptr,
            barrier_for_retrieve=pipeline.NamedBarrier(barrier_id=2, num_threads=32 * (len(_EPI_WARPS) + 1)),
            allocator_warp_id=_EPI_WARPS[0],
            is_two_cta=True,
            two_cta_tmem_dealloc_mbar_ptr=storage.tmem_dealloc.ptr,
        )
        pipeline.pipeline_init_arrive(cluster_shape_mn=cluster_vmnk, is_relaxed=True)
        sA = smem.allocate_tensor(self.a_dtype, a_smem.outer, byte_alignment=128, swizzle=a_smem.inner)
        sB = smem.allocate_tensor(self.b_dtype, b_smem.outer, byte_alignment=128, swizzle=b_smem.inner)
        sSFA, sSFB = None, None
        if cutlass.const_expr(self.mx):
            sSFA = smem.allocate_tensor(_SF_DTYPE, sfa_smem, byte_alignment=128)
            sSFB = smem.allocate_tensor(_SF_DTYPE, sfb_smem, byte_alignment=128)
        prefix = storage.tile_prefix.get_tensor(cute.make_layout(MAX_GROUPS + 1))
        pipeline.pipeline_init_wait(cluster_shape_mn=cluster_vmnk)
        if warp == _TMA_WARP:
            build_tile_prefix(offs, prefix, self.problem.prefix_unit)
        cute.arch.sync_threads()

        m_total, n_total, _ = mC.shape
        tiles_n = cute.ceil_div(n_total, self.tile_n)
        cluster_tiles_n = cute.ceil_div(tiles_n, self.cluster_n)  # N tiles of one cluster step
        k_tiles = cute.ceil_div(cute.size(mA, mode=[1]), self.mma_tiler[2])
        total = total_tiles(self.problem, prefix, cute.size(offs), 0, cluster_tiles_n)
        work_args = (prefix, offs)
        work_shape = (0, cluster_tiles_n, k_tiles, m_total)
        thr_mma = tiled_mma.get_slice(v)
        acc_layout = self._acc_fragment(tiled_mma).layout
        tile_mk = cute.select(self.mma_tiler, mode=[0, 2])
        tile_mn = cute.select(self.mma_tiler, mode=[0, 1])

        if warp == _TMA_WARP:
            gB = cute.local_tile(mB, cute.select(self.mma_tiler, mode=[1, 2]), (None, None, None))
            tBsB, tBgB = cpasync.tma_partition(
                tma_b,
                0,
                cute.make_layout(1),
                cute.group_modes(sB, 0, 3),
                cute.group_modes(thr_mma.partition_B(gB), 0, 3),
            )
            a_mask = cpasync.create_tma_multicast_mask(cluster_vmnk, (v, 0, n_in_cluster, 0), mcast_mode=2)
            b_mask = cpasync.create_tma_multicast_mask(cluster_vmnk, (v, 0, n_in_cluster, 0), mcast_mode=1)
            if cutlass.const_expr(self.mx):
                # A's scales for every (256-row tile, k tile) like A; B's for every (n tile, k tile, group)
                gSFA = cute.local_tile(mSFA, tile_mk, (None, None, None))
                tAsSFA, tAgSFA = cpasync.tma_partition(
                    tma_sfa,
                    n_in_cluster,
                    cute.make_layout(self.cluster_n),
                    cute.group_modes(sSFA, 0, 3),
                    cute.group_modes(thr_mma.partition_A(gSFA), 0, 3),
                )
                tAsSFA, tAgSFA = cute.filter_zeros(tAsSFA), cute.filter_zeros(tAgSFA)
                sfb_coord = cluster_sfb_vmnk.get_flat_coord(rank)
                gSFB = cute.local_tile(mSFB, cute.select(self.mma_tiler_sfb, mode=[1, 2]), (None, None, None))
                tBsSFB, tBgSFB = cpasync.tma_partition(
                    tma_sfb,
                    sfb_coord[1],
                    cute.make_layout(cute.slice_(cluster_sfb_vmnk, (0, None, 0, 0)).shape),
                    cute.group_modes(sSFB, 0, 3),
                    cute.group_modes(tiled_mma_sfb.get_slice(0).partition_B(gSFB), 0, 3),
                )
                tBsSFB, tBgSFB = cute.filter_zeros(tBsSFB), cute.filter_zeros(tBgSFB)
                sfb_mask = cpasync.create_tma_multicast_mask(cluster_sfb_vmnk, sfb_coord, mcast_mode=1)
            group = cutlass.Int32(0)
            tile = cluster
            while tile < total:
                group, a_row, n_step, _, _, _, _, m_tile = tile_work(
                    self.problem, *work_args, group, tile, *work_shape
                )
                n_tile = n_step * self.cluster_n + n_in_cluster
                gA = cute.local_tile(cute.domain_offset((a_row, 0), mA), tile_mk, (0, None))
                tAsA, tAgA = cpasync.tma_partition(
                    tma_a,
                    n_in_cluster,
                    cute.make_layout(self.cluster_n),
                    cute.group_modes(sA, 0, 3),
                    cute.group_modes(thr_mma.partition_A(gA), 0, 3),
                )
                ab_producer.reset()
                for k in cutlass.range(k_tiles, unroll=1):
                    handle = ab_producer.acquire_and_advance()
                    cute.copy(
                        tma_a,
                        tAgA[(None, k)],
                        tAsA[(None, handle.index)],
                        tma_bar_ptr=handle.barrier,
                        mcast_mask=a_mask,
                    )
                    cute.copy(
                        tma_b,
                        tBgB[(None, n_tile, k, group)],
                        tBsB[(None, handle.index)],
                        tma_bar_ptr=handle.barrier,
                        mcast_mask=b_mask,
                    )
                    if cutlass.const_expr(self.mx):
                        cute.copy(
                            tma_sfa,
                            tAgSFA[(None, m_tile, k, 0)],
                            tAsSFA[(None, handle.index)],
                            tma_bar_ptr=handle.barrier,
                            mcast_mask=a_mask,
                        )
                        cute.copy(
                            tma_sfb,
                            tBgSFB[(None, n_tile, k, group)],
                            tBsSFB[(None, handle.index)],
                            tma_bar_ptr=handle.barrier,
                            mcast_mask=sfb_mask,
                        )
                tile = tile + clusters
            ab_producer.tail()

        if warp == _MMA_WARP:
            tmem.wait_for_alloc()
            acc_ptr = tmem.retrieve_ptr(self.acc_dtype)
            if is_leader:  # the 2-CTA MMA is issued by the pair's leader alone
                acc_base = cute.make_tensor(acc_ptr, acc_layout)
                tCrA = tiled_mma.make_fragment_A(sA)
                tCrB = tiled_mma.make_fragment_B(sB)
                if cutlass.const_expr(self.mx):
                    tCtSFA, copy_sfa, tCsSFA_s2t, tCtSFA_s2t = self._scales_in_tmem(
                        tiled_mma,
                        acc_ptr + self.acc_cols,
                        sSFA,
                        sfa_smem,
                        blockscaled_layout.make_tmem_layout_sfa,
                    )
                    tCtSFB, copy_sfb, tCsSFB_s2t, tCtSFB_s2t = self._scales_in_tmem(
                        tiled_mma,
                        acc_ptr + self.acc_cols + self.sfa_cols,
                        sSFB,
                        sfb_smem,
                        blockscaled_layout.make_tmem_layout_sfb,
                    )
                acc_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.acc_stages)
                tile = cluster
                while tile < total:
                    acc = acc_base[(None, None, None, acc_state.index)]
                    ab_consumer.reset()
                    acc_pipeline.producer_acquire(acc_state)
                    tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
                    for k in cutlass.range(k_tiles, unroll=1):
                        handle = ab_consumer.wait_and_advance()
                        if cutlass.const_expr(self.mx):
                            stage = (None, None, None, None, handle.index)
                            cute.copy(copy_sfa, tCsSFA_s2t[stage], tCtSFA_s2t)
                            cute.copy(copy_sfb, tCsSFB_s2t[stage], tCtSFB_s2t)
                            tiled_mma.set(tcgen05.Field.ACCUMULATE, k != 0)
                            ab = (None, None, None, handle.index)
                            cute.gemm(tiled_mma, acc, [tCrA[ab], tCtSFA], [tCrB[ab], tCtSFB], acc)
                        else:
                            for kb in cutlass.range(cute.size(tCrA, mode=[2]), unroll_full=True):
                                cute.gemm(
                                    tiled_mma,
                                    acc,
                                    tCrA[(None, None, kb, handle.index)],
                                    tCrB[(None, None, kb, handle.index)],
                                    acc,
                                )
                                tiled_mma.set(tcgen05.Field.ACCUMULATE, True)
                        handle.release()
                    acc_pipeline.producer_commit(acc_state)
                    acc_state.advance()
                    tile = tile + clusters
                acc_pipeline.producer_tail(acc_state)

        if warp < _MMA_WARP:
            tmem.allocate(self.tmem_cols)
            tmem.wait_for_alloc()
            acc_ptr = tmem.retrieve_ptr(self.acc_dtype)
            acc_base = cute.make_tensor(acc_ptr, acc_layout)
            acc_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.acc_stages)
            coords = cute.make_identity_tensor(mC.shape)
            group = cutlass.Int32(0)
            tile = cluster
            while tile < total:
                group, _, n_step, _, _, row, row_end, _ = tile_work(
                    self.problem, *work_args, group, tile, *work_shape
                )
                n_tile = n_step * self.cluster_n + n_in_cluster
                gC = cute.local_tile(cute.domain_offset((row, 0, 0), mC), tile_mn, (None, None, None))
                cC = cute.local_tile(cute.domain_offset((row, 0, 0), coords), tile_mn, (None, None, None))
                acc_state = utils.gemm.sm100.epilogue(
                    self,
                    tidx,
                    acc_base,
                    thr_mma.partition_C(gC),
                    epi_tile,
                    lambda x: x,
                    (0, n_tile, 0),
                    acc_state,
                    acc_pipeline,
                    tCcC_base=thr_mma.partition_C(cC),
                    mC_mnl=cute.make_identity_tensor((row_end, n_total, 1)),
                )
                tile = tile + clusters
            pipeline.NamedBarrier(barrier_id=3, num_threads=32 * len(_EPI_WARPS)).arrive_and_wait()
            tmem.relinquish_alloc_permit()
            tmem.free(acc_ptr)


class Sm100PairMxGroupedGemm(Sm100PairGroupedGemm):
    """MXFP8 on CTA pairs: 256 x 256 x 128 block-scaled tiles, one accumulator stage (each CTA's 128 x 256
    FP32 accumulator takes 256 of its 512 tensor-memory columns, its scales 48 more); A's scales padded
    per 256-row tile (:func:`cutlass_kernels.mx_layout.pad_per_tile`)."""

    mx = True

    def __init__(self, tile_m: int = 256, tile_n: int = 256) -> None:
        super().__init__(tile_m, tile_n)
        self.acc_stages = 1

    __call__ = Sm100MxGroupedGemm.__call__
