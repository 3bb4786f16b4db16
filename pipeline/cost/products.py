"""What a layer's products ran as, and so which tensor-core peak each is held to.

The routed GEMMs' MXFP8 products are formed by the grouped-GEMM backend that ran (the shard's
``kernels.gemm``): block-scaled MXFP8 tensor cores on Blackwell (``cute-sm100``), the BF16 values of the
MXFP8 operands on BF16 tensor cores on Hopper (``cute-sm90``, no block-scaled MMA), exactly dequantized
float32 operands in the torch reference. A rate is held to the peak of what ran: emulated MXFP8 to the
BF16 peak, the float32 reference to none (the presets hold no float32 peak). The backward's GEMMs and
the shared expert multiply in the layer dtype.
"""

from __future__ import annotations

NATIVE = "native block-scaled"
EMULATED = "emulated: BF16 tensor cores"
REFERENCE = "float32 reference"
# The grouped-GEMM backend -> how it forms an MXFP8 product (the published ``mxfp8Products`` words).
MXFP8_PRODUCTS = {"cute-sm100": NATIVE, "cute-sm90": EMULATED, "torch": REFERENCE}
# How each runs, as the preset's peak it is held to (None: a product no preset has a peak for).
_MXFP8_PEAK = {NATIVE: "fp8_tflops", EMULATED: "bf16_tflops", REFERENCE: None}


def mxfp8_products(precision: str, gemm: str | None) -> str | None:
    """How the routed MXFP8 products ran; None for BF16 layers or where the backend is unrecorded."""
    if precision != "mxfp8" or gemm is None:
        return None
    return MXFP8_PRODUCTS.get(gemm)


def dense_peak(dtype: str) -> str | None:
    """The peak of a product in the layer dtype: BF16 tensor cores for bfloat16, none for float32."""
    return "bf16_tflops" if dtype == "bfloat16" else None


def routed_peak(precision: str, gemm: str | None, dtype: str) -> str | None:
    """The peak the routed forward GEMMs ran at (a key of a preset's peaks), None where no preset peak
    is what ran (the float32 reference, float32 layers, an unrecorded backend)."""
    if precision == "bf16":
        return dense_peak(dtype)
    products = mxfp8_products(precision, gemm)
    return None if products is None else _MXFP8_PEAK[products]
