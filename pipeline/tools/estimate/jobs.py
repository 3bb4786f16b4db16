"""What one estimate is of: an execution, on a GPU preset, at a scale (full), with a seed and
optionally a forced form of the fused SwiGLU backward. Jobs travel to the workers as JSON, an
execution of a suite other than the report's with its cell (its workload and variant), so that the
worker needs no suite to find it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.matrix import EXECUTION_BY_ID, Execution, Variant, Workload
from pipeline.tools.estimate.presets import Preset, full_scale


@dataclass(frozen=True)
class Job:
    execution: str
    preset: Preset
    scale: dict[str, Any] = field(default_factory=full_scale)
    seed: int = 0
    swiglu: str | None = None  # a form of pipeline.moe.swiglu.FUSED_FORMS to force, or None
    cell: dict[str, dict[str, Any]] | None = None  # {"workload": ..., "variant": ...}; None: the report's
    check: str = "slice"  # the gate its suite asks for (pipeline.matrix.suite.CHECKS)

    def __post_init__(self) -> None:
        if self.cell is None and self.execution not in EXECUTION_BY_ID:
            raise ValueError(f"execution {self.execution!r} is not in the matrix, and the job has no cell")
        if self.resolved().execution_id != self.execution:
            raise ValueError(f"the job's cell is of {self.resolved().execution_id}, not {self.execution}")

    @classmethod
    def of_execution(cls, execution: Execution, preset: Preset, **settings: Any) -> Job:
        """The job of ``execution`` (of any suite) on ``preset``; ``settings``: the other fields."""
        cell = {"workload": asdict(execution.workload), "variant": asdict(execution.variant)}
        return cls(execution.execution_id, preset, cell=cell, **settings)

    def resolved(self) -> Execution:
        """The execution this job is of."""
        if self.cell is None:
            return EXECUTION_BY_ID[self.execution]
        return Execution(Workload(**self.cell["workload"]), Variant(**self.cell["variant"]))

    def published(self) -> bool:
        """Whether it is the estimate a dataset publishes: the default seed and full scale, the GPU's
        own SwiGLU form."""
        return (self.scale, self.seed, self.swiglu) == (full_scale(), 0, None)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, data: dict[str, Any]) -> Job:
        return cls(**{**data, "preset": Preset(**data["preset"])})
