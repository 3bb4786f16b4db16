"""The cells of a suite's matrix: a workload (what is timed, at which EP degree, shape and load), a
variant (implementation, precision, pipeline) and an execution (one of each).

A workload's name, and so every execution id, is context-free: it names the kind, the EP degree, the
width F and the load, then every dimension that differs from the report's shape (:data:`REFERENCE`),
so the report's workloads keep their names (``training-ep32-f3072-imb2.0``) and two executions of one
id are the same execution whichever suite lists them (``inference-ep1-f2048-t1024-d8192-e256-k8-s0``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.base.implementations import implementation

PROFILES: dict[str, tuple[float, ...]] = {
    "balanced": (1.0,) * 10,
    "a": (7.5, 2.5, 4.5, 0.6, 1.8, 0.9, 2.2, 0.7, 1.6, 0.8),
    "b": (0.7, 5.8, 1.2, 0.6, 3.6, 1.0, 7.2, 0.8, 2.3, 0.7),
}
# The report's shape at full scale: T tokens per GPU, D, E routed experts, top-K, shared experts. The
# scales' keys (conf/scale/*.yaml) are written for it; another shape is scaled by the same ratios.
REFERENCE: dict[str, int] = {"tokens": 2048, "d_model": 7168, "num_experts": 384, "top_k": 6, "num_shared": 1}
# How a dimension other than the report's shows in a workload's name.
_NAMED = {"tokens": "t", "d_model": "d", "num_experts": "e", "top_k": "k", "num_shared": "s"}


@dataclass(frozen=True)
class Workload:
    """One shape of a suite: what is timed, at which EP degree, width, load and full-scale shape (the
    report's where not given)."""

    kind: str
    ep: int
    d_ff: int
    imbalance: float = 1.0  # load factor on the tracked GPU (inference / training)
    profile: str = "none"  # per-layer load profile (packing only)
    tokens: int = REFERENCE["tokens"]
    d_model: int = REFERENCE["d_model"]
    num_experts: int = REFERENCE["num_experts"]
    top_k: int = REFERENCE["top_k"]
    num_shared: int = REFERENCE["num_shared"]

    @property
    def name(self) -> str:
        """Config name and the shape part of execution ids, e.g. ``training-ep32-f3072-imb2.0``,
        ``packing-ep32-f3072-profile-a`` or ``inference-ep1-f2048-t1024-d8192-e256-k8-s0``."""
        base = f"{self.kind}-ep{self.ep}-f{self.d_ff}"
        if self.kind == "packing":
            base = f"{base}-profile-{self.profile}"
        elif self.imbalance != 1.0:
            base = f"{base}-imb{self.imbalance:.1f}"
        return base + "".join(f"-{_NAMED[k]}{v}" for k, v in self.shape.items() if v != REFERENCE[k])

    @property
    def shape(self) -> dict[str, int]:
        """The full-scale dimensions beside F: tokens, d_model, num_experts, top_k, num_shared."""
        return {k: getattr(self, k) for k in REFERENCE}

    @property
    def layer_loads(self) -> tuple[float, ...]:
        """Load factor on the tracked GPU for each timed layer (ten for packing)."""
        return PROFILES[self.profile] if self.kind == "packing" else (self.imbalance,)


@dataclass(frozen=True)
class Variant:
    """One implementation / precision / pipeline combination."""

    implementation: str
    precision: str
    pipeline: str

    @property
    def name(self) -> str:
        """Config name, e.g. ``mok-bf16`` or ``dist-moe-fp8-dispatch`` (its implementation's rule)."""
        return implementation(self.implementation).variant_name(self.precision, self.pipeline)


@dataclass(frozen=True)
class Execution:
    """One cell of a matrix: a workload run with one variant."""

    workload: Workload
    variant: Variant

    @property
    def workload_id(self) -> str:
        """Matched workload: shape + precision (MoK and Dist-MoE executions share it)."""
        return f"{self.workload.name}-{self.variant.precision}"

    @property
    def execution_id(self) -> str:
        v = self.variant
        return f"{self.workload_id}-{v.implementation}-{v.pipeline}"
