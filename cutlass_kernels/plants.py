"""Faults planted in the device run's dry run, so that its handling of a kernel that hangs or is wrong
can be shown on a CPU (``jobs/gpu-run.sh --dry-run --plant KIND:STAGE:KEY``). The runner hands them to
its children in ``GPU_RUN_PLANT``; a child on a GPU refuses to start with any. Torch-free, for the
runner as for the checks (:mod:`cutlass_kernels.check` applies them)."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

from cutlass_kernels.gating import KERNEL_STAGES

PLANT_ENV = "GPU_RUN_PLANT"
# hang: the child sleeps until it is killed; wrong: the op's output doubled; zero-times-inf: wgrad as
# the sm90 in-place kernel computed it before it zeroed both operands' rows past a group's end
PLANT_KINDS = ("hang", "wrong", "zero-times-inf")


@dataclass(frozen=True)
class Plant:
    """A fault of ``kind`` in ``stage`` (or ``*``) for the kernel keys matching ``pattern``
    (``op/out_dtype/variant``, shell wildcards)."""

    kind: str
    stage: str
    pattern: str

    @classmethod
    def parse(cls, text: str) -> Plant:
        kind, stage, pattern = (text.split(":") + ["", ""])[:3]
        if kind not in PLANT_KINDS or stage not in ("*", *KERNEL_STAGES) or pattern.count("/") != 2:
            raise ValueError(
                f"planted fault {text!r}: want KIND:STAGE:OP/OUT_DTYPE/VARIANT with KIND one of "
                f"{', '.join(PLANT_KINDS)} and STAGE *, {', '.join(KERNEL_STAGES)}"
            )
        return cls(kind, stage, pattern)

    def matches(self, stage: str, key: str) -> bool:
        return self.stage in ("*", stage) and fnmatch.fnmatchcase(key, self.pattern)


def plants_of(text: str) -> tuple[Plant, ...]:
    """The plants of ``GPU_RUN_PLANT``'s value: comma-separated ``KIND:STAGE:KEY``."""
    return tuple(Plant.parse(p) for p in text.split(",") if p.strip())
