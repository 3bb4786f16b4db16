"""Planned sweeps for the tests: the job specs ``python -m pipeline.run --multirun ARGUMENTS`` would
submit into a dataset, composed and planned in-process (nothing is submitted)."""

from __future__ import annotations

from pathlib import Path

from pipeline.bench.spec import JobSpec
from pipeline.compose import composed
from pipeline.compose.select import select
from pipeline.launch.plan import plan
from pipeline.launch.settings import LaunchSettings

LOCAL = LaunchSettings(backend="local", cluster="local", gpus=None, timeout_min=60)


def planned_sweep(dataset: Path, arguments: list[str], settings: LaunchSettings = LOCAL) -> list[JobSpec]:
    jobs = select([*arguments, f"dataset_dir={dataset}"])
    return plan([composed(o, c) for o, c in jobs], settings)
