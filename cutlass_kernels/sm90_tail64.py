"""Hopper grouped GEMM with 64-row tail tiles: in a group's last M tile with at most 64 rows left,
the consumer warpgroup of the empty 64-row half consumes the ring without issuing wgmma, so the
tile costs half the tensor-core time of a full one. Tile order, loads and stores are those of the
default kernel; see :mod:`cutlass_kernels.sm90_variant_gemm`.
"""

from __future__ import annotations

from cutlass_kernels.sm90_variant_gemm import Sm90VariantGemm


class Sm90Tail64Gemm(Sm90VariantGemm):
    """``Sm90GroupedGemm``'s interface, skipping the MMA of 64-row halves without rows."""

    def __init__(self, tile_m: int = 128, tile_n: int = 256, k_grouped: bool = False) -> None:
        super().__init__(tile_m, tile_n, k_grouped, skip_empty_halves=True)
