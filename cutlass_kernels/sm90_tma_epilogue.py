"""Hopper grouped GEMM whose epilogue overlaps the next tile's main loop: C goes registers ->
shared memory (``stmatrix`` for 16-bit C) -> global memory by asynchronous TMA stores.

Chosen over ping-pong consumers because it keeps the 128 x 256 tile that both warpgroups share: a
ping-pong warpgroup owns whole tiles, and a 128 x 256 FP32 accumulator (256 registers per thread)
does not fit one warpgroup, so ping-pong would halve the tile to 128 x 128 and double each tile's A
traffic per FLOP. Tiles cut by a group end leave shared memory by 16-byte stores of their rows in
the group only (their rows past the group belong to another group's tile); see
:mod:`cutlass_kernels.sm90_variant_gemm`.
"""

from __future__ import annotations

from cutlass_kernels.sm90_variant_gemm import Sm90VariantGemm


class Sm90TmaEpilogueGemm(Sm90VariantGemm):
    """``Sm90GroupedGemm``'s interface, stores through shared memory and TMA."""

    def __init__(self, tile_m: int = 128, tile_n: int = 256, k_grouped: bool = False) -> None:
        super().__init__(tile_m, tile_n, k_grouped, tma_store=True)
