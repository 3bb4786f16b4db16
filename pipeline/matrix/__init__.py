"""The workload matrix of the comparison: 22 shapes x 5 variants = 110 executions.

This module is the single source of truth for the matrix's names and counts. It is plain data: the
Hydra config groups ``workload`` and ``variant`` are generated from these tables
(:mod:`pipeline.compose.store`), and a composed config maps back to its cell with :func:`execution_of`.
The variants are those of the registered implementations (:mod:`pipeline.base.implementations`: MoK's two
and Dist-MoE's three), read once when this module is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import product
from typing import Any

from pipeline.base.implementations import candidate, implementation, implementations, reference

PROFILES: dict[str, tuple[float, ...]] = {
    "balanced": (1.0,) * 10,
    "a": (7.5, 2.5, 4.5, 0.6, 1.8, 0.9, 2.2, 0.7, 1.6, 0.8),
    "b": (0.7, 5.8, 1.2, 0.6, 3.6, 1.0, 7.2, 0.8, 2.3, 0.7),
}


@dataclass(frozen=True)
class Workload:
    """One shape of the matrix: what is timed, at which EP degree, width and load."""

    kind: str
    ep: int
    d_ff: int
    imbalance: float = 1.0  # load factor on the tracked GPU (inference / training)
    profile: str = "none"  # per-layer load profile (packing only)

    @property
    def name(self) -> str:
        """Config-group name and the shape part of execution ids, e.g. ``training-ep32-f3072-imb2.0``,
        ``inference-ep8-f1536`` or ``packing-ep32-f3072-profile-a``."""
        base = f"{self.kind}-ep{self.ep}-f{self.d_ff}"
        if self.kind == "packing":
            return f"{base}-profile-{self.profile}"
        return base if self.imbalance == 1.0 else f"{base}-imb{self.imbalance:.1f}"

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
        """Config-group name, e.g. ``mok-bf16`` or ``dist-moe-fp8-dispatch`` (its implementation's rule)."""
        return implementation(self.implementation).variant_name(self.precision, self.pipeline)


@dataclass(frozen=True)
class Execution:
    """One cell of the matrix: a workload run with one variant."""

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


def _workloads() -> tuple[Workload, ...]:
    out: list[Workload] = []
    for kind, eps in (("inference", (8, 16)), ("training", (32, 64))):
        for ep in eps:
            out += [Workload(kind, ep, f) for f in (1536, 3072, 6144)]
            out.append(Workload(kind, ep, 3072, imbalance=2.0))
    for ep in (32, 64):
        out += [Workload("packing", ep, 3072, profile=p) for p in ("balanced", "a", "b")]
    return tuple(out)


WORKLOADS: tuple[Workload, ...] = _workloads()
VARIANTS: tuple[Variant, ...] = tuple(
    Variant(i.name, precision, pipeline) for i in implementations() for precision, pipeline in i.variants
)
WORKLOAD_BY_NAME = {w.name: w for w in WORKLOADS}
VARIANT_BY_NAME = {v.name: v for v in VARIANTS}
EXECUTIONS: tuple[Execution, ...] = tuple(Execution(w, v) for w, v in product(WORKLOADS, VARIANTS))


EXECUTION_BY_ID = {e.execution_id: e for e in EXECUTIONS}


def execution_of(cfg: Mapping[str, Any]) -> Execution:
    """The matrix cell a composed config describes; a ValueError lists the allowed names otherwise."""
    workload = Workload(**cfg["workload"])
    variant = Variant(**cfg["variant"])
    if workload not in WORKLOADS:
        allowed = ", ".join(WORKLOAD_BY_NAME)
        raise ValueError(f"workload {dict(cfg['workload'])} is not in the matrix; allowed: {allowed}")
    if variant not in VARIANTS:
        allowed = ", ".join(VARIANT_BY_NAME)
        raise ValueError(f"variant {dict(cfg['variant'])} is not in the matrix; allowed: {allowed}")
    return Execution(workload, variant)


def counts(executions: tuple[Execution, ...] | list[Execution]) -> tuple[int, int, int]:
    """(executions, matched workloads, pairs) of a selection: a pair is an execution of the pairs'
    candidate (Dist-MoE) whose reference partner (MoK, same workload id) is also selected."""
    ids = {e.workload_id for e in executions}
    ref, cand = reference().name, candidate().name
    partnered = {e.workload_id for e in executions if e.variant.implementation == ref}
    pairs = sum(1 for e in executions if e.variant.implementation == cand and e.workload_id in partnered)
    return len(executions), len(ids), pairs
