"""Hopper grouped GEMM on 2x1 thread-block clusters: the two CTAs of a cluster take consecutive M
tiles of one (group, N tile), and each loads half of the shared B tile and multicasts it to both, so
B leaves L2 once per pair of tiles. A group with an odd M-tile count ends in a pair with rows for one
tile only: its two CTAs split that tile into 64-row halves, one consumer warpgroup each (the other
skips its wgmma), so neither idles a whole tile beside its partner. A CTA whose share has no rows
(last tile of at most 64 rows) still loads and multicasts its half of B and releases every stage to
both CTAs, but issues no wgmma and stores nothing. See :mod:`cutlass_kernels.sm90_variant_gemm`.
"""

from __future__ import annotations

from cutlass_kernels.sm90_variant_gemm import Sm90VariantGemm


class Sm90ClusterGemm(Sm90VariantGemm):
    """``Sm90GroupedGemm``'s interface on 2x1 clusters multicasting B (``num_ctas`` rounded down to
    an even count)."""

    def __init__(self, tile_m: int = 128, tile_n: int = 256, k_grouped: bool = False) -> None:
        super().__init__(tile_m, tile_n, k_grouped, cluster_m=2)
