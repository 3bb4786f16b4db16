"""A third implementation in a module of its own: MoK's per-layer budgets with Dist-MoE's fused SwiGLU
backward and MoK's exact MX scales. Naming this module in ``MOE_BENCH_IMPLEMENTATIONS`` registers it
in every process that inherits the environment (a sweep, its jobs, their ranks, the aggregation)."""

from __future__ import annotations

from pipeline.implementations import Implementation, register

HYBRID = register(
    Implementation(
        name="hybrid",
        label="Hybrid",
        colour="#2ca02c",
        note_colour="#1b5e20",
        variants=(("bf16", "native"), ("mxfp8", "native")),
        mx_scale_mode="exact",
        swiglu_backward="fused",
        policy="pipeline.moe.policy:MoKBudget",
        variant_names="precision",
    )
)
