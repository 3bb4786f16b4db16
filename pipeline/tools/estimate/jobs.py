"""What one estimate is of: an execution, on a GPU preset, at a scale (full), with a seed and
optionally a forced form of the fused SwiGLU backward. Jobs travel to the workers as JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from pipeline.matrix import EXECUTION_BY_ID
from pipeline.tools.estimate.presets import Preset, full_scale


@dataclass(frozen=True)
class Job:
    execution: str
    preset: Preset
    scale: dict[str, Any] = field(default_factory=full_scale)
    seed: int = 0
    swiglu: str | None = None  # a form of pipeline.moe.swiglu.FUSED_FORMS to force, or None

    def __post_init__(self) -> None:
        if self.execution not in EXECUTION_BY_ID:
            raise ValueError(f"execution {self.execution!r} is not in the matrix")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, data: dict[str, Any]) -> Job:
        return cls(**{**data, "preset": Preset(**data["preset"])})
