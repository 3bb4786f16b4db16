"""Which kernels a stage of the device run may run: the ones that passed every earlier stage.

The kernel stages are ``smoke``, ``correctness`` and ``timing``, in that order. Each ends, for every
kernel it ran, in a *verdict* record of the results file (``verdict: true``; its ``status`` pass or
fail), keyed by ``op/out_dtype/variant``. A key may run in a stage only where every earlier stage
passed it, and also passed the kernel that serves it: the MX op on an arch without block-scaled MMA
runs the BF16 fprop kernel (``mx/bfloat16/v`` is served by ``fprop/bfloat16/v``), whose smoke test
is the MX op's. The fused SwiGLU backward kernel (key ``swiglu/bfloat16/default``), the MX
quantization kernel (``mxquant/bfloat16/default``) and the fused SwiGLU forward kernel
(``swiglufwd/bfloat16/default``) have correctness and timing only
(:func:`stages_of`): a first correctness case is their canary. A key with no verdict
from an earlier stage (never run, cut by the time limit) has not passed it. The latest verdict
counts, so a rerun into the same results file replaces one.

The tests and pipeline stages run on the CuTe kernels only where the kernels the layers run (the
three default BF16 GEMMs, the SwiGLU backward and the variants the per-shape table names) passed
every check stage of theirs before timing (:func:`gate`); elsewhere they run on the torch backend.
Torch-free, for the runner as for the checks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cutlass_kernels.vocabulary import BF16_OPS, kernel_op

KERNEL_STAGES = ("smoke", "correctness", "timing")
SWIGLU = "swiglu"  # the fused SwiGLU backward kernel: the op of its key, the name of its steps
SWIGLU_KEY = f"{SWIGLU}/bfloat16/default"
MX_QUANT = "mxquant"  # the MX quantization kernel: the op of its key
MX_QUANT_KEY = f"{MX_QUANT}/bfloat16/default"
SWIGLU_FWD = "swiglufwd"  # the fused SwiGLU forward kernel (and its MX forms): the op of its key
SWIGLU_FWD_KEY = f"{SWIGLU_FWD}/bfloat16/default"
_NO_SMOKE = (SWIGLU, MX_QUANT, SWIGLU_FWD)  # elementwise kernels, checked from their first correctness case
GATE_KEYS = (*(f"{op}/bfloat16/default" for op in BF16_OPS), SWIGLU_KEY)
# pins what backend="auto" resolves to (cutlass_kernels.api); the runner sets it when the gate is shut
BACKEND_ENV = "CUTLASS_KERNELS_BACKEND"
# selects the MX quantization kernel over the torch form (cutlass_kernels.quantize); the runner sets it
# for the MX op's timing once the kernel passed its correctness
MX_QUANTIZER_ENV = "CUTLASS_KERNELS_MX_QUANTIZER"


def key(op: str, out_dtype: str, variant: str) -> str:
    """The key of a kernel check: ``op/out_dtype/variant`` (``out_dtype`` a torch dtype name)."""
    return f"{op}/{out_dtype}/{variant}"


def split(k: str) -> tuple[str, str, str]:
    op, out_dtype, variant = k.split("/")
    return op, out_dtype, variant


def kernel_key(arch: str, k: str) -> str:
    """The key of the kernel that serves ``k`` on ``arch`` (itself but for MX without block scaling)."""
    op, out_dtype, variant = split(k)
    return k if op in _NO_SMOKE else key(kernel_op(arch, op), out_dtype, variant)


def stages_of(k: str) -> tuple[str, ...]:
    """The kernel stages key ``k`` goes through: all of them, but smoke for the elementwise kernels."""
    return KERNEL_STAGES[1:] if split(k)[0] in _NO_SMOKE else KERNEL_STAGES


def verdicts(records: Iterable[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(stage, key) -> the latest verdict record."""
    return {(r["stage"], r["key"]): r for r in records if r.get("verdict") is True and r.get("key")}


def refusal(arch: str, found: dict[tuple[str, str], dict[str, Any]], stage: str, k: str) -> str:
    """Why ``k`` may not run in ``stage`` (``""``: it may): the first earlier stage that did not pass
    it or its kernel."""
    if stage not in KERNEL_STAGES:
        raise ValueError(f"stage {stage!r} is not allowed; allowed: {', '.join(KERNEL_STAGES)}")
    served_by, own = kernel_key(arch, k), stages_of(k)
    if stage not in own:
        return f"{k} has no {stage} stage"
    for earlier in own[: own.index(stage)]:
        # the smoke test is the kernel's; the later checks are of the op, and of its kernel
        needed = [served_by] if earlier == "smoke" else list(dict.fromkeys([k, served_by]))
        for need in needed:
            got = found.get((earlier, need))
            if got is None:
                return f"{need} has no {earlier} verdict (not run, or cut)"
            if got.get("status") != "pass":
                why = got.get("error") or got.get("reason") or got.get("status")
                return f"{need} failed {earlier}: {why}"[:300]
    return ""


def gate(arch: str, found: dict[tuple[str, str], dict[str, Any]], keys: Iterable[str] = GATE_KEYS) -> str:
    """Why the tests and pipeline stages must not run on the CuTe kernels (``""``: they may): one of
    ``keys`` (the kernels the layers run: :data:`GATE_KEYS`, and those the per-shape variant table
    names) did not pass every stage of its before timing, with the kernel that serves it. Timing is no
    part of it: the gate is decided before timing runs, and a slow kernel is a result, not a wrong one."""
    return next((why for k in keys if (why := refusal(arch, found, "timing", k))), "")


def chosen_keys(variants_by_op: dict[str, list[str]]) -> tuple[str, ...]:
    """The gate's keys beyond :data:`GATE_KEYS`: each op's variants the per-shape table names (BF16
    out, as the layers run them)."""
    return tuple(key(op, "bfloat16", v) for op, names in sorted(variants_by_op.items()) for v in names)
