"""Where a submitted job stands, in the words every backend answers with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.data import ledger
from pipeline.data.dataset import Dataset

PENDING, RUNNING, COMPLETED, FAILED = "pending", "running", "completed", "failed"


@dataclass(frozen=True)
class JobState:
    state: str
    reason: str | None = None
    nodes: tuple[str, ...] = ()  # where the job ran, when the backend knows (Slurm's NodeList)


@dataclass(frozen=True)
class Job:
    """One submitted job as the ledger names it (a group's members share one): its folder is where
    the layout puts it, never where a record says; a local job also has the host it runs on (None:
    this one, as records before hosts were kept) and the dataset and sweep of its heartbeat."""

    job_id: str
    backend: str  # the backend that ran it
    log_dir: Path
    host: str | None = None
    beat: tuple[Dataset, str] | None = None  # (dataset, sweep): where another host hears it live

    @classmethod
    def of(cls, dataset: Dataset, record: ledger.Submitted) -> Job:
        """The job of a submission of ``dataset``'s ledger."""
        log_dir = dataset.log_dir(record.execution_id, record.attempt)
        beat = None if record.owner is None else (dataset, record.owner)
        return cls(record.job_id, record.backend, log_dir, record.host, beat)


def error_log(job: Job) -> Path | None:
    """Task 0's stderr log of this job (submitit's file name), or None when it does not exist."""
    path = job.log_dir / f"{job.job_id}_0_log.err"
    return path if path.is_file() else None
