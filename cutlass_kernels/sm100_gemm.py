"""Blackwell (sm100a) grouped GEMM: TMA loads, tcgen05 MMA into tensor memory, persistent
warp-specialized CTAs.

Warp 5 loads A and B K-slices with TMA into a shared-memory ring, warp 4 issues tcgen05.mma into one
of two tensor-memory accumulators, and warps 0-3 drain the other accumulator to global memory, so the
epilogue of one tile overlaps the mainloop of the next. The tile order is that of
:func:`cutlass_kernels.cute_base.tile_work`, over a prefix built on the device from ``offs`` (no
recompile, no host sync, CUDA-graph capturable).

M-grouped (fprop, dgrad): the epilogue stores are predicated on the tile's group end (and N): rows of
a tile past its group belong to the next group and are never written. B may be K-major (fprop) or
N-major (dgrad, B^T in place). K-grouped (wgrad): A = dY^T and B = X^T, N-major views of row-padded
copies, each group reducing over its own row chunks; an empty group's tiles store zeros.

:class:`Sm100MxGroupedGemm` is the MXFP8 form: E4M3 operands and E8M0 scales per 32 elements of K, fed
to the block-scaled tcgen05 MMA. The loader warp also brings each K slice's scales (in the MMA's atom
layout, see :mod:`cutlass_kernels.mx_layout`) into shared memory and the MMA warp copies them to
tensor memory next to the accumulators. A's scales are laid out per tile, so a tile starting at any
row finds its 128 scale rows at its tile index.

``cta_pair`` (M-grouped only) runs the 2-CTA MMA (``cta_group::2``) on 256-row tiles: the pair (the two
CTAs of a cluster's M mode) computes one 256 x tile_n tile of one group; each CTA TMA-loads its own
128 rows of A and half of B's tile_n rows, and the leader CTA's MMA warp issues the MMA, which reads
both CTAs' shared memory and leaves each CTA's 128 accumulator rows in its own tensor memory, so every
CTA pulls half the B bytes per FLOP of the 1-CTA kernel. With ``cluster_n=2`` the cluster holds two
pairs on consecutive N tiles of the same rows and A's loads are multicast to both (another halving,
of A). The walk then runs over 256-row M tiles and ``cluster_n``-wide N tile groups, per cluster;
ragged groups work as in the 1-CTA kernel at the cost of up to 255 masked rows per group instead of
127. With every switch off the code traced is the 1-CTA kernel's alone.
"""

from typing import Any, NamedTuple

import cutlass
import cutlass.cute as cute
import cutlass.memory as memory
import cutlass.pipeline as pipeline
import cutlass.utils as utils
import cutlass.utils.blackwell_helpers as sm100_utils
from cuda.bindings import driver as cuda
from cutlass.cute.nvgpu import cpasync, tcgen05
from cutlass.tensor_utils import LayoutEnum
from cutlass.utils import blockscaled_layout

from cutlass_kernels.cute_base import MAX_GROUPS, CtaWalk, GroupedGemm, build_tile_prefix, tile_work
from cutlass_kernels.tile_schedule import GroupedProblem

_EPI_WARPS = (0, 1, 2, 3)
_MMA_WARP = 4
_TMA_WARP = 5
_ACC_STAGES = 2
_TMEM_COLUMNS = 512
_SF_VEC = 32
_SF_DTYPE = cutlass.Float8E8M0FNU
_SMEM_ALIGN = 1024  # bytes: the operand rings' alignment (a 128-byte swizzle's 8-row period)


class Barrier:
    """Named barrier ids (0 is the CTA's, of ``sync_threads``; 1 is left to CUTLASS's epilogue
    helpers, whose TMA-store epilogue syncs on it), one user each."""

    TMEM_ADDRESS = 2  # the epilogue warps and the MMA warp: the allocated tensor-memory address is read
    EPILOGUE_DONE = 3  # the epilogue warps, before tensor memory is freed


class _Place(NamedTuple):
    """This CTA's place in its cluster: the cluster's layout, its rank in it, its coordinate in the
    pair (``v``) and among the pairs on N; on pairs with MX, the 1-CTA MMA and the cluster layout
    that B's scales are loaded by."""

    cluster_vmnk: Any
    rank: Any
    v: Any
    n_in_cluster: Any
    tiled_mma_sfb: Any
    cluster_sfb_vmnk: Any


class _Operand(NamedTuple):
    """One TMA-loaded operand (A, B, or a scale tensor): its atom, global view and shared ring."""

    tma: Any
    gmem: Any
    smem: Any


class _MmaOperands(NamedTuple):
    """What the MMA warp reads: A's and B's shared rings, their scales' and the scales' layouts."""

    sA: Any
    sB: Any
    sSFA: Any
    sSFB: Any
    sfa_smem: Any
    sfb_smem: Any


