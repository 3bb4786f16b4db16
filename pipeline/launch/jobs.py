"""Where a submitted job stands, in the words every backend answers with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PENDING, RUNNING, COMPLETED, FAILED = "pending", "running", "completed", "failed"


@dataclass(frozen=True)
class JobState:
    state: str
    reason: str | None = None
    nodes: tuple[str, ...] = ()  # where the job ran, when the backend knows (Slurm's NodeList)


@dataclass(frozen=True)
class Job:
    """One submitted job as the ledger names it (a group's members share one)."""

    job_id: str
    backend: str  # the backend that ran it
    log_dir: Path


def error_log(job: Job) -> Path | None:
    """Task 0's stderr log of this job (submitit's file name), or None when it does not exist."""
    path = job.log_dir / f"{job.job_id}_0_log.err"
    return path if path.is_file() else None
