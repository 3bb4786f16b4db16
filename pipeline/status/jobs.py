"""Where each launched job stands, asked of whoever runs it: Slurm (squeue, then sacct) or the OS.

A job is ``pending``, ``running``, ``completed`` (its process exited 0) or ``failed`` with a reason.
Slurm is asked once per call for all jobs, so status stays fast on large sweeps; local jobs are
submitit processes on this host, identified by pid and checked against their log folder so that a
reused pid is never mistaken for the job.
"""

from __future__ import annotations

import pickle
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

PENDING, RUNNING, COMPLETED, FAILED = "pending", "running", "completed", "failed"

_SLURM_PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
_SLURM_RUNNING = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"}


@dataclass(frozen=True)
class JobState:
    state: str
    reason: str | None = None


@dataclass(frozen=True)
class Job:
    """One submitted job as the ledger names it."""

    job_id: str
    launcher: str  # "slurm" or "local"
    log_dir: Path


def job_states(jobs: list[Job]) -> dict[str, JobState]:
    """State of every job, keyed by job id."""
    unknown = {j.launcher for j in jobs} - {"slurm", "local"}
    if unknown:
        raise ValueError(f"unknown launcher(s) {sorted(unknown)} in the ledger; allowed: local, slurm")
    slurm = [j for j in jobs if j.launcher == "slurm"]
    states = _slurm_states([j.job_id for j in slurm]) if slurm else {}
    for job in jobs:
        if job.launcher == "local":
            states[job.job_id] = _local_state(job)
    return states


def _slurm_states(job_ids: list[str]) -> dict[str, JobState]:
    """squeue knows live and recently ended jobs; sacct knows how jobs ended, with their exit codes.
    A job that just ended may not have reached accounting yet: squeue's word stands for it then."""
    wanted = set(job_ids)
    states: dict[str, JobState] = {}
    ended: dict[str, JobState] = {}
    live = _run(["squeue", "--noheader", "--array", "--states=all", "--format=%i|%T|%r"])
    for line in live.splitlines():
        job_id, state, reason = line.split("|", 2)
        if job_id not in wanted:
            continue
        if state in _SLURM_RUNNING:
            states[job_id] = JobState(RUNNING)
        elif state in _SLURM_PENDING:
            states[job_id] = JobState(PENDING, None if reason == "None" else reason)
        else:
            ended[job_id] = _finished(state, "not in accounting yet")
    rest = wanted - states.keys()
    if rest:
        # Ask by array job id: sacct folds array tasks that never started into one "123_[4-9]" record.
        jobs = ",".join(sorted({job_id.split("_")[0] for job_id in rest}))
        for line in _run(["sacct", "-X", "-n", "-P", "-o", "JobID,State,ExitCode", "-j", jobs]).splitlines():
            record, state, exit_code = line.split("|")
            for job_id in _array_tasks(record):
                if job_id in rest:
                    states[job_id] = _finished(state, exit_code)
    for job_id in wanted - states.keys():
        states[job_id] = ended.get(job_id, JobState(FAILED, f"job {job_id} is unknown to squeue and sacct"))
    return states


def _array_tasks(record: str) -> list[str]:
    """Job ids a sacct JobID stands for: ``123``, ``123_4``, or ``123_[4-6,9%8]`` -> 123_4 ... 123_9."""
    match = re.fullmatch(r"(\d+)_\[([\d,-]+)(?:%\d+)?\]", record)
    if match is None:
        return [record]
    tasks = []
    for part in match.group(2).split(","):
        first, _, last = part.partition("-")
        tasks += [f"{match.group(1)}_{t}" for t in range(int(first), int(last or first) + 1)]
    return tasks


def _finished(state: str, exit_code: str) -> JobState:
    word = state.split()[0]
    if word == "COMPLETED":
        return JobState(COMPLETED)
    if word in _SLURM_PENDING:
        return JobState(PENDING, word)
    if word in _SLURM_RUNNING:
        return JobState(RUNNING)
    return JobState(FAILED, f"Slurm {state}, exit code {exit_code}")


def _run(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        message = f"{command[0]} not found: the ledger names Slurm jobs; run this on a Slurm host"
        raise RuntimeError(message) from None
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:2])} failed: {done.stderr.strip()}")
    return done.stdout


def _local_state(job: Job) -> JobState:
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


def error_log(job: Job) -> Path | None:
    """Task 0's stderr log of this job, or None when it does not exist."""
    path = job.log_dir / f"{job.job_id}_0_log.err"
    return path if path.is_file() else None
