"""Status of every execution of a launched dataset: ledger + shards + the jobs' own state.

The executions are those the dataset's sweeps meant (their intents in the ledger), were submitted or
left a shard. ``done``: a valid shard exists. Otherwise a newer attempt claimed by a writer that still
lives (:mod:`pipeline.data.claims`) is ``pending``: that sweep will run it. Otherwise the newest
attempt in the ledger decides: its job is ``pending`` or ``running``; ``failed`` (with a reason and
the log to read); or it completed without leaving a valid shard (deleted, corrupt), or its sweep
stopped it (SIGINT, SIGTERM), which is ``missing`` like an execution whose shards are gone and one
its sweep meant but never submitted. Nothing read is executed, and every path used stays inside the
dataset (the job's folder is where the layout puts it, not where a record says).

A sweep gone silent (its heartbeat stale: a stalled file system, a suspended shell) whose job still
runs keeps what it owns: its executions are pending or running, and the line says that the owner is
silent since when and that its job is still alive. What in ``claims/`` is no claim is named with
the shard files the scan skipped.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.data import claims, ledger
from pipeline.data.dataset import Dataset
from pipeline.data.scan import Meant, Skipped, scan_shards
from pipeline.launch.backends import backend
from pipeline.launch.jobs import COMPLETED, FAILED, PENDING, RUNNING, Job, JobState, error_log

DONE, MISSING = "done", "missing"
STATES = (DONE, RUNNING, PENDING, FAILED, MISSING)


@dataclass(frozen=True)
class ExecutionStatus:
    execution_id: str
    state: str
    attempt: int | None
    job_id: str | None
    detail: str  # shard path, job reason, or why it is missing
    log: Path | None  # stderr of the newest attempt, when one was written
    submitted: ledger.Submitted | None  # the newest submission of the execution
    nodes: tuple[str, ...] = ()  # where a failed attempt ran (Slurm), so that it can be kept off them
    intended: ledger.Intended | None = None  # the newest intent that means it


def dataset_status(dataset: Path | str) -> list[ExecutionStatus]:
    """One status per execution named in the ledger or in the shards, sorted by execution id."""
    return dataset_survey(dataset)[0]


def dataset_survey(dataset: Path | str) -> tuple[list[ExecutionStatus], list[Skipped]]:
    """:func:`dataset_status` and the shard files the scan skipped (each with its reason), which the
    commands list so that no unusable file goes unsaid."""
    folder = Dataset.existing(dataset)
    records, unreadable = ledger.survey(folder)
    submitted = ledger.newest_submissions(records)
    intended = ledger.newest_intents(records)
    failures = {(r.execution_id, r.attempt): r.reason for r in records if isinstance(r, ledger.Failed)}
    stops = {(r.execution_id, r.attempt): r.signal for r in records if isinstance(r, ledger.Interrupted)}
    said = {(r.execution_id, r.attempt): r.event for r in records if isinstance(r, ledger.TERMINAL)}
    starts = {(r.execution_id, r.attempt) for r in records if isinstance(r, ledger.Started)}
    scan = scan_shards(folder)
    meant = Meant.of(records).execution_ids  # a folder under another id is a skipped file, no execution
    executions = set(intended) | set(submitted) | (folder.executions_with_shards() & meant)
    if not executions:
        raise ValueError(f"{dataset} holds no ledger records and no shards: nothing was launched there")
    # the job's folder is where the layout puts it, never a path read from the ledger
    jobs = {e: Job.of(folder, r) for e, r in submitted.items()}
    states = _job_states(list(jobs.values()))
    # a job's members start in the order they were submitted; the first of a job none of whose members
    # began is the one it died running (failed), the others it never reached (missing)
    first_member: dict[str, tuple[str, int]] = {}
    for r in records:
        if isinstance(r, ledger.Submitted):
            first_member.setdefault(r.job_id, (r.execution_id, r.attempt))
    begun_jobs = {r.job_id for e, r in submitted.items() if (e, r.attempt) in starts}

    def not_reached(execution_id: str, record: ledger.Submitted) -> bool:
        key = (execution_id, record.attempt)
        if key in failures:
            return False
        return record.job_id in begun_jobs or first_member.get(record.job_id) != key

    out = []
    for execution_id in sorted(executions):
        shard = scan.newest.get(execution_id)
        record = submitted.get(execution_id)
        intent = intended.get(execution_id)
        if shard is not None:
            path = folder.relative(shard.path)
            out.append(
                ExecutionStatus(
                    execution_id, DONE, shard.attempt, shard.identity.job_id, path, None, record, (), intent
                )
            )
            continue
        rejected = scan.rejection(execution_id)
        no_shard = (
            f"no valid shard ({Path(rejected.path).name}: {rejected.reason})" if rejected else "no shard"
        )
        if (live := live_claim(folder, records, execution_id, record)) is not None:
            claim, life = live
            silent = f"; owner {life.describe()}" if life.job is not None else ""
            detail = f"attempt {claim.attempt} claimed by {claim.owner.describe()}; not started yet{silent}"
            out.append(
                ExecutionStatus(execution_id, PENDING, claim.attempt, None, detail, None, record, (), intent)
            )
            continue
        if record is None:
            if intent is not None and rejected is None:
                no_shard = f"never submitted (meant by the sweep of {intent.at})"
            out.append(ExecutionStatus(execution_id, MISSING, None, None, no_shard, None, None, (), intent))
            continue
        job = jobs[execution_id]
        state = states[job.job_id]
        began = (execution_id, record.attempt) in starts
        if (execution_id, record.attempt) in stops:
            signal = stops[execution_id, record.attempt]
            kind, detail = MISSING, f"attempt {record.attempt} stopped by its sweep on {signal}; {no_shard}"
        elif not began and state.state in (PENDING, RUNNING):  # its group's earlier members run first
            kind, detail = PENDING, f"pending in job {job.job_id}"
        elif state.state == COMPLETED and not began and not_reached(execution_id, record):
            kind, detail = MISSING, f"never started: job {job.job_id} ended before it"
        elif state.state == COMPLETED and said.get((execution_id, record.attempt)) != "finished":
            # the job ended (a group goes on past a failed member): the member's own records say how
            error = failures.get((execution_id, record.attempt), "").strip().split("\n")[0]
            kind, detail = FAILED, error or f"job {job.job_id} ended without a result for it (killed?)"
        elif state.state == COMPLETED:
            kind, detail = MISSING, f"job {job.job_id} completed; {no_shard}"
        elif said.get((execution_id, record.attempt)) == "finished":
            # its own record says it ended, whatever the scheduler still says of its job (completing)
            kind, detail = MISSING, f"attempt {record.attempt} finished in job {job.job_id}; {no_shard}"
        elif state.state == FAILED:
            # The scheduler's verdict first (CANCELLED, NODE_FAIL, ...), then the error the job recorded.
            error = failures.get((execution_id, record.attempt), "").strip().split("\n")[0]
            kind, detail = FAILED, "; ".join(part for part in (state.reason, error) if part)
        else:
            kind, detail = state.state, state.reason or ""
        if kind in (PENDING, RUNNING):
            detail = "; ".join(part for part in (detail, _silent_owner(folder, job, record)) if part)
        nodes = state.nodes if kind == FAILED else ()
        out.append(
            ExecutionStatus(
                execution_id,
                kind,
                record.attempt,
                job.job_id,
                detail,
                _log(folder, job),
                record,
                nodes,
                intent,
            )
        )
    not_claims = [Skipped(path, reason) for path, reason in claims.unreadable(folder)]
    return out, [*scan.skipped, *(Skipped(path, reason) for path, reason in unreadable), *not_claims]


def live_claim(
    dataset: Dataset, records: list[ledger.Record], execution_id: str, submitted: ledger.Submitted | None
) -> tuple[claims.Claim, claims.Life] | None:
    """The claim of an attempt newer than the execution's newest submission whose owner lives and
    which has not ended, with how the owner lives: the sweep that will run it next (until then the
    execution is pending)."""
    claim = claims.newest(dataset, execution_id)
    if claim is None or (submitted is not None and claim.attempt <= submitted.attempt):
        return None
    if ledger.ended(records, execution_id, claim.attempt):
        return None
    life = claims.life(dataset, claim.owner)
    return (claim, life) if life.alive else None


def _log(dataset: Dataset, job: Job) -> Path | None:
    """The job's error log where it lies inside the dataset (a folder linked out is not followed)."""
    log = error_log(job) if dataset.inside(job.log_dir) else None
    return log if log is not None and dataset.inside(log) else None


def _silent_owner(dataset: Dataset, job: Job, record: ledger.Submitted) -> str:
    """``owner sweep S silent since T, its job J still alive``: a live local job of another host whose
    sweep no longer beats (empty otherwise)."""
    if job.host in (None, socket.gethostname()) or record.owner is None:
        return ""
    at = claims.beat_time(dataset, record.owner)
    if claims.fresh(at, time.time()):
        return ""
    return f"owner sweep {record.owner} {claims.Life(True, at, job.job_id).describe()}"


def _job_states(jobs: list[Job]) -> dict[str, JobState]:
    """Every job's state, each asked of the backend that ran it (once per backend)."""
    states: dict[str, JobState] = {}
    for name in sorted({j.backend for j in jobs}):
        try:
            runner = backend(name)
        except ValueError as err:
            raise ValueError(f"the ledger names {err}") from None
        states.update(runner.job_states([j for j in jobs if j.backend == name]))
    return states
