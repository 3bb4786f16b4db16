"""Which executions were launched: the ledger's submissions if the dataset has a ledger, else the matrix.

The ledger (``<dataset>/ledger.jsonl``) is append-only JSON lines; a line that does not parse (e.g. a
write cut short) is reported by line number rather than trusted or fatal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pipeline.matrix import EXECUTIONS

LEDGER = "ledger.jsonl"


@dataclass(frozen=True)
class Launched:
    """Launched execution ids (sorted), where they came from, and ledger lines that were unusable."""

    execution_ids: list[str]
    source: str  # "ledger" or "matrix"
    bad_ledger_lines: list[int]


def launched(dataset: Path) -> Launched:
    """Executions with a ``submitted`` ledger event, or the full matrix when there is no ledger."""
    ledger = Path(dataset) / LEDGER
    if not ledger.exists():
        return Launched(sorted(e.execution_id for e in EXECUTIONS), "matrix", [])
    ids: set[str] = set()
    bad: list[int] = []
    with ledger.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                bad.append(number)
                continue
            if not isinstance(record, dict) or not isinstance(record.get("execution_id"), str):
                bad.append(number)
            elif record.get("event") == "submitted":
                ids.add(record["execution_id"])
    return Launched(sorted(ids), "ledger", bad)
