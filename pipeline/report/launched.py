"""Which executions were launched: those the dataset's sweeps meant or submitted if it has a ledger,
else the matrix."""

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
    """Executions with an ``intended`` or ``submitted`` ledger record (meant by a sweep, whether or not
    it went out before the sweep was stopped), or the full matrix when there is no ledger."""
    if not dataset.has_ledger():
        return Launched(sorted(e.execution_id for e in EXECUTIONS), "matrix")
    records = ledger.read(dataset)
    return Launched(
        sorted(set(ledger.newest_submissions(records)) | set(ledger.newest_intents(records))), "ledger"
    )
