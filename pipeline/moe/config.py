"""Configuration of one MoE layer and the rules on which combinations exist."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pipeline.base.implementations import MOK, Implementation, implementation, pipelines_of
from pipeline.base.vocabulary import DTYPES, MX_BLOCK

# The vocabulary's dtype names as torch dtypes.
TORCH_DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in DTYPES}


@dataclass(frozen=True)
class MoEConfig:
    """Shape, implementation and numerics of one layer.

    ``dtype`` is the compute/storage dtype of activations and weights (bfloat16 on GPUs, float32 for CPU
    reference runs); ``precision`` says whether the expert GEMMs run on it directly (``bf16``) or on
    MXFP8 operands. ``activation_factor`` is the requested saved-activation budget in units of T x K
    rows; ``scratch_factor`` the receive-buffer capacity (Dist-MoE) in the same units. Budgets are sized
    for ``budget_tokens`` tokens per rank (default: the T of each forward); a run that feeds a rank more
    tokens to emulate a hot GPU keeps the nominal T here.
    """

    d_model: int
    d_ff: int
    num_experts: int
    top_k: int
    num_shared: int = 1
    implementation: str = MOK.name
    pipeline: str = "native"
    precision: str = "bf16"
    dtype: torch.dtype = torch.bfloat16
    activation_factor: float = 2.5
    scratch_factor: float = 8.0
    budget_tokens: int | None = None
    backend: str = "auto"

    def __post_init__(self) -> None:
        for name in ("d_model", "d_ff", "num_experts", "top_k"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(self.num_shared, int) or self.num_shared < 0:
            raise ValueError(f"num_shared must be an int >= 0, got {self.num_shared!r}")
        if self.top_k > self.num_experts:
            raise ValueError(
                f"top_k={self.top_k} exceeds num_experts={self.num_experts}; allowed: 1..{self.num_experts}"
            )
        allowed = pipelines_of(self.implementation, self.precision)
        if self.pipeline not in allowed:
            raise ValueError(
                f"pipeline {self.pipeline!r} does not exist for {self.implementation} {self.precision}; "
                f"allowed: {', '.join(allowed)}"
            )
        if self.dtype not in TORCH_DTYPES.values():
            allowed_dtypes = ", ".join(f"torch.{name}" for name in TORCH_DTYPES)
            raise ValueError(f"dtype {self.dtype} is not allowed; allowed: {allowed_dtypes}")
        if self.precision == "mxfp8" and (self.d_model % MX_BLOCK or self.d_ff % MX_BLOCK):
            raise ValueError(
                f"mxfp8 needs d_model and d_ff divisible by {MX_BLOCK} (one scale per {MX_BLOCK} along K), "
                f"got d_model={self.d_model}, d_ff={self.d_ff}"
            )
        if self.budget_tokens is not None and self.budget_tokens <= 0:
            raise ValueError(f"budget_tokens must be positive or None, got {self.budget_tokens!r}")
        for name in ("activation_factor", "scratch_factor"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)!r}")

    @property
    def record(self) -> Implementation:
        """Everything decided per implementation (:mod:`pipeline.base.implementations`)."""
        return implementation(self.implementation)

    @property
    def mx_scale_mode(self) -> str:
        """The implementation's E8M0 scale selection (MoK: exact; Dist-MoE: fast math)."""
        return self.record.mx_scale_mode

    @property
    def fused_swiglu_backward(self) -> bool:
        """Whether the implementation fuses the SwiGLU backward (Dist-MoE) or keeps it unfused (MoK)."""
        return self.record.swiglu_backward == "fused"

    @property
    def fp8_on_wire(self) -> bool:
        return self.pipeline == "fp8-dispatch"

    def local_experts(self, world_size: int) -> int:
        """Experts per rank; E must divide evenly over the ranks."""
        if world_size <= 0 or self.num_experts % world_size:
            raise ValueError(
                f"num_experts={self.num_experts} is not divisible by {world_size} ranks; "
                f"allowed rank counts divide {self.num_experts}"
            )
        return self.num_experts // world_size
