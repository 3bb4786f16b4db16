"""What every backend is and answers with, as submitit's core is to its executors: a
:class:`Backend` runs a sweep's jobs; a submitted :class:`Job` stands in a :class:`JobState`; each
execution ends in an :class:`Outcome`; each submission is a ledger record (:func:`submitted`).

The backends themselves (:mod:`pipeline.launch.local`, :mod:`pipeline.launch.debug`,
:mod:`pipeline.launch.slurm`) are named in :mod:`pipeline.launch.backends`.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from submitit.core.utils import JobPaths

from pipeline.bench.spec import JobSpec, Summary
from pipeline.data import ledger
from pipeline.data.dataset import Dataset
from pipeline.launch.settings import LaunchSettings

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
    """Task 0's stderr log of this job, as submitit names it (:class:`submitit.core.utils.JobPaths`),
    or None when it does not exist."""
    path = JobPaths(job.log_dir, job.job_id, task_id=0).stderr
    return path if path.is_file() else None


@dataclass(frozen=True)
class Outcome:
    """How one execution ended: rank 0's summary or the error; or why it never started (``missing``:
    its job ended first, so status calls it missing) or was left to another writer that took it over
    (``taken``); none of these while it was submitted without being waited for."""

    planned: JobSpec
    summary: Summary | None
    error: str | None
    missing: str | None = None
    taken: str | None = None

    @property
    def ended(self) -> bool:
        return any(x is not None for x in (self.summary, self.error, self.missing, self.taken))

    @property
    def failed(self) -> bool:
        """Whether it failed or never ran here (the sweep ends in exit status 1, as status does)."""
        return self.error is not None or self.missing is not None


class Submission(Protocol):
    """A submitted job as a sweep follows it (a ``submitit.Job``): whether it is done, its results
    (submitit re-raises the job's error, or reports its death) and its id."""

    @property
    def job_id(self) -> str: ...

    def done(self) -> bool: ...

    def results(self) -> list[object]: ...


class Backend(Protocol):
    """What runs a sweep's jobs: local processes, this very process, or a scheduler. ``run`` yields one
    outcome per execution in the order they end (or at once, unfinished, when the settings do not
    wait), and calls ``started`` as each execution starts running."""

    name: str

    def run(
        self, planned: list[JobSpec], settings: LaunchSettings, started: Callable[[JobSpec], None]
    ) -> Iterator[Outcome]: ...

    def job_states(self, jobs: list[Job]) -> dict[str, JobState]: ...

    def for_resubmission(self, settings: LaunchSettings) -> LaunchSettings:
        """The settings a resubmission runs with (e.g. a scheduler's without waiting)."""
        ...


def submitted(
    p: JobSpec,
    job_id: str,
    settings: LaunchSettings,
    *,
    attempt: int | None = None,
    requeued_from: int | None = None,
) -> ledger.Submitted:
    """The ledger's record of one submission of ``p`` (as ``attempt`` when a requeue renumbers it)."""
    attempt = p.attempt if attempt is None else attempt
    dataset = p.dataset
    return ledger.Submitted(
        execution_id=p.execution.execution_id,
        attempt=attempt,
        job_id=str(job_id),
        overrides=p.overrides,
        backend=settings.backend,
        cluster=settings.cluster,
        log_dir=dataset.relative(dataset.log_dir(p.execution.execution_id, attempt)),
        requeued_from=requeued_from,
        settings=settings.to_json(),
        owner=p.owner,
        host=socket.gethostname() if settings.on_this_host else None,  # its job runs here
    )


def cause(err: Exception) -> str:
    """What went wrong, in one line, from an error submitit raised: the last line of the task's
    traceback that it quotes (``ValueError: ...``), else its first line (a job that left no result)."""
    text = str(err)
    trace = re.search(r"with trace:\n-+\n(.*?)\n-+\n", text, re.S)
    if trace is not None:
        return first_line(trace.group(1).strip().splitlines()[-1])
    lines = text.strip().splitlines()
    if type(err).__name__ == "UncompletedJobError":  # "Job J (task: 0) with path P" / "has not produced..."
        return " ".join(line.strip() for line in lines[:2])
    return f"{type(err).__name__}: {first_line(text)}"


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "no reason given"
