"""What one job runs: a :class:`JobSpec`, built once by the plan (:mod:`pipeline.launch.plan`) from
the composed config and handed to every task of the job, so no job derives again what planning knew;
and what it gives back, a :class:`Summary`. Neither needs torch: the sweep that submits and follows
the jobs never imports it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.data.dataset import Dataset
from pipeline.matrix import Execution
from pipeline.matrix.scale import Shape, TimingPlan


@dataclass(frozen=True)
class JobSpec:
    """One planned execution attempt: its matrix cell, the shape its ranks run, the scale's timing
    request, the seed of weights, inputs and routing, the device word (``auto``, ``cpu`` or ``cuda``:
    resolved on the job's node), the dataset it writes into, the launch backend and cluster preset
    that run it (which the shard's provenance records), the config (recorded as composed, read for
    nothing else) and overrides it came from, the correctness gate its suite asks for
    (:data:`pipeline.matrix.suite.CHECKS`) and whether the ranks' profiles are kept."""

    execution: Execution
    shape: Shape
    timing: TimingPlan
    seed: int
    device: str
    dataset: Dataset
    attempt: int
    backend: str
    cluster: str
    config: dict[str, Any]  # the resolved Hydra config, recorded in the shard as composed
    overrides: list[str]  # the command-line overrides that select it (the ledger records them)
    deadline_s: float = 900.0  # still running after this long, it is hung (its group sets it from the plan)
    check: str = "slice"  # the gate: its slice, or its slice and the timed input (its suite's ``check``)
    owner: str | None = None  # the sweep that claimed this attempt (pipeline.data.claims), once claimed
    keep_traces: bool = False  # keep each rank's profile of the phase account in the dataset

    @property
    def execution_id(self) -> str:
        return self.execution.execution_id

    @property
    def log_dir(self) -> Path:
        """The folder of this attempt's job logs (:meth:`Dataset.log_dir`)."""
        return self.dataset.log_dir(self.execution_id, self.attempt)


@dataclass(frozen=True)
class Summary:
    """Rank 0's word on a finished attempt: its shard and the slowest-rank median iteration time
    per phase (the published reduction)."""

    shard: str
    iteration_ms: dict[str, float]
