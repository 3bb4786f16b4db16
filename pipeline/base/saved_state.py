"""What a layer's saved-state policy allocates and what its forward kept: the records the layers
produce (:mod:`pipeline.moe.policy`) and a shard's metadata carries (:mod:`pipeline.data.meta`). They
live below both so that the layers never import the dataset's code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from pipeline.base.bounds import at_least


@dataclass(frozen=True)
class SavedState:
    """Evidence of one layer's forward: how many of its routed rows kept their GEMM-1 outputs for
    backward within the policy's budget (the rest are recomputed)."""

    factor: float  # budget_rows / (T x K)
    budget_rows: int  # saved-activation rows allocated for this layer (Dist-MoE: its share of the slot)
    routed_rows: int
    retained_rows: int
    recomputed_rows: int
    recomputes: bool  # some routed rows are recomputed in backward (recomputed_rows > 0)
    capacity_flag: bool | None  # Dist-MoE's capacity flag (slot or scratch overflow); None for MoK

    @classmethod
    def of(
        cls,
        budget_rows: int,
        routed_rows: int,
        retained_rows: int,
        tokens: int,
        top_k: int,
        flag: bool | None,
    ) -> SavedState:
        """A forward that kept ``retained_rows`` of its ``routed_rows`` within ``budget_rows`` (the
        rest recomputed in backward); ``flag``: the capacity flag (None for MoK)."""
        return cls(
            factor=budget_rows / max(tokens * top_k, 1),
            budget_rows=budget_rows,
            routed_rows=routed_rows,
            retained_rows=retained_rows,
            recomputed_rows=routed_rows - retained_rows,
            recomputes=retained_rows < routed_rows,
            capacity_flag=flag,
        )

    def __post_init__(self) -> None:
        at_least(self, 0, "budget_rows", "routed_rows", "retained_rows", "recomputed_rows", "factor")


@dataclass(frozen=True)
class LayerState(SavedState):
    """The tracked GPU's :class:`SavedState` in one timed layer, with the layer and its load factor."""

    layer: int
    load_factor: float

    def __post_init__(self) -> None:
        super().__post_init__()
        at_least(self, 0, "layer", "load_factor")


@dataclass(frozen=True)
class Buffer:
    """One device buffer of a policy: ``rows`` token-rows of ``row_bytes`` each."""

    name: str
    rows: int
    row_bytes: int
    JSON_PROPERTIES: ClassVar[tuple[str, ...]] = ("bytes",)

    @property
    def bytes(self) -> int:
        return self.rows * self.row_bytes

    def __post_init__(self) -> None:
        at_least(self, 0, "rows", "row_bytes")


@dataclass(frozen=True)
class Policy:
    """A stack's allocation policy (``describe()`` of :mod:`pipeline.moe.policy`); rows are token-rows,
    factors in units of T x K."""

    implementation: str
    layers: int
    requested_factor: float
    layer_budget_rows: int
    factor: float
    pooled: bool
    activation_rows: int
    scratch_factor: float | None
    scratch_rows: int
    host_scratch_bytes: int
    overflow: str  # what overflow means for the implementation
    buffers: tuple[Buffer, ...] | None  # None: not recorded (early schema_version 2)

    def __post_init__(self) -> None:
        at_least(self, 0, "layers", "layer_budget_rows", "activation_rows", "scratch_rows")
