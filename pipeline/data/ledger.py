"""The launch ledger: which execution attempt went to which job, and how it ended.

It is the contract between the stages that launch, run and inspect executions (beside the shard
contract): the launcher writes ``Submitted``, rank 0 of each job ``Started`` and then ``Finished`` or
``Failed``. Writers run on many nodes over shared storage (often NFS, where ``O_APPEND`` by several
clients may corrupt a file), so no two writers ever write one file: each record is a file of its own
in ``<dataset>/ledger/``, named by time, host, process and a counter, written under a temporary name
and renamed into place as shards are. The ledger is their union; a crash leaves at most a temporary
file, which the reader ignores. ``ledger.jsonl`` of older datasets (one record a line) is read first.
Paths are stored relative to the dataset (:class:`~pipeline.data.dataset.Dataset`).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import time
from dataclasses import MISSING, asdict, dataclass, field, fields
from datetime import UTC, datetime
from typing import Any, ClassVar

from pipeline.data.atomic import atomic_write
from pipeline.data.dataset import Dataset


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
        if isinstance(self.attempt, bool) or not isinstance(self.attempt, int) or self.attempt < 1:
            raise ValueError(f"attempt must be an integer >= 1, got {self.attempt!r}")
        if not isinstance(self.job_id, str):
            object.__setattr__(self, "job_id", str(self.job_id))

    def to_json(self) -> dict[str, Any]:
        return {"event": self.event, **{k: v for k, v in asdict(self).items() if v is not None}}


@dataclass(frozen=True)
class Submitted(_Record):
    """An attempt handed to a scheduler. ``launcher`` is the backend (``local`` or ``slurm``),
    ``cluster`` the cluster preset; ``log_dir`` is relative to the dataset; ``settings`` the sweep's
    effective launcher settings (``pipeline.launch.settings``; absent in older ledgers), which a
    resubmission replays."""

    overrides: list[str]
    launcher: str
    cluster: str
    log_dir: str
    submitted_at: str = field(default_factory=now)
    requeued_from: int | None = None
    settings: dict[str, Any] | None = None
    event: ClassVar[str] = "submitted"


@dataclass(frozen=True)
class Started(_Record):
    at: str = field(default_factory=now)
    event: ClassVar[str] = "started"


@dataclass(frozen=True)
class Finished(_Record):
    """``shard`` is relative to the dataset."""

    shard: str
    at: str = field(default_factory=now)
    event: ClassVar[str] = "finished"


@dataclass(frozen=True)
class Failed(_Record):
    reason: str
    at: str = field(default_factory=now)
    event: ClassVar[str] = "failed"


Record = Submitted | Started | Finished | Failed
EVENTS: dict[str, type[Record]] = {c.event: c for c in (Submitted, Started, Finished, Failed)}
TERMINAL = (Finished, Failed)


def from_json(data: dict[str, Any]) -> Record:
    """One record from its JSON object; a ValueError names what is wrong."""
    kind = EVENTS.get(data.get("event", ""))
    if kind is None:
        raise ValueError(f"unknown ledger event {data.get('event')!r}; allowed: {', '.join(EVENTS)}")
    known = fields(kind)
    missing = [f.name for f in known if f.name not in data and f.default is f.default_factory is MISSING]
    if missing:
        raise ValueError(f"ledger event {kind.event!r} lacks field(s) {missing}")
    return kind(**{f.name: data[f.name] for f in known if f.name in data})


_sequence = itertools.count()  # with the host and pid, names every record file of this process apart


def append(dataset: Dataset, record: Record) -> None:
    """Write one record as a file of this writer: a temporary name, fsync, then a rename."""
    data = (json.dumps(record.to_json(), sort_keys=True) + "\n").encode()
    writer = f"{socket.gethostname()}-{os.getpid()}"
    path = dataset.ledger_record_path(time.time_ns(), writer, next(_sequence))
    atomic_write(path, data, exclusive=True)


def read(dataset: Dataset) -> list[Record]:
    """All records: those of an older ``ledger.jsonl`` (a torn final line, from a crash mid-append, is
    skipped), then every record file in time order."""
    records = []
    legacy = dataset.legacy_ledger_path
    if legacy.exists():
        # The text after the last newline is a torn line whose append never completed (or nothing).
        for number, line in enumerate(legacy.read_text().split("\n")[:-1], start=1):
            records.append(_parse(line, f"{legacy}:{number}"))
    for path in dataset.ledger_record_files():
        records.append(_parse(path.read_text(), str(path)))
    return records


def _parse(text: str, where: str) -> Record:
    try:
        return from_json(json.loads(text))
    except (json.JSONDecodeError, TypeError, ValueError) as err:
        raise ValueError(f"{where}: not a ledger record ({err}): {text.strip()[:80]!r}") from None


def next_attempt(dataset: Dataset, execution_id: str) -> int:
    """1 + the highest attempt of this execution seen in the ledger or among its shard files."""
    seen = [r.attempt for r in read(dataset) if r.execution_id == execution_id]
    return 1 + max(seen + dataset.shard_attempts(execution_id), default=0)


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
