"""Which executions were launched: the ledger's submissions if the dataset has a ledger, else the matrix."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.data import ledger
from pipeline.data.dataset import Dataset
from pipeline.matrix import EXECUTIONS


@dataclass(frozen=True)
class Launched:
    """Launched execution ids (sorted) and where they came from ("ledger" or "matrix")."""

    execution_ids: list[str]
    source: str


def launched(dataset: Dataset) -> Launched:
    """Executions with a ``submitted`` ledger event, or the full matrix when there is no ledger."""
    if not dataset.has_ledger():
        return Launched(sorted(e.execution_id for e in EXECUTIONS), "matrix")
    return Launched(sorted(ledger.newest_submissions(ledger.read(dataset))), "ledger")
