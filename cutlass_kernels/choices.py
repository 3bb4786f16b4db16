"""The per-shape variant choice: which registered kernel variant measured fastest for a class of
problem shapes, and the lookup the dispatch makes for ``variant="auto"``.

A problem's class is its arch, op, group count ``G``, the weight's extents ``N`` and ``K`` (the weight
is ``[G, N, K]``; dgrad and wgrad of a projection share its forward's extents) and the routed rows
rounded up to a power of two (rows move with the routing every step, so an exact row count would
never match again; within a power-of-two band the variants' relative standing changes little, since
tile waste at group ends depends on rows per group, i.e. on rows / G). An entry names the variant
that the GPU check timed fastest for that class, with the date and device of that measurement.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import astuple, dataclass
from typing import Any

import torch

from cutlass_kernels import gating


@dataclass(frozen=True)
class Problem:
    """One call's host-side shape: ``rows`` routed rows over ``groups`` groups, the weight's ``n`` and
    ``k``, and the output dtype. Known without reading ``offs``, so choosing never syncs the host."""

    op: str
    groups: int
    rows: int
    n: int
    k: int
    out_dtype: torch.dtype = torch.bfloat16


def rows_bucket(rows: int) -> int:
    """The smallest power of two >= ``rows`` (0 for no rows)."""
    return 1 << (rows - 1).bit_length() if rows > 0 else 0


@dataclass(frozen=True)
class Choice:
    """The variant measured fastest for one shape class, and where and when that was measured."""

    arch: str
    op: str
    groups: int
    n: int
    k: int
    rows_bucket: int
    variant: str
    date: str  # ISO date of the measurement
    device: str  # the GPU, as torch.cuda.get_device_name reports it

    def matches(self, arch: str, problem: Problem) -> bool:
        key = (problem.op, problem.groups, problem.n, problem.k, rows_bucket(problem.rows))
        return self.arch == arch and (self.op, self.groups, self.n, self.k, self.rows_bucket) == key


def measured(records: Iterable[dict[str, Any]], arch: str, date: str, device: str) -> list[Choice]:
    """The table the device run's timing records support: for each shape class and op, the variant
    with the lowest graph-replay median, where it is not the default and all ten of its replays beat
    all ten of the default's (its slowest faster than the default's fastest); elsewhere no entry, and
    the default runs. ``records`` are results.jsonl's (:mod:`cutlass_kernels.bench`); the latest
    record of a variant counts. A variant counts only where it passed every check stage before
    timing (:func:`cutlass_kernels.gating.refusal`): a kernel that failed is never chosen, however
    fast, and the old one keeps its shapes."""
    records = list(records)
    found = gating.verdicts(records)
    best: dict[tuple[str, int, int, int, int], dict[str, dict[str, Any]]] = {}
    for r in records:
        if r.get("stage") != "timing" or r.get("status") != "pass" or not r.get("graph_ms"):
            continue
        if gating.refusal(arch, found, "timing", r["key"]):
            continue
        klass = (r["op"], r["groups"], r["n"], r["k"], rows_bucket(r["rows"]))
        best.setdefault(klass, {})[r["variant"]] = r["graph_ms"]
    table = []
    for (op, groups, n, k, bucket), by_variant in best.items():
        default = by_variant.get("default")
        name, ms = min(by_variant.items(), key=lambda item: item[1]["median"])
        if default is None or name == "default" or ms["max"] >= default["min"]:
            continue
        table.append(Choice(arch, op, groups, n, k, bucket, name, date, device))
    return sorted(table, key=lambda c: (c.op, c.groups, c.n, c.k, c.rows_bucket))


def source(table: Iterable[Choice]) -> str:
    """``table`` as the Python of :data:`CHOICES`, one entry a line."""
    lines = [f"    Choice{astuple(c)!r}," for c in table]
    return "CHOICES: tuple[Choice, ...] = (\n" + "\n".join(lines) + "\n)\n"


# What the H200 device run of 2026-12-04 measured (docs/gpu-runs/2026-12-04-h200.md): the
# variant of each shape class whose ten graph replays all beat the default's, from
# ``python -m cutlass_kernels choices RESULTS.jsonl --date 2026-12-04``; every shape class it does
# not name runs the default. sm_100a has no entry: no Blackwell GPU has timed its variants.
CHOICES: tuple[Choice, ...] = (
    Choice("sm_90a", "dgrad", 6, 3072, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 6, 6144, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 6, 7168, 3072, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 6, 7168, 6144, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 6, 12288, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 12, 3072, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 12, 6144, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 12, 7168, 1536, 16384, "tma_cluster2x1", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 12, 7168, 3072, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 12, 12288, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 24, 3072, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 24, 6144, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 24, 7168, 1536, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 24, 7168, 3072, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 24, 7168, 6144, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 24, 12288, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 48, 3072, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 48, 6144, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 48, 7168, 1536, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 48, 7168, 3072, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 256, 4096, 8192, 32768, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "dgrad", 256, 8192, 2048, 32768, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 6, 3072, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 6, 6144, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 6, 7168, 1536, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 6, 7168, 3072, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 6, 7168, 6144, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 6, 12288, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 12, 3072, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 12, 6144, 7168, 16384, "tma_cluster2x1", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 12, 7168, 1536, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 12, 7168, 3072, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 12, 7168, 6144, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 12, 12288, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 24, 3072, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 24, 6144, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 24, 7168, 1536, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 24, 7168, 3072, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 24, 7168, 6144, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 24, 12288, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 48, 3072, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 48, 6144, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 48, 7168, 1536, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 48, 7168, 3072, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 48, 7168, 6144, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 256, 4096, 8192, 32768, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "fprop", 256, 8192, 2048, 32768, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 6, 3072, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 6, 6144, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 6, 7168, 1536, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 6, 7168, 3072, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 6, 7168, 6144, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 6, 12288, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 12, 3072, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 12, 6144, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 12, 7168, 1536, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 12, 7168, 3072, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 12, 7168, 6144, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 12, 12288, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 24, 3072, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 24, 6144, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 24, 7168, 1536, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 24, 7168, 3072, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 24, 7168, 6144, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 24, 12288, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 48, 3072, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 48, 6144, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 48, 7168, 1536, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 48, 7168, 3072, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 48, 7168, 6144, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 48, 12288, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "mx", 256, 8192, 2048, 32768, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 6, 3072, 7168, 16384, "inplace", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 6, 6144, 7168, 16384, "inplace", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 6, 7168, 1536, 16384, "inplace", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 6, 7168, 3072, 16384, "inplace", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 6, 7168, 6144, 16384, "inplace", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 6, 12288, 7168, 16384, "inplace", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 12, 3072, 7168, 16384, "inplace", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 12, 6144, 7168, 16384, "inplace", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 12, 7168, 1536, 16384, "inplace", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 12, 7168, 3072, 16384, "inplace", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 12, 7168, 6144, 16384, "inplace", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 12, 12288, 7168, 16384, "inplace", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 24, 3072, 7168, 16384, "inplace", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 24, 6144, 7168, 16384, "tma_cluster2x1", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 24, 7168, 1536, 16384, "inplace", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 24, 7168, 3072, 16384, "inplace", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 24, 7168, 6144, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 24, 12288, 7168, 16384, "tma_cluster2x1", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 48, 3072, 7168, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 48, 6144, 7168, 16384, "tma_cluster2x1", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 48, 7168, 1536, 16384, "inplace", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 48, 7168, 3072, 16384, "tma_cluster2x1", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 48, 7168, 6144, 16384, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 48, 12288, 7168, 16384, "tma_cluster2x1", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 256, 4096, 8192, 32768, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
    Choice("sm_90a", "wgrad", 256, 8192, 2048, 32768, "tma_epilogue", "2026-12-04", "NVIDIA H200"),
)


# How the layers quantize to MXFP8 on a GPU (:mod:`cutlass_kernels.quantize`): ``torch`` (the reference
# form) until a device run has found the one-pass kernel bit-identical and faster; then ``kernel``.
MX_QUANTIZER = "torch"
# How the layers compute the SwiGLU forward, alone or with its MX quantization, on a GPU
# (:mod:`cutlass_kernels.swiglu_forward`): ``torch`` until a device run has found the fused kernel
# correct (its A within tolerance, its MX forms the quantization of its A bit for bit) and faster.
SWIGLU_FORWARD = "torch"
IMPLEMENTATIONS = ("torch", "kernel")  # of an elementwise op: the torch form, or its CUDA kernel


def implementation(env: str, measured: str) -> str:
    """``torch`` or ``kernel`` for an elementwise op: the environment variable ``env``'s choice where
    set (the device run's check of a kernel not yet chosen), else ``measured``."""
    chosen = os.environ.get(env) or measured
    if chosen not in IMPLEMENTATIONS:
        raise ValueError(f"{env}={chosen!r} is not allowed; allowed: {', '.join(IMPLEMENTATIONS)}")
    return chosen


def lookup(table: Iterable[Choice], arch: str, problem: Problem) -> str | None:
    """The variant ``table`` names for ``problem``'s class on ``arch`` (the first match), else None."""
    return next((c.variant for c in table if c.matches(arch, problem)), None)
