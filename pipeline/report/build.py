"""Aggregate a dataset's shards into the published files: CSV, pairs CSV, JSON and figures."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path

from pipeline.data.atomic import atomic_write
from pipeline.data.codec import encode
from pipeline.data.dataset import Dataset
from pipeline.data.reader import Shard
from pipeline.data.scan import Skipped, scan_shards
from pipeline.data.schema import SCHEMA_VERSION
from pipeline.matrix import EXECUTION_BY_ID, EXECUTIONS, counts
from pipeline.matrix.assumptions import ASSUMPTIONS
from pipeline.report import executions, pairs
from pipeline.report.deviations import deviations
from pipeline.report.document import Counts, Document, LaunchedCounts, Meta, Missing, PackingEvidence
from pipeline.report.figures import write_figures
from pipeline.report.launched import launched
from pipeline.report.page import write_report
from pipeline.report.publish import Row, csv_text, json_text

CSV_NAME = "mok-comparison.csv"
PAIRS_NAME = "mok-comparison-pairs.csv"
JSON_NAME = "mok-comparison.json"


@dataclass(frozen=True)
class Aggregate:
    """What was written and what was left out, for the command line to report."""

    files: list[Path]
    skipped: list[Skipped]
    missing: list[str]  # launched, but no valid shard
    document: Document


def aggregate(dataset: Path, out: Path | None = None, *, figures: bool = True, workers: int = 8) -> Aggregate:
    """Read ``dataset``'s shards and write the published files into ``out`` (default: the dataset)."""
    folder = Dataset.existing(dataset)
    out = folder.root if out is None else Path(out)
    out.mkdir(parents=True, exist_ok=True)
    scan = scan_shards(folder, workers=workers)
    skipped = list(scan.skipped)
    rows: list[Row] = []
    states: list[PackingEvidence] = []
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
        if shard.identity.kind == "packing":
            states.append(packing_evidence(shard))
    skipped.sort(key=lambda s: s.path)
    pair_rows = pairs.pair_rows(rows)
    ledger = launched(folder)
    present = {str(r["execution_id"]) for r in rows}
    missing = sorted(set(ledger.execution_ids) - present)  # launched, no valid shard
    expected = counts([EXECUTION_BY_ID[i] for i in ledger.execution_ids if i in EXECUTION_BY_ID])
    document = Document(
        meta=Meta(
            schema_version=SCHEMA_VERSION,
            counts=Counts(len(rows), len({r["workload_id"] for r in rows}), len(pair_rows)),
            launched=LaunchedCounts(
                *expected,
                source=ledger.source,
                not_in_matrix=tuple(i for i in ledger.execution_ids if i not in EXECUTION_BY_ID),
            ),
            matrix=Counts(*counts(EXECUTIONS)),
            missing=Missing(
                matrix=tuple(sorted({e.execution_id for e in EXECUTIONS} - present)),
                launched_without_shard=tuple(missing),
            ),
            shards_read=tuple(scan.read),
            shards_skipped=tuple(skipped),
            assumptions=ASSUMPTIONS,
            deviations=tuple(deviations(scan.newest[str(r["execution_id"])] for r in rows)),
        ),
        executions=tuple(rows),
        pairs=tuple(pair_rows),
        saved_state=tuple(states),
    )
    files = [out / CSV_NAME, out / PAIRS_NAME, out / JSON_NAME]
    atomic_write(files[0], csv_text(rows, executions.COLUMNS))
    atomic_write(files[1], csv_text(pair_rows, pairs.COLUMNS))
    atomic_write(files[2], json_text(document.to_json()))
    if figures:
        pngs = write_figures(out, rows, pair_rows, [encode(s) for s in states])
        files += [*pngs, write_report(out, document, scan.newest, pngs)]
    return Aggregate(files=files, skipped=skipped, missing=missing, document=document)


def packing_evidence(shard: Shard) -> PackingEvidence:
    """The saved-state evidence of one packing shard, its layers in order."""
    meta, named = shard.meta, {f.name for f in fields(PackingEvidence)}
    layers = tuple(sorted(meta.saved_state, key=lambda layer: layer.layer))
    flags = [layer.capacity_flag for layer in layers]
    return PackingEvidence(
        **{k: v for k, v in asdict(shard.identity).items() if k in named},  # the execution it is of
        balanced_rows=meta.shape.nominal_tokens * meta.shape.top_k,
        layers_recomputing=sum(layer.recomputes for layer in layers),
        capacity_flags=None if any(f is None for f in flags) else sum(f is True for f in flags),
        policy=meta.policy,
        layers=layers,
    )
