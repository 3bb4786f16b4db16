"""Launch ledger: ``<dataset>/ledger.jsonl``, the record of which execution went to which job.

Append-only, one JSON object per line. Each record is one ``os.write`` of one whole line on a file
opened with ``O_APPEND``, so concurrent appenders (launcher, ranks 0 of running jobs) never interleave
and a crash can at most leave a torn last line, which the reader skips.
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pipeline.data.schema import shard_dir

LEDGER_NAME = "ledger.jsonl"
EVENTS: dict[str, tuple[str, ...]] = {
    "submitted": (
        "execution_id",
        "attempt",
        "overrides",
        "job_id",
        "launcher",
        "cluster",
        "log_dir",
        "submitted_at",
    ),
    "started": ("execution_id", "attempt", "job_id", "at"),
    "finished": ("execution_id", "attempt", "job_id", "at", "shard"),
    "failed": ("execution_id", "attempt", "job_id", "at", "reason"),
}
_ATTEMPT_FILE = re.compile(r"attempt-(\d+)\.parquet")


def ledger_path(dataset: Path) -> Path:
    return Path(dataset) / LEDGER_NAME


def log_dir(dataset: Path, execution_id: str, attempt: int) -> Path:
    """``<dataset>/logs/<execution_id>/attempt-<n>/``: submitit's folder for that job."""
    return Path(dataset) / "logs" / execution_id / f"attempt-{attempt}"


def now() -> str:
    """ISO-8601 UTC timestamp used in every record."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def append(dataset: Path, record: dict[str, Any]) -> None:
    """Append one record after checking that it carries its event's fields."""
    event = record.get("event")
    if event not in EVENTS:
        raise ValueError(f"unknown ledger event {event!r}; allowed: {', '.join(EVENTS)}")
    missing = [k for k in EVENTS[event] if k not in record]
    if missing:
        raise ValueError(f"ledger event {event!r} lacks field(s) {missing}")
    if not isinstance(record["attempt"], int) or record["attempt"] < 1:
        raise ValueError(f"attempt must be an integer >= 1, got {record['attempt']!r}")
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    path = ledger_path(dataset)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        written = os.write(fd, line)
    finally:
        os.close(fd)
    if written != len(line):
        raise OSError(f"short write to {path}: {written} of {len(line)} bytes")


def read(dataset: Path) -> list[dict[str, Any]]:
    """All complete records in order; a torn final line (crash mid-append) is skipped."""
    path = ledger_path(dataset)
    if not path.exists():
        return []
    # The text after the last newline is a torn line whose append never completed (or nothing).
    complete = path.read_text().split("\n")[:-1]
    records = []
    for number, line in enumerate(complete, start=1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{number}: not a JSON record ({err}): {line[:80]!r}") from None
    return records


def next_attempt(dataset: Path, execution_id: str) -> int:
    """1 + the highest attempt of this execution seen in the ledger or among its shard files."""
    seen = [r["attempt"] for r in read(dataset) if r.get("execution_id") == execution_id]
    folder = shard_dir(dataset, execution_id)
    if folder.is_dir():
        seen += [int(m.group(1)) for p in folder.iterdir() if (m := _ATTEMPT_FILE.fullmatch(p.name))]
    return 1 + max(seen, default=0)
