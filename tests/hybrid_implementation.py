"""A third implementation in a module of its own: MoK's per-layer budgets with Dist-MoE's fused SwiGLU
backward and MoK's exact MX scales. Naming this module in ``MOE_BENCH_IMPLEMENTATIONS`` registers it
in every process that inherits the environment (a sweep, its jobs, their ranks, the aggregation)."""

from __future__ import annotations

from dataclasses import replace

from pipeline.base.implementations import MOK, register

# MoK's record but for its name, label, colours and SwiGLU backward; in no pair: published beside the two
HYBRID = register(
    replace(
        MOK,
        name="hybrid",
        label="Hybrid",
        colour="#2ca02c",
        note_colour="#1b5e20",
        swiglu_backward="fused",
        pairs_as=None,
    )
)
