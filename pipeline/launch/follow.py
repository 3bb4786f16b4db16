"""Following a sweep's jobs, each running a group of executions: every execution's start and end as
its job records them in the ledger, in the order they happen on any backend, and what a job that
ended says of its members that did not.

A member's verdict is read only once its job's processes are gone (``settle``: a local job's ranks
outlive a controller killed outright for a moment), so no rank writes after it. A member that started
and has no end then was cut short (and so was the first member of a job that died before any began):
its failure is recorded with the cause submitit reports (the job's own error, or its death), unless
its shard was written before the end (then it finished, and is recorded so). A member that never
started is not recorded: it is missing, for ``pipeline.resubmit`` (its outcome says why it did not
run).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from pipeline.bench.spec import JobSpec, Summary
from pipeline.data import ledger
from pipeline.data.dataset import Dataset
from pipeline.launch.groups import Group
from pipeline.launch.jobs import Outcome, Submission, cause, first_line

POLL_S = 0.5


def follow(
    jobs: Sequence[tuple[Group, Submission]],
    started: Callable[[JobSpec], None],
    poll_s: float = POLL_S,
    settle: Callable[[Group, Any], str | None] | None = None,
) -> Iterator[Outcome]:
    """One outcome per member of every group, as each ends; ``started`` as each starts. ``jobs``
    pairs each group with its submitit job; ``settle`` returns once a job that submitit says is done
    has no process left (the backend's to say how), with how the job died where the backend knows."""
    waiting = dict(enumerate(jobs))
    announced: set[tuple[Dataset, str, int]] = set()
    ended: set[tuple[Dataset, str, int]] = set()
    while waiting:
        # a job's done() is read before the ledger, so every record it wrote is in this read
        finished = [i for i, (_, job) in waiting.items() if job.done()]
        causes = {i: None if settle is None else settle(*waiting[i]) for i in finished}
        records = {d: ledger.read(d) for d in {g.dataset for g, _ in waiting.values()}}
        for group, _ in waiting.values():
            said = ledger.attempt_records(records[group.dataset])
            for p in group.members:
                key = (p.dataset, p.execution_id, p.attempt)
                mine = [r for r in said if (r.execution_id, getattr(r, "attempt", None)) == key[1:]]
                if key not in announced and any(isinstance(r, ledger.Started) for r in mine):
                    announced.add(key)
                    started(p)
                end = next((r for r in mine if isinstance(r, ledger.Finished | ledger.Failed)), None)
                if key in ended or end is None:
                    continue
                ended.add(key)
                if isinstance(end, ledger.Finished):
                    shard = str(p.dataset.root / Path(end.shard))
                    yield Outcome(p, Summary(shard, dict(end.iteration_ms or {})), None)
                else:
                    yield Outcome(p, None, first_line(end.reason))
        for i in finished:
            group, job = waiting.pop(i)
            yield from _closing(group, job, records[group.dataset], ended, causes[i])
        if waiting:
            time.sleep(poll_s)


def _closing(
    group: Group,
    job: Submission,
    records: list[ledger.Record],
    ended: set[tuple[Dataset, str, int]],
    died: str | None = None,
) -> Iterator[Outcome]:
    """The outcomes of a finished job's members that recorded no end; ``died``: how the job died,
    where its backend knows (else submitit's word)."""

    left = [p for p in group.members if (p.dataset, p.execution_id, p.attempt) not in ended]
    if not left:
        return
    if died is not None:
        why = died
    else:
        try:
            job.results()
            why = "its job ended without running it"
        except Exception as err:  # submitit re-raises the task's error, or reports the job's death
            why = cause(err)
    begun = {(r.execution_id, r.attempt) for r in records if isinstance(r, ledger.Started)}
    members = {(p.execution_id, p.attempt) for p in group.members}
    in_flight = left[0] if not begun & members else None  # a job that died before any member began
    for p in left:
        shard = p.dataset.shard_path(p.execution_id, p.attempt)
        if (p.execution_id, p.attempt) in begun and shard.is_file():
            # its shard was written, its record not (the job ended in between): it finished
            relative = p.dataset.relative(shard)
            ledger.append(
                p.dataset, ledger.Finished(p.execution_id, p.attempt, str(job.job_id), shard=relative)
            )
            yield Outcome(p, Summary(str(shard), {}), None)
        elif (p.execution_id, p.attempt) in begun or p is in_flight:
            # cut short: its failure is recorded here, since the job could not
            ledger.append(p.dataset, ledger.Failed(p.execution_id, p.attempt, str(job.job_id), reason=why))
            yield Outcome(p, None, why)
        else:
            yield Outcome(p, None, None, missing=f"not started: job {job.job_id} ended first ({why})")