def _tma_load(atom: Any, source: Any, stages: Any, handle: Any, mask: Any) -> None:
    """One TMA load of ``source`` into the ring stage ``handle`` acquired, completing on its barrier."""
    cute.copy(atom, source, stages[(None, handle.index)], tma_bar_ptr=handle.barrier, mcast_mask=mask)


class Sm100GroupedGemm(GroupedGemm):
    """A compiled-once grouped GEMM ``C[rows of g] = A[rows of g] @ op(B[g])`` (or, K-grouped,
    ``C[g] = A[:, rows of g] @ B[:, rows of g]^T``) for one tile shape; ``tile_m`` is 128, or 256 on
    CTA pairs."""

    mx = False

    def __init__(
        self,
        tile_m: int = 128,
        tile_n: int = 256,
        k_grouped: bool = False,
        *,
        cta_pair: bool = False,
        cluster_n: int = 1,
        acc_stages: int = _ACC_STAGES,
    ) -> None:
        self.pair = 2 if cta_pair else 1
        if tile_m != 128 * self.pair or tile_n not in (128, 256):
            allowed = "256x128, 256x256 on CTA pairs" if cta_pair else "128x128, 128x256"
            raise ValueError(f"sm100 tile {tile_m}x{tile_n} is not allowed; allowed: {allowed}")
        if cluster_n not in (1, 2) or (cluster_n > 1 and not cta_pair) or (cta_pair and k_grouped):
            raise ValueError(
                f"sm100 cluster_n={cluster_n}, cta_pair={cta_pair}, k_grouped={k_grouped} is not allowed; "
                "allowed: cluster_n 2 on M-grouped CTA pairs only"
            )
        # tensor memory per CTA: accumulators, then 4 scale columns per 32 rows of the A and B tiles
        columns = tile_n * acc_stages + ((tile_m // self.pair + tile_n) // 32 * 4 if self.mx else 0)
        if acc_stages not in (1, 2) or columns > _TMEM_COLUMNS:
            raise ValueError(
                f"tile {tile_m}x{tile_n} with {acc_stages} accumulator stages needs {columns} "
                f"tensor-memory columns; {_TMEM_COLUMNS} exist (1 or 2 stages)"
            )
        super().__init__(tile_m, tile_n, k_grouped)
        self.cta_pair, self.cluster_n, self.acc_stages = cta_pair, cluster_n, acc_stages
        # read, like c_layout / cta_tile_shape_mnk, by CUTLASS's epilogue
        self.use_2cta_instrs = cta_pair
        self.cta_group = tcgen05.CtaGroup.TWO if cta_pair else tcgen05.CtaGroup.ONE
        self.cluster_shape_mnk = (self.pair, cluster_n, 1)
        self.cluster_size = self.pair * cluster_n  # CTAs per cluster
        self.threads = 32 * (len(_EPI_WARPS) + 2)
        # MX on pairs only: the 1-CTA view of the MMA that B's scales are loaded by, and its cluster layout
        self.tiled_mma_sfb: Any = None
        self.cluster_sfb_vmnk: Any = None

    def _setup(self, a: cute.Tensor, b: cute.Tensor, c: cute.Tensor) -> None:
        self.a_dtype, self.b_dtype, self.c_dtype = a.element_type, b.element_type, c.element_type
        self.c_layout = LayoutEnum.from_tensor(c)
        majors = (LayoutEnum.from_tensor(a).mma_major_mode(), LayoutEnum.from_tensor(b).mma_major_mode())
        if cutlass.const_expr(self.mx):
            self.tiled_mma = self._mx_mma(majors, self.cta_group, self.tile_m)
            if cutlass.const_expr(self.cta_pair):
                # B's scales are loaded per CTA for the whole N tile, by a 1-CTA view of the MMA
                self.tiled_mma_sfb = self._mx_mma(majors, tcgen05.CtaGroup.ONE, self.tile_m // self.pair)
        else:
            self.tiled_mma = sm100_utils.make_trivial_tiled_mma(
                self.a_dtype,
                self.b_dtype,
                *majors,
                self.acc_dtype,
                self.cta_group,
                (self.tile_m, self.tile_n),
            )
        tile_k = cute.size(self.tiled_mma.shape_mnk, mode=[2]) * 4
        self.mma_tiler = (self.tile_m, self.tile_n, tile_k)
        self.problem = GroupedProblem(self.k_grouped, self.tile_m, self.tile_n, tile_k)
        self.cta_tile_shape_mnk = (self.tile_m // self.pair, self.tile_n, tile_k)
        self.epi_tile = sm100_utils.compute_epilogue_tile_shape(
            self.cta_tile_shape_mnk, self.cta_pair, self.c_layout, self.c_dtype
        )
        self.cluster_vmnk = cute.tiled_divide(
            cute.make_layout(self.cluster_shape_mnk), (self.tiled_mma.thr_id.shape,)
        )
        one_a = sm100_utils.make_smem_layout_a(self.tiled_mma, self.mma_tiler, self.a_dtype, 1)
        one_b = sm100_utils.make_smem_layout_b(self.tiled_mma, self.mma_tiler, self.b_dtype, 1)
        stage_bytes = cute.size_in_bytes(self.a_dtype, one_a) + cute.size_in_bytes(self.b_dtype, one_b)
        if cutlass.const_expr(self.mx):
            self.mma_tiler_sfb = self.cta_tile_shape_mnk
            if cutlass.const_expr(self.cta_pair):
                self.cluster_sfb_vmnk = cute.tiled_divide(
                    cute.make_layout(self.cluster_shape_mnk), (self.tiled_mma_sfb.thr_id.shape,)
                )
            for make in (blockscaled_layout.make_smem_layout_sfa, blockscaled_layout.make_smem_layout_sfb):
                stage_bytes += cute.size_in_bytes(_SF_DTYPE, make(self.tiled_mma, self.mma_tiler, _SF_VEC, 1))
        # the shared struct (the tile prefix, 4 KiB, and the barriers) ends before the next 1024-byte
        # boundary, where the rings start: 128-byte swizzled operands want 1024-byte aligned stages
        free = memory.get_smem_capacity_in_bytes("sm_100") - 4 * (MAX_GROUPS + 1) - _SMEM_ALIGN
        self.stages = free // stage_bytes
        self.a_smem = sm100_utils.make_smem_layout_a(
            self.tiled_mma, self.mma_tiler, self.a_dtype, self.stages
        )
        self.b_smem = sm100_utils.make_smem_layout_b(
            self.tiled_mma, self.mma_tiler, self.b_dtype, self.stages
        )
        self.sfa_smem, self.sfb_smem = None, None
        if cutlass.const_expr(self.mx):
            self.sfa_smem = blockscaled_layout.make_smem_layout_sfa(
                self.tiled_mma, self.mma_tiler, _SF_VEC, self.stages
            )
            self.sfb_smem = blockscaled_layout.make_smem_layout_sfb(
                self.tiled_mma, self.mma_tiler, _SF_VEC, self.stages
            )
        self.acc_cols = self.tile_n * self.acc_stages
        # scales: 4 columns per 32 rows of this CTA's A (SFA) and of B (SFB) per K tile, after the
        # accumulators
        self.sfa_cols = self.tile_m // self.pair // 32 * 4
        self.tmem_cols = (
            cute.arch.get_max_tmem_alloc_cols("sm_100")
            if cutlass.const_expr(self.mx)
            else memory.get_num_tmem_alloc_cols(self._acc_fragment(self.tiled_mma), arch="sm_100")
        )

    def _mx_mma(self, majors: tuple[Any, Any], cta_group: Any, tile_m: int) -> cute.TiledMma:
        """The block-scaled tiled MMA of ``cta_group`` on ``tile_m x tile_n`` tiles."""
        return sm100_utils.make_blockscaled_trivial_tiled_mma(
            self.a_dtype, self.b_dtype, *majors, _SF_DTYPE, _SF_VEC, cta_group, (tile_m, self.tile_n)
        )

    def _acc_fragment(self, tiled_mma: cute.TiledMma) -> cute.Tensor:
        """The accumulator stages' tensor-memory layout (MMA, MMA_M, MMA_N, STAGE)."""
        acc_shape = tiled_mma.partition_shape_C(self.mma_tiler[:2])
        return tiled_mma.make_fragment_C(cute.append(acc_shape, self.acc_stages))

    def _launch(self, a, b, c, offs, ctas, stream, sfa=None, sfb=None) -> None:
        """Trace-time body of ``__call__`` (with the MX kernel's ``sfa`` / ``sfb``): TMA atoms (2-CTA on
        pairs, A multicast across pairs), shared storage, kernel launch."""
        self._setup(a, b, c)
        a_stage = cute.slice_(self.a_smem, (None, None, None, 0))
        b_stage = cute.slice_(self.b_smem, (None, None, None, 0))
        # the layout of this kernel's cluster: one CTA, or pairs
        cluster = cute.make_layout((1, 1, 1, 1))
        op_a = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
        op_b = cpasync.CopyBulkTensorTileG2SOp(tcgen05.CtaGroup.ONE)
        if cutlass.const_expr(self.cta_pair):
            cluster = self.cluster_vmnk
            op_a = sm100_utils.cluster_shape_to_tma_atom_A(self.cluster_shape_mnk, self.tiled_mma.thr_id)
            op_b = sm100_utils.cluster_shape_to_tma_atom_B(self.cluster_shape_mnk, self.tiled_mma.thr_id)
        tma_a, mA = cute.nvgpu.make_tiled_tma_atom_A(
            op_a, a, a_stage, self.mma_tiler, self.tiled_mma, cluster.shape
        )
        tma_b, mB = cute.nvgpu.make_tiled_tma_atom_B(
            op_b, b, b_stage, self.mma_tiler, self.tiled_mma, cluster.shape
        )
        per_cta = cute.size_in_bytes(self.a_dtype, a_stage) + cute.size_in_bytes(self.b_dtype, b_stage)
        tma_sfa, mSFA, tma_sfb, mSFB = None, None, None, None
        if cutlass.const_expr(self.mx):
            tma_sfa, mSFA, tma_sfb, mSFB, scale_bytes = self._scale_tmas(a, b, sfa, sfb, op_a, cluster)
            per_cta += scale_bytes
        # on pairs, the leader's full barrier counts both CTAs' bytes
        self.tma_bytes = per_cta * self.pair

        @cute.struct
        class Storage:
            ring_barriers: cute.struct.MemRange[cutlass.Int64, self.stages * 2]
            acc_barriers: cute.struct.MemRange[cutlass.Int64, self.acc_stages * 2]
            tmem_dealloc: cutlass.Int64
            tmem_base: cutlass.Int32
            tile_prefix: cute.struct.MemRange[cutlass.Int32, MAX_GROUPS + 1]

        self.storage = Storage
        c3 = cute.make_tensor(c.iterator, cute.append(c.layout, cute.make_layout(1)))
        cluster_size = self.cluster_size
        grid = ctas
        if cutlass.const_expr(cluster_size > 1):
            grid = ctas // cluster_size * cluster_size
        self.kernel(
            self.tiled_mma,
            tma_a,
            mA,
            tma_b,
            mB,
            c3,
            offs,
            cluster,
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
        ).launch(grid=(grid, 1, 1), block=(self.threads, 1, 1), cluster=(cluster_size, 1, 1), stream=stream)

    def _scale_tmas(self, a, b, sfa, sfb, op_a, cluster):
        """TMA atoms for the scales (:meth:`_scale_tensors`): A's like A (on pairs per CTA half), B's
        (on pairs for the whole N tile into both CTAs of the pair); and the bytes they add to a
        stage per CTA."""
        mSFA, mSFB, sfa_stage, sfb_stage = self._scale_tensors(a, b, sfa, sfb)
        op_b, mma_b, layout_b = op_a, self.tiled_mma, cluster
        if cutlass.const_expr(self.cta_pair):
            op_b = sm100_utils.cluster_shape_to_tma_atom_SFB(self.cluster_shape_mnk, self.tiled_mma.thr_id)
            mma_b, layout_b = self.tiled_mma_sfb, self.cluster_sfb_vmnk
        tma_sfa, mSFA = cute.nvgpu.make_tiled_tma_atom_A(
            op_a, mSFA, sfa_stage, self.mma_tiler, self.tiled_mma, cluster.shape, internal_type=cutlass.Int16
        )
        tma_sfb, mSFB = cute.nvgpu.make_tiled_tma_atom_B(
            op_b, mSFB, sfb_stage, self.mma_tiler_sfb, mma_b, layout_b.shape, internal_type=cutlass.Int16
        )
        scale_bytes = cute.size_in_bytes(_SF_DTYPE, sfa_stage) + cute.size_in_bytes(_SF_DTYPE, sfb_stage)
        return tma_sfa, mSFA, tma_sfb, mSFB, scale_bytes

    def _scale_tensors(self, a, b, sfa, sfb):
        """The scales as MMA-layout tensors, and one stage of their shared-memory layouts: ``sfa`` holds
        the per-tile padded A scales, ``sfb`` B's per group, both flat uint8 in the MMA's atom layout
        (:mod:`cutlass_kernels.mx_layout`)."""
        k = cute.size(a, mode=[1])
        n, _, groups = b.shape
        padded_rows = cute.size(sfa) // (k // _SF_VEC)
        layouts = (
            blockscaled_layout.tile_atom_to_shape_SF((padded_rows, k, 1), _SF_VEC),
            blockscaled_layout.tile_atom_to_shape_SF((n, k, groups), _SF_VEC),
        )
        mSFA, mSFB = (
            cute.make_tensor(cute.recast_ptr(t.iterator, dtype=_SF_DTYPE), layout)
            for t, layout in zip((sfa, sfb), layouts, strict=True)
        )
        sfa_stage = cute.slice_(self.sfa_smem, (None, None, None, 0))
        sfb_stage = cute.slice_(self.sfb_smem, (None, None, None, 0))
        return mSFA, mSFB, sfa_stage, sfb_stage

    @cute.kernel
    def kernel(
        self,
        tiled_mma: cute.TiledMma,
        tma_a: cute.CopyAtom, mA: cute.Tensor,
        tma_b: cute.CopyAtom, mB: cute.Tensor,
        mC: cute.Tensor, offs: cute.Tensor,
        cluster_vmnk: cute.Layout,
        a_smem: cute.ComposedLayout, b_smem: cute.ComposedLayout,
        epi_tile: cute.Tile,
        # MX: the scales' TMA atoms, views and shared layouts; on pairs, B's scales' 1-CTA MMA and cluster
        tma_sfa: cute.CopyAtom | None, mSFA: cute.Tensor | None,
        tma_sfb: cute.CopyAtom | None, mSFB: cute.Tensor | None,
        sfa_smem: cute.Layout | None, sfb_smem: cute.Layout | None,
        tiled_mma_sfb: Any, cluster_sfb_vmnk: Any,
    ) -> None:  # fmt: skip
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        tidx, _, _ = cute.arch.thread_idx()
        cta, _, _ = cute.arch.block_idx()
        grid, _, _ = cute.arch.grid_dim()
        # the cluster walks the tile order as one: this CTA's place in the pair (v) and among the pairs
        rank, v, n_in_cluster, walker, walkers = None, 0, 0, cta, grid
        if cutlass.const_expr(self.cta_pair):
            rank = cute.arch.make_warp_uniform(cute.arch.block_idx_in_cluster())
            v, _, n_in_cluster, _ = cluster_vmnk.get_flat_coord(rank)
            walker, walkers = cta // self.cluster_size, grid // self.cluster_size
        if warp == _TMA_WARP:
            cpasync.prefetch_descriptor(tma_a)
            cpasync.prefetch_descriptor(tma_b)
            if cutlass.const_expr(self.mx):
                cpasync.prefetch_descriptor(tma_sfa)
                cpasync.prefetch_descriptor(tma_sfb)

        smem = memory.SmemAllocator()
        storage = smem.allocate(self.storage)
        ab_producer, ab_consumer = pipeline.PipelineTmaUmma.create(
            barrier_storage=storage.ring_barriers.data_ptr(),
            num_stages=self.stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            # on pairs, the MMAs of every pair an A load reaches release its stage
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, self.cluster_n),
            tx_count=self.tma_bytes,
            cta_layout_vmnk=cluster_vmnk,
            defer_sync=True,
        ).make_participants()
        acc_pipeline = pipeline.PipelineUmmaAsync.create(
            barrier_storage=storage.acc_barriers.data_ptr(),
            num_stages=self.acc_stages,
            producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread),
            consumer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, len(_EPI_WARPS) * self.pair),
            cta_layout_vmnk=cluster_vmnk,
            defer_sync=True,
        )
        tmem = memory.TmemAllocator(
            storage.tmem_base.ptr,
            barrier_for_retrieve=pipeline.NamedBarrier(
                barrier_id=Barrier.TMEM_ADDRESS, num_threads=32 * (len(_EPI_WARPS) + 1)
            ),
            allocator_warp_id=_EPI_WARPS[0],
            is_two_cta=self.cta_pair,
            two_cta_tmem_dealloc_mbar_ptr=storage.tmem_dealloc.ptr,
        )
        pipeline.pipeline_init_arrive(cluster_shape_mn=cluster_vmnk, is_relaxed=True)
        sA = smem.allocate_tensor(
            self.a_dtype, a_smem.outer, byte_alignment=_SMEM_ALIGN, swizzle=a_smem.inner
        )
        sB = smem.allocate_tensor(
            self.b_dtype, b_smem.outer, byte_alignment=_SMEM_ALIGN, swizzle=b_smem.inner
        )
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
        walk = self._walk(prefix, offs, mA, m_total, n_total, walker, walkers)
        thr_mma = tiled_mma.get_slice(v)
        acc_layout = self._acc_fragment(tiled_mma).layout
        place = _Place(cluster_vmnk, rank, v, n_in_cluster, tiled_mma_sfb, cluster_sfb_vmnk)

        if warp == _TMA_WARP:
            self._load(
                walk,
                ab_producer,
                thr_mma,
                place,
                _Operand(tma_a, mA, sA),
                _Operand(tma_b, mB, sB),
                _Operand(tma_sfa, mSFA, sSFA),
                _Operand(tma_sfb, mSFB, sSFB),
            )
        if warp == _MMA_WARP:
            tmem.wait_for_alloc()
            acc_ptr = tmem.retrieve_ptr(self.acc_dtype)
            smem_operands = _MmaOperands(sA, sB, sSFA, sSFB, sfa_smem, sfb_smem)
            if cutlass.const_expr(self.cta_pair):
                if v == 0:  # the 2-CTA MMA is issued by the pair's leader alone
                    self._mma(walk, ab_consumer, acc_pipeline, tiled_mma, acc_ptr, acc_layout, smem_operands)
            else:
                self._mma(walk, ab_consumer, acc_pipeline, tiled_mma, acc_ptr, acc_layout, smem_operands)
        if warp < _MMA_WARP:
            self._epilogue(
                walk, acc_pipeline, tmem, thr_mma, acc_layout, mC, n_total, epi_tile, n_in_cluster, tidx
            )

    @cute.jit
    def _load(self, walk: CtaWalk, ab_producer, thr_mma, place: _Place, a, b, sfa, sfb) -> None:
        """The TMA warp: A's and B's K slices (and their scales) of every tile this CTA computes into
        the ring; on pairs, each CTA its share, A multicast across the pairs of a cluster."""
        tile_mk = cute.select(self.mma_tiler, mode=[0, 2])
        # B[g] K-slices for every (n tile, k tile, group): (TMA, RestN, RestK, G)
        gB = cute.local_tile(b.gmem, cute.select(self.mma_tiler, mode=[1, 2]), (None, None, None))
        tBsB, tBgB = cpasync.tma_partition(
            b.tma,
            0,
            cute.make_layout(1),
            cute.group_modes(b.smem, 0, 3),
            cute.group_modes(thr_mma.partition_B(gB), 0, 3),
        )
        a_mask, b_mask, sfb_mask = None, None, None
        if cutlass.const_expr(self.cta_pair):
            a_mask = cpasync.create_tma_multicast_mask(
                place.cluster_vmnk, (place.v, 0, place.n_in_cluster, 0), mcast_mode=2
            )
            b_mask = cpasync.create_tma_multicast_mask(
                place.cluster_vmnk, (place.v, 0, place.n_in_cluster, 0), mcast_mode=1
            )
        if cutlass.const_expr(self.mx):
            # scale K-slices for every (tile / n tile, k tile, group)
            tAsSFA, tAgSFA = self._scale_partition(
                sfa.tma, sfa.smem, thr_mma.partition_A, sfa.gmem, tile_mk, place.n_in_cluster, self.cluster_n
            )
            sfb_partition, sfb_at, sfb_ctas = thr_mma.partition_B, 0, 1
            if cutlass.const_expr(self.cta_pair):
                sfb_coord = place.cluster_sfb_vmnk.get_flat_coord(place.rank)
                sfb_partition = place.tiled_mma_sfb.get_slice(0).partition_B
                sfb_at, sfb_ctas = sfb_coord[1], cute.slice_(place.cluster_sfb_vmnk, (0, None, 0, 0)).shape
                sfb_mask = cpasync.create_tma_multicast_mask(place.cluster_sfb_vmnk, sfb_coord, mcast_mode=1)
            tBsSFB, tBgSFB = self._scale_partition(
                sfb.tma,
                sfb.smem,
                sfb_partition,
                sfb.gmem,
                cute.select(self.mma_tiler_sfb, mode=[1, 2]),
                sfb_at,
                sfb_ctas,
            )
        group = cutlass.Int32(0)
        tile = walk.walker
        while tile < walk.total:
            work = tile_work(self.problem, walk.prefix, walk.offs, group, tile, walk.shape)
            group, n_tile = work.group, work.n_tile
            if cutlass.const_expr(self.cluster_n > 1):
                n_tile = n_tile * self.cluster_n + place.n_in_cluster
            b_group = 0 if cutlass.const_expr(self.k_grouped) else group
            gA = cute.local_tile(cute.domain_offset((work.a_row, 0), a.gmem), tile_mk, (0, None))
            tAsA, tAgA = cpasync.tma_partition(
                a.tma,
                place.n_in_cluster,
                cute.make_layout(self.cluster_n),
                cute.group_modes(a.smem, 0, 3),
                cute.group_modes(thr_mma.partition_A(gA), 0, 3),
            )
            ab_producer.reset()
            for k in cutlass.range(work.k_begin, work.k_end, unroll=1):
                handle = ab_producer.acquire_and_advance()
                _tma_load(a.tma, tAgA[(None, k)], tAsA, handle, a_mask)
                _tma_load(b.tma, tBgB[(None, n_tile, k, b_group)], tBsB, handle, b_mask)
                if cutlass.const_expr(self.mx):
                    _tma_load(sfa.tma, tAgSFA[(None, work.m_tile, k, 0)], tAsSFA, handle, a_mask)
                    _tma_load(sfb.tma, tBgSFB[(None, n_tile, k, group)], tBsSFB, handle, sfb_mask)
            tile = tile + walk.walkers
        ab_producer.tail()

    @cute.jit
    def _epilogue(
        self,
        walk: CtaWalk,
        acc_pipeline,
        tmem,
        thr_mma,
        acc_layout,
        mC,
        n_total,
        epi_tile,
        n_in_cluster,
        tidx,
    ) -> None:
        """The epilogue warps: allocate the accumulators' tensor memory, drain every tile's
        accumulator stage to C (zeros for a K-grouped tile of an empty group), free it."""
        tmem.allocate(self.tmem_cols)
        tmem.wait_for_alloc()
        acc_ptr = tmem.retrieve_ptr(self.acc_dtype)
        acc_base = cute.make_tensor(acc_ptr, acc_layout)
        acc_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Consumer, self.acc_stages)
        coords = cute.make_identity_tensor(mC.shape)
        tile_mn = cute.select(self.mma_tiler, mode=[0, 1])
        group = cutlass.Int32(0)
        tile = walk.walker
        while tile < walk.total:
            work = tile_work(self.problem, walk.prefix, walk.offs, group, tile, walk.shape)
            group, n_tile, row, row_end = work.group, work.n_tile, work.row, work.row_end
            if cutlass.const_expr(self.cluster_n > 1):
                n_tile = n_tile * self.cluster_n + n_in_cluster
            gC = cute.local_tile(cute.domain_offset((row, 0, 0), mC), tile_mn, (None, None, None))
            tile_args = (tidx, acc_base, thr_mma, gC, coords, row, row_end, n_tile, epi_tile)
            if cutlass.const_expr(self.cta_pair):  # M-grouped: every tile has K tiles
                acc_state = self._drain(*tile_args, acc_state, acc_pipeline)
            else:
                if work.k_end > work.k_begin:
                    acc_state = self._drain(*tile_args, acc_state, acc_pipeline)
                else:
                    self._store_zeros(
                        gC[(None, None, 0, n_tile, 0)], tidx, row_end - row, n_total - n_tile * self.tile_n
                    )
            tile = tile + walk.walkers
        pipeline.NamedBarrier(
            barrier_id=Barrier.EPILOGUE_DONE, num_threads=32 * len(_EPI_WARPS)
        ).arrive_and_wait()
        tmem.relinquish_alloc_permit()
        tmem.free(acc_ptr)

    @cute.jit
    def _mma(
        self, walk: CtaWalk, ab_consumer, acc_pipeline, tiled_mma, acc_ptr, acc_layout, smem: _MmaOperands
    ) -> None:
        """The MMA warp: every tile's K loop into a free accumulator stage. A tile without K tiles
        (K-grouped, empty group) takes no accumulator stage: its epilogue stores zeros."""
        sA, sB, sSFA, sSFB, sfa_smem, sfb_smem = smem
        acc_base = cute.make_tensor(acc_ptr, acc_layout)
        tCrA = tiled_mma.make_fragment_A(sA)
        tCrB = tiled_mma.make_fragment_B(sB)
        if cutlass.const_expr(self.mx):
            # A's scales right after the accumulators, B's after A's
            (tCtSFA, copy_sfa, tCsSFA_s2t, tCtSFA_s2t), (tCtSFB, copy_sfb, tCsSFB_s2t, tCtSFB_s2t) = (
                self._scales_in_tmem(tiled_mma, acc_ptr + column, scales, smem_layout, make)
                for column, scales, smem_layout, make in (
                    (self.acc_cols, sSFA, sfa_smem, blockscaled_layout.make_tmem_layout_sfa),
                    (self.acc_cols + self.sfa_cols, sSFB, sfb_smem, blockscaled_layout.make_tmem_layout_sfb),
                )
            )
        acc_state = pipeline.make_pipeline_state(pipeline.PipelineUserType.Producer, self.acc_stages)
        group = cutlass.Int32(0)
        tile = walk.walker
        while tile < walk.total:
            if cutlass.const_expr(self.cta_pair):
                k_begin, k_end = 0, walk.shape.k_tiles  # M-grouped: every tile takes all K tiles
            else:
                work = tile_work(self.problem, walk.prefix, walk.offs, group, tile, walk.shape)
                group, k_begin, k_end = work.group, work.k_begin, work.k_end
            if k_end > k_begin:
                acc = acc_base[(None, None, None, acc_state.index)]
                ab_consumer.reset()
                acc_pipeline.producer_acquire(acc_state)
                tiled_mma.set(tcgen05.Field.ACCUMULATE, False)
                for k in cutlass.range(k_begin, k_end, unroll=1):
                    handle = ab_consumer.wait_and_advance()
                    if cutlass.const_expr(self.mx):
                        stage = (None, None, None, None, handle.index)
                        cute.copy(copy_sfa, tCsSFA_s2t[stage], tCtSFA_s2t)
                        cute.copy(copy_sfb, tCsSFB_s2t[stage], tCtSFB_s2t)
                        tiled_mma.set(tcgen05.Field.ACCUMULATE, k != k_begin)
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
            tile = tile + walk.walkers
        acc_pipeline.producer_tail(acc_state)

    @cute.jit
    def _drain(
        self, tidx, acc_base, thr_mma, gC, coords, row, row_end, n_tile, epi_tile, acc_state, acc_pipeline
    ):
        """Store one tile's accumulator stage to ``gC`` (rows up to the group's end, N up to C's); the
        accumulator pipeline's state after it."""
        tile_mn = cute.select(self.mma_tiler, mode=[0, 1])
        cC = cute.local_tile(cute.domain_offset((row, 0, 0), coords), tile_mn, (None, None, None))
        return utils.gemm.sm100.epilogue(
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
            mC_mnl=cute.make_identity_tensor((row_end, coords.shape[1], 1)),
        )

    @cute.jit
    def _store_zeros(
        self, gC: cute.Tensor, tidx: cutlass.Int32, rows_left: cutlass.Int32, cols_left: cutlass.Int32
    ):
        """Zeros for the tile ``gC`` (tile_m x tile_n), one row per epilogue thread: the output of a
        K-grouped tile whose group is empty."""
        if tidx < rows_left:
            for col in cutlass.range(cutlass.min(cols_left, self.tile_n)):
                gC[(tidx, col)] = self.c_dtype(0)

    def _scale_partition(self, tma, s_scale, partition, m_scale, tile, cta_coord, cta_layout):
        """TMA source/destination views of one operand's scales for CTA ``cta_coord`` of the
        ``cta_layout`` CTAs that share each load: ((atom), stage) and ((atom), rest_mn, rest_k, rest_l)."""
        g_scale = cute.local_tile(m_scale, tile, (None, None, None))
        smem_view, gmem_view = cpasync.tma_partition(
            tma,
            cta_coord,
            cute.make_layout(cta_layout),
            cute.group_modes(s_scale, 0, 3),
            cute.group_modes(partition(g_scale), 0, 3),
        )
        return cute.filter_zeros(smem_view), cute.filter_zeros(gmem_view)

    def _scales_in_tmem(self, tiled_mma, tmem_ptr, s_scale, scale_smem, make_tmem_layout):
        """One operand's scales in tensor memory, and the shared -> tensor memory copy that fills them
        each K tile: (MMA operand, tiled copy, smem source per stage, tmem destination)."""
        layout = make_tmem_layout(
            tiled_mma, self.mma_tiler, _SF_VEC, cute.slice_(scale_smem, (None, None, None, 0))
        )
        t_scale = cute.make_tensor(cute.recast_ptr(tmem_ptr, dtype=_SF_DTYPE), layout)
        compact = cute.filter_zeros(t_scale)
        tiled_copy = tcgen05.make_s2t_copy(
            cute.make_copy_atom(tcgen05.Cp4x32x128bOp(self.cta_group), _SF_DTYPE), compact
        )
        thr_copy = tiled_copy.get_slice(0)
        source = tcgen05.get_s2t_smem_desc_tensor(
            tiled_copy, thr_copy.partition_S(cute.filter_zeros(s_scale))
        )
        return t_scale, tiled_copy, source, thr_copy.partition_D(compact)


