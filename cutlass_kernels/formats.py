"""The MXFP8 format's constants, free of heavy imports so that every stage can name them.

OCP MX v1.0: E4M3 elements, one E8M0 (power-of-two, biased exponent) scale per block of 32 contiguous
elements along the GEMM reduction dimension. ``exact`` and ``fast`` are the two scale-selection rules
(see :mod:`cutlass_kernels.mxfp8`).
"""

MX_BLOCK = 32
E4M3_MAX = 448.0
E8M0_BIAS = 127
SCALE_MODES = ("exact", "fast")
