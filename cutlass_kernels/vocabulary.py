"""The kernels' words, defined once and importable without torch or the DSL: the ops, the arches,
the CuTe backends that run them, the output dtypes, and which kernel runs an op on an arch.

An op is one api entry point (``fprop``: ``grouped_gemm``, ``dgrad``, ``wgrad``, ``mx``); the BF16
kernels are compiled for the first three. On an arch without block-scaled MMA the ``mx`` op runs the
BF16 ``fprop`` kernel on BF16 values, so there its kernel (what a compile, a smoke test or a failure
is about) is the ``fprop`` one.
"""

from __future__ import annotations

OPS = ("fprop", "dgrad", "wgrad", "mx")
BF16_OPS = ("fprop", "dgrad", "wgrad")
OUT_DTYPES = ("bfloat16", "float32")  # torch dtype names
ARCHES = ("sm_90a", "sm_100a")
# arch -> the compute-capability major of the GPUs it runs on
CAPABILITY_MAJOR = {"sm_90a": 9, "sm_100a": 10}
# CuTe backend name (``api.BACKENDS``) -> the arch its kernels are compiled for
CUTE_BACKENDS = {"cute-sm90": "sm_90a", "cute-sm100": "sm_100a"}
BLOCK_SCALED_ARCHES = ("sm_100a",)  # block-scaled MMA: the mx op has kernels of its own


def check_arch(arch: str) -> str:
    if arch not in ARCHES:
        raise ValueError(f"arch {arch!r} is not allowed; allowed: {', '.join(ARCHES)}")
    return arch


def check_op(op: str, allowed: tuple[str, ...] = OPS) -> str:
    if op not in allowed:
        raise ValueError(f"op {op!r} is not allowed; allowed: {', '.join(allowed)}")
    return op


def has_mx_kernel(arch: str) -> bool:
    """Whether ``arch`` has block-scaled kernels for the ``mx`` op (else it runs the fprop ones)."""
    return check_arch(arch) in BLOCK_SCALED_ARCHES


def kernel_op(arch: str, op: str) -> str:
    """The op whose kernels serve ``op`` on ``arch`` (``mx`` -> ``fprop`` without block-scaled MMA)."""
    return "fprop" if check_op(op) == "mx" and not has_mx_kernel(arch) else op
