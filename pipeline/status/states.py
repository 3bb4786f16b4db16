"""Status of every execution of a launched dataset: ledger + shards + the jobs' own state.

``done``: a valid shard exists. Otherwise the newest attempt in the ledger decides: its job is
``pending`` or ``running``; ``failed`` (with a reason and the log to read); or it completed without
leaving a valid shard (deleted, corrupt), which is ``missing`` like an execution whose shards are gone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.data.reader import ShardError, read_shard
from pipeline.data.schema import shard_dir
from pipeline.launch import ledger
from pipeline.status.jobs import COMPLETED, FAILED, Job, error_log, job_states

DONE, MISSING = "done", "missing"
STATES = (DONE, "running", "pending", FAILED, MISSING)


@dataclass(frozen=True)
class ExecutionStatus:
    execution_id: str
    state: str
    attempt: int | None
    job_id: str | None
    detail: str  # shard path, job reason, or why it is missing
    log: Path | None  # stderr of the newest attempt, when one was written
    submitted: dict[str, Any] | None  # the newest "submitted" ledger record


def dataset_status(dataset: Path) -> list[ExecutionStatus]:
    """One status per execution named in the ledger or in the shards, sorted by execution id."""
    dataset = Path(dataset)
    if not dataset.is_dir():
        raise ValueError(f"dataset directory {str(dataset)!r} does not exist")
    records = ledger.read(dataset)
    submitted = _newest_submissions(records)
    failures = {(r["execution_id"], r["attempt"]): r["reason"] for r in records if r["event"] == "failed"}
    executions = set(submitted) | _executions_with_shards(dataset)
    if not executions:
        raise ValueError(f"{dataset} holds no ledger.jsonl records and no shards: nothing was launched there")
    jobs = {e: _job(dataset, r) for e, r in submitted.items()}
    states = job_states(list(jobs.values()))
    out = []
    for execution_id in sorted(executions):
        shard, rejected = _valid_shard(dataset, execution_id)
        record = submitted.get(execution_id)
        if shard is not None:
            out.append(ExecutionStatus(execution_id, DONE, shard[0], shard[1], str(shard[2]), None, record))
            continue
        no_shard = f"no valid shard ({rejected})" if rejected else "no shard"
        if record is None:
            out.append(ExecutionStatus(execution_id, MISSING, None, None, no_shard, None, None))
            continue
        job = jobs[execution_id]
        state = states[job.job_id]
        log = error_log(job)
        attempt = record["attempt"]
        if state.state == COMPLETED:
            kind, detail = MISSING, f"job {job.job_id} completed; {no_shard}"
        elif state.state == FAILED:
            # The scheduler's verdict first (CANCELLED, NODE_FAIL, ...), then the error the job recorded.
            error = failures.get((execution_id, attempt), "").strip().split("\n")[0]
            kind, detail = FAILED, "; ".join(part for part in (state.reason, error) if part)
        else:
            kind, detail = state.state, state.reason or ""
        out.append(ExecutionStatus(execution_id, kind, attempt, job.job_id, detail, log, record))
    return out


def _newest_submissions(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    newest: dict[str, dict[str, Any]] = {}
    for r in records:
        if r["event"] == "submitted" and r["attempt"] >= newest.get(r["execution_id"], {}).get("attempt", 0):
            newest[r["execution_id"]] = r
    return newest


def _job(dataset: Path, record: dict[str, Any]) -> Job:
    log_dir = Path(record["log_dir"])
    if not log_dir.is_absolute():
        log_dir = dataset / log_dir
    return Job(str(record["job_id"]), record["launcher"], log_dir)


def _executions_with_shards(dataset: Path) -> set[str]:
    root = dataset / "shards"
    if not root.is_dir():
        return set()
    return {p.name.removeprefix("execution=") for p in root.iterdir() if p.name.startswith("execution=")}


def _valid_shard(dataset: Path, execution_id: str) -> tuple[tuple[int, str, Path] | None, str | None]:
    """((attempt, job id, path) of the newest shard that passes validation, or None; the newest
    rejection reason, or None)."""
    folder = shard_dir(dataset, execution_id)
    rejected = None
    if folder.is_dir():
        for path in sorted(folder.glob("attempt-*.parquet"), key=_attempt_number, reverse=True):
            try:
                shard = read_shard(path)
            except ShardError as err:
                rejected = rejected or f"{path.name}: {err.reason}"
                continue
            return (shard.attempt, str(shard.identity["job_id"]), path), None
    return None, rejected


def _attempt_number(path: Path) -> int:
    digits = path.stem.removeprefix("attempt-")
    return int(digits) if digits.isdigit() else 0
