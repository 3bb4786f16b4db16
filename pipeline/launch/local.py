"""The local backend: each execution is one submitit job on this machine, one process per rank.

Executions run one after another: they share this machine, and concurrent executions would disturb
each other's timing. A job is identified by its pid and checked against its log folder, so that a
reused pid is never mistaken for the job.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from pathlib import Path

import submitit

from pipeline.bench.distributed import resolve_device
from pipeline.bench.execute import run_execution
from pipeline.bench.spec import JobSpec
from pipeline.data import ledger
from pipeline.launch.jobs import COMPLETED, FAILED, RUNNING, Job, JobState
from pipeline.launch.plan import Outcome, collect, resource_shape, submitted
from pipeline.launch.settings import LaunchSettings


class LocalBackend:
    name = "local"

    def run(
        self, planned: list[JobSpec], settings: LaunchSettings, started: Callable[[JobSpec], None]
    ) -> Iterator[Outcome]:
        for p in planned:
            try:
                gpus = resolve_device(p.device) == "cuda"
            except ValueError:
                gpus = False  # the job itself fails and records that no GPU is visible here
            executor = _executor(settings, p.log_dir, p.shape.ranks, gpus)
            job = executor.submit(run_execution, p)
            ledger.append(p.dataset, submitted(p, job.job_id, settings))
            started(p)
            yield collect(p, job)

    def job_states(self, jobs: list[Job]) -> dict[str, JobState]:
        return {job.job_id: _state(job) for job in jobs}

    def for_resubmission(self, settings: LaunchSettings) -> LaunchSettings:
        return settings


def _executor(settings: LaunchSettings, folder: Path, ranks: int, gpus: bool) -> submitit.Executor:
    nodes, per_node = resource_shape(ranks, settings.tasks_per_node)
    executor = submitit.LocalExecutor(folder=folder)
    executor.update_parameters(
        nodes=nodes,
        tasks_per_node=per_node,
        gpus_per_node=per_node if gpus else 0,
        timeout_min=settings.timeout_min,
    )
    return executor


def _state(job: Job) -> JobState:
    if _process_runs_job(job):
        return JobState(RUNNING)
    outcome = _result(job)
    if outcome is None:
        return JobState(FAILED, f"process {job.job_id} ended without a result (killed?)")
    return outcome


def _process_runs_job(job: Job) -> bool:
    """True while pid ``job_id`` is alive and is the submitit process of this job's folder."""
    try:
        cmdline = Path(f"/proc/{int(job.job_id)}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        status = Path(f"/proc/{int(job.job_id)}/status").read_text()
    except (OSError, ValueError):
        return False
    zombie = "\nState:\tZ" in status
    return not zombie and str(job.log_dir) in cmdline and "submitit" in cmdline


def _result(job: Job) -> JobState | None:
    """Outcome that submitit recorded for task 0, or None when it wrote none."""
    path = job.log_dir / f"{job.job_id}_0_result.pkl"
    try:
        with open(path, "rb") as f:
            kind, value = pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError, ValueError):
        return None
    if kind == "success":
        return JobState(COMPLETED)
    lines = [ln for ln in str(value).strip().splitlines() if ln.strip()]
    return JobState(FAILED, lines[-1].strip() if lines else "error without a traceback")