class Sm100MxGroupedGemm(Sm100GroupedGemm):
    """MXFP8 form: ``C[rows of g] = (A * SFA)[rows of g] @ (B[g] * SFB[g])^T`` with E4M3 A, B. A's
    scales are padded per tile of ``tile_m`` rows (:func:`cutlass_kernels.mx_layout.pad_per_tile`)."""

    mx = True

    def __init__(
        self, tile_m: int = 128, tile_n: int = 128, *, cta_pair: bool = False, acc_stages: int = _ACC_STAGES
    ) -> None:
        super().__init__(tile_m, tile_n, cta_pair=cta_pair, acc_stages=acc_stages)

    @cute.jit
    def __call__(
        self,
        a: cute.Tensor,
        b: cute.Tensor,
        c: cute.Tensor,
        offs: cute.Tensor,
        sfa: cute.Tensor,
        sfb: cute.Tensor,
        ctas: cutlass.Int32,
        stream: cuda.CUstream,  # annotated: an exported kernel's C signature is built from the annotations
    ) -> None:
        """As :class:`Sm100GroupedGemm` (B K-major), plus ``sfa`` / ``sfb``: the flat atom-layout scales
        of :func:`cutlass_kernels.mx_layout.atom_layout` (A's padded per tile)."""
        self._launch(a, b, c, offs, ctas, stream, sfa, sfb)
