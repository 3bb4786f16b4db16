"""The launch ledger: what each sweep meant, which execution attempt went to which job, and how it ended.

It is the contract between the stages that launch, run and inspect executions (beside the shard
contract): a sweep writes ``Intended`` (every execution it means, its launch settings and the
dataset's comparable settings) before it submits anything, the launcher ``Submitted`` per job, rank 0
of each job ``Started`` and then ``Finished`` or ``Failed`` (the submitting process writes ``Failed``
for a job that died without a word, ``Interrupted`` for one it stopped on SIGINT or SIGTERM).
Writers run on many nodes over shared storage (often NFS, where ``O_APPEND`` by several clients may
corrupt a file), so no two writers ever write one file: each record is a file of its own in
``<dataset>/ledger/``, named by time, host, process and a counter, written under a temporary name and
renamed into place as shards are. The ledger is their union; a crash leaves at most a temporary file,
which the reader ignores; so an intent, one record, is there whole or not at all. Paths are stored
relative to the dataset (:class:`~pipeline.data.dataset.Dataset`).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import socket
import stat
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import ClassVar

from pipeline.data import claims
from pipeline.data.atomic import atomic_write
from pipeline.data.codec import RecordError, decode, encode
from pipeline.data.comparable import Comparable
from pipeline.data.dataset import MAX_ATTEMPT, Dataset, check_attempt, safe_name

# a pid, a Slurm job, a Slurm array task, or submitit's job in the sweep's own process (its debug job)
JOB_ID = re.compile(r"[0-9]{1,20}(_[0-9]{1,10})?|DEBUG_[0-9]{1,20}")


def now() -> str:
    """ISO-8601 UTC timestamp used in every record."""
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass(frozen=True)
class _Record:
    execution_id: str
    attempt: int
    job_id: str
    event: ClassVar[str]

    def __post_init__(self) -> None:
        check_attempt(self.attempt)  # bounded: a number read from a dataset becomes the next attempt's
        safe_name(self.execution_id, "execution id")  # names from a ledger become paths: plain ones only
        if not JOB_ID.fullmatch(self.job_id):
            raise ValueError(
                f"job id {self.job_id[:40]!r} is not a scheduler's (digits, digits_digits or DEBUG_digits)"
            )

    def to_json(self) -> dict[str, object]:
        return {"event": self.event, **{k: v for k, v in encode(self).items() if v is not None}}


@dataclass(frozen=True)
class Submitted(_Record):
    """An attempt handed to a scheduler. ``backend`` runs it (``local`` or ``slurm``), on the
    ``cluster`` preset; ``log_dir`` is relative to the dataset; ``settings`` is the JSON of the sweep's
    launch settings (:class:`pipeline.launch.settings.LaunchSettings`), whose numbers a resubmission
    replays (never its shell lines: :mod:`pipeline.commands.resubmit`). ``owner`` names the sweep
    that claimed the attempt (:mod:`pipeline.data.claims`) and ``host`` where a local job runs (its
    pid names it there only): another host knows such a job lives by the heartbeat it keeps."""

    overrides: list[str]
    backend: str
    cluster: str
    log_dir: str
    settings: dict[str, object]  # the launch stage's own record, kept as its JSON
    submitted_at: str = field(default_factory=now)
    requeued_from: int | None = None
    owner: str | None = None
    host: str | None = None
    event: ClassVar[str] = "submitted"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.owner is not None:
            safe_name(self.owner, "owner")  # it names a heartbeat's file
        if self.host is not None and (not self.host or len(self.host) > 255 or not self.host.isprintable()):
            raise ValueError(f"host {self.host[:80]!r} is not a plain host name")


@dataclass(frozen=True)
class Started(_Record):
    at: str = field(default_factory=now)
    event: ClassVar[str] = "started"


@dataclass(frozen=True)
class Finished(_Record):
    """``shard`` is relative to the dataset; ``iteration_ms``, the slowest rank's median iteration
    per phase (the published reduction), is what a sweep following the job reports as it ends."""

    shard: str
    at: str = field(default_factory=now)
    iteration_ms: dict[str, float] | None = None
    event: ClassVar[str] = "finished"


@dataclass(frozen=True)
class Failed(_Record):
    reason: str
    at: str = field(default_factory=now)
    event: ClassVar[str] = "failed"


@dataclass(frozen=True)
class Interrupted(_Record):
    """An attempt that its submitting process stopped on ``signal`` (``SIGINT``, ``SIGTERM``): not a
    failure of the execution, which is missing until it runs again."""

    signal: str
    at: str = field(default_factory=now)
    event: ClassVar[str] = "interrupted"


@dataclass(frozen=True)
class Intention:
    """One execution a sweep means, with the overrides that compose it."""

    execution_id: str
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class Intended:
    """A sweep's intent for one dataset, recorded before any of its jobs is submitted: every execution
    it means (so one that never went out is missing, not forgotten), the ``settings`` it runs them with
    (:class:`pipeline.launch.settings.LaunchSettings` JSON, as in ``Submitted``) and the dataset's
    ``comparable`` settings it was planned with (the first intent of a dataset fixes them)."""

    executions: tuple[Intention, ...]
    settings: dict[str, object]
    comparable: Comparable
    at: str = field(default_factory=now)
    event: ClassVar[str] = "intended"

    def __post_init__(self) -> None:
        if not self.executions:
            raise ValueError("an intent names at least one execution")

    def to_json(self) -> dict[str, object]:
        return {"event": self.event, **encode(self)}

    def intention(self, execution_id: str) -> Intention | None:
        return next((i for i in self.executions if i.execution_id == execution_id), None)


AttemptRecord = Submitted | Started | Finished | Failed | Interrupted
Record = Intended | AttemptRecord
ATTEMPT_RECORDS = (Submitted, Started, Finished, Failed, Interrupted)
EVENTS: dict[str, type[Record]] = {c.event: c for c in (*ATTEMPT_RECORDS, Intended)}
TERMINAL = (Finished, Failed, Interrupted)


def from_json(data: object) -> Record:
    """One record from its JSON object; a ValueError names what is wrong."""
    event = data.get("event") if isinstance(data, dict) else None
    kind = EVENTS.get(str(event))
    if kind is None:
        raise ValueError(f"unknown ledger event {event!r}; allowed: {', '.join(EVENTS)}")
    try:
        return decode(kind, data)
    except RecordError as err:
        raise ValueError(f"ledger event {kind.event!r}: {err}") from None


_sequence = itertools.count()  # with the host and pid, names every record file of this process apart


def append(dataset: Dataset, record: Record) -> None:
    """Write one record as a file of this writer: a temporary name, fsync, then a rename (into the
    ledger folder only where it is one inside the dataset: :meth:`Dataset.check_folder`)."""
    dataset.check_folder(dataset.ledger_dir)
    data = (json.dumps(record.to_json(), sort_keys=True) + "\n").encode()
    writer = f"{socket.gethostname()}-{os.getpid()}"
    path = dataset.ledger_record_path(time.time_ns(), writer, next(_sequence))
    atomic_write(path, data, exclusive=True)


def read(dataset: Dataset) -> list[Record]:
    """Every readable record, in time order (:func:`survey` also says which files were not)."""
    return survey(dataset)[0]


def survey(dataset: Dataset) -> tuple[list[Record], list[tuple[str, str]]]:
    """Every readable record in time order, and each file that is none (its dataset-relative path and
    why): one truncated or foreign file costs its own record, never the ledger. Only regular files
    are opened (a FIFO would block the reader, a link could lead out of the dataset)."""
    records, unreadable = [], []
    for path in dataset.ledger_record_files():
        where = dataset.relative(path)
        try:
            if not stat.S_ISREG(path.lstat().st_mode):
                unreadable.append((where, "not a regular file"))
                continue
            text = path.read_text(errors="replace")
        except OSError as err:
            unreadable.append((where, f"unreadable: {err.strerror}"))
            continue
        try:
            records.append(from_json(json.loads(text)))
        except (json.JSONDecodeError, TypeError, ValueError) as err:
            unreadable.append((where, f"not a ledger record ({err}): {text.strip()[:80]!r}"))
    return records, unreadable


def next_attempt(dataset: Dataset, execution_id: str) -> int:
    """1 + the highest attempt of this execution seen in the ledger, among its shard files or its
    claims."""
    seen = [r.attempt for r in attempt_records(read(dataset)) if r.execution_id == execution_id]
    seen += [*dataset.shard_attempts(execution_id), claims.highest_attempt(dataset, execution_id)]
    following = 1 + max(seen, default=0)
    if following > MAX_ATTEMPT:
        raise ValueError(
            f"{execution_id} has used every attempt number (at most {MAX_ATTEMPT:,}) in {dataset.root}: "
            "run it into a new dataset_dir"
        )
    return following


def attempt_records(records: list[Record]) -> list[AttemptRecord]:
    """The records of job attempts (every record but the intents)."""
    return [r for r in records if isinstance(r, ATTEMPT_RECORDS)]


def intents(records: list[Record]) -> list[Intended]:
    return [r for r in records if isinstance(r, Intended)]


def fixed_settings(records: list[Record]) -> Comparable | None:
    """The dataset's comparable settings, as its first intent fixed them; None before any intent."""
    first = next(iter(intents(records)), None)
    return None if first is None else first.comparable


def newest_intents(records: list[Record]) -> dict[str, Intended]:
    """The newest intent naming each execution."""
    return {i.execution_id: r for r in intents(records) for i in r.executions}


def newest_submissions(records: list[Record]) -> dict[str, Submitted]:
    """The newest ``Submitted`` record of every execution."""
    newest: dict[str, Submitted] = {}
    for r in records:
        if isinstance(r, Submitted) and r.attempt >= getattr(newest.get(r.execution_id), "attempt", 0):
            newest[r.execution_id] = r
    return newest


def ended(records: list[Record], execution_id: str, attempt: int) -> bool:
    """Whether the job of this attempt itself recorded how it ended."""
    return any(
        isinstance(r, TERMINAL) and r.execution_id == execution_id and r.attempt == attempt for r in records
    )
