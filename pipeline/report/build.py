"""Aggregate a dataset's shards into the published files: CSV, pairs CSV, JSON and figures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.data.atomic import atomic_write
from pipeline.data.dataset import Dataset
from pipeline.data.scan import Skipped, scan_shards
from pipeline.data.schema import SCHEMA_VERSION
from pipeline.matrix import EXECUTION_BY_ID, EXECUTIONS, counts
from pipeline.report import executions, pairs
from pipeline.report.figures import write_figures
from pipeline.report.launched import launched
from pipeline.report.page import write_report
from pipeline.report.publish import csv_text, json_text

CSV_NAME = "mok-comparison.csv"
PAIRS_NAME = "mok-comparison-pairs.csv"
JSON_NAME = "mok-comparison.json"


@dataclass(frozen=True)
class Aggregate:
    """What was written and what was left out, for the command line to report."""

    files: list[Path]
    skipped: list[Skipped]
    missing: list[str]  # launched, but no valid shard
    document: dict[str, Any]


def aggregate(dataset: Path, out: Path | None = None, *, figures: bool = True, workers: int = 8) -> Aggregate:
    """Read ``dataset``'s shards and write the published files into ``out`` (default: the dataset)."""
    folder = Dataset.existing(dataset)
    out = folder.root if out is None else Path(out)
    out.mkdir(parents=True, exist_ok=True)
    scan = scan_shards(folder, workers=workers)
    skipped = list(scan.skipped)
    rows: list[dict[str, Any]] = []
    states: list[dict[str, Any]] = []
    estimated = executions.estimated_columns(scan.newest.values())
    for execution_id in sorted(scan.newest):
        shard = scan.newest[execution_id]
        shard_file = folder.relative(shard.path)
        try:
            row = executions.execution_row(shard)
        except ValueError as exc:
            skipped.append(Skipped(shard_file, f"metrics cannot be computed ({exc})"))
            continue
        rows.append({**row, **estimated[execution_id], "shard": shard_file})
        if row["kind"] == "packing":
            states.append(_saved_state(row, shard.meta))
    skipped.sort(key=lambda s: s.path)
    pair_rows = pairs.pair_rows(rows)
    ledger = launched(folder)
    present = {r["execution_id"] for r in rows}
    missing = sorted(set(ledger.execution_ids) - present)  # launched, no valid shard
    expected = counts([EXECUTION_BY_ID[i] for i in ledger.execution_ids if i in EXECUTION_BY_ID])
    document = {
        "meta": {
            "schema_version": SCHEMA_VERSION,
            "counts": _counts(len(rows), len({r["workload_id"] for r in rows}), len(pair_rows)),
            "launched": {
                "source": ledger.source,
                "not_in_matrix": [i for i in ledger.execution_ids if i not in EXECUTION_BY_ID],
                **_counts(*expected),
            },
            "matrix": _counts(*counts(EXECUTIONS)),
            "missing": {
                "matrix": sorted({e.execution_id for e in EXECUTIONS} - present),
                "launched_without_shard": missing,
            },
            "shards_read": scan.read,
            "shards_skipped": [{"path": s.path, "reason": s.reason} for s in skipped],
        },
        "executions": rows,
        "pairs": pair_rows,
        "saved_state": states,
    }
    files = [out / CSV_NAME, out / PAIRS_NAME, out / JSON_NAME]
    atomic_write(files[0], csv_text(rows, executions.COLUMNS))
    atomic_write(files[1], csv_text(pair_rows, pairs.COLUMNS))
    atomic_write(files[2], json_text(document))
    if figures:
        pngs = write_figures(out, rows, pair_rows, states)
        files += [*pngs, write_report(out, document, scan.newest, pngs)]
    return Aggregate(files=files, skipped=skipped, missing=missing, document=document)


def _counts(executions_: int, workloads: int, pairs_: int) -> dict[str, int]:
    return {"executions": executions_, "matched_workloads": workloads, "pairs": pairs_}


def _saved_state(row: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any]:
    """Saved-state evidence of one packing execution as its shard recorded it: per layer, and per
    stack (``policy``); ``balanced_rows`` (T x K) is a layer's routed rows on the tracked GPU at load 1.
    ``layers_recomputing`` counts layers with recomputed rows; ``capacity_flags`` counts raised
    capacity flags (null for MoK, which has none)."""
    keys = ("execution_id", "workload_id", "implementation", "pipeline", "precision", "ep", "profile")
    layers = sorted(meta["saved_state"], key=lambda layer: layer["layer"])
    flags = [layer["capacity_flag"] for layer in layers]
    return {
        **{k: row[k] for k in keys},
        "balanced_rows": executions.report_tokens(meta["shape"]) * meta["shape"]["top_k"],
        "layers_recomputing": sum(layer["recomputes"] for layer in layers),
        "capacity_flags": None if any(f is None for f in flags) else sum(flags),
        "policy": meta["policy"],
        "layers": layers,
    }
