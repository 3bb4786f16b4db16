"""Which executions were launched: the ledger's submissions if the dataset has a ledger, else the matrix."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.launch import ledger
from pipeline.matrix import EXECUTIONS


@dataclass(frozen=True)
class Launched:
    """Launched execution ids (sorted) and where they came from ("ledger" or "matrix")."""

    execution_ids: list[str]
    source: str


def launched(dataset: Path) -> Launched:
    """Executions with a ``submitted`` ledger event, or the full matrix when there is no ledger."""
    if not ledger.ledger_path(dataset).exists():
        return Launched(sorted(e.execution_id for e in EXECUTIONS), "matrix")
    ids = {r["execution_id"] for r in ledger.read(dataset) if r.get("event") == "submitted"}
    return Launched(sorted(ids), "ledger")
