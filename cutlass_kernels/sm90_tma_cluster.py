"""Hopper grouped GEMM with every sm90 option together: 2x1 clusters multicasting B (with 64-row
halves for pairs of one tile and skipped empty halves) and the TMA-store epilogue, to measure whether
their gains add up; see :mod:`cutlass_kernels.sm90_variant_gemm`.
"""

from __future__ import annotations

from cutlass_kernels.sm90_variant_gemm import Sm90VariantGemm


class Sm90TmaClusterGemm(Sm90VariantGemm):
    """``Sm90GroupedGemm``'s interface on 2x1 clusters multicasting B, storing through TMA."""

    def __init__(self, tile_m: int = 128, tile_n: int = 256, k_grouped: bool = False) -> None:
        super().__init__(tile_m, tile_n, k_grouped, tma_store=True, cluster_m=2)
