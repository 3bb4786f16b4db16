"""Aggregate a dataset's shards into the published files: CSV, pairs CSV, JSON, figures and page.

Everything is computed first, the figures and the page included; then the files are published as one
set with their manifest (:mod:`pipeline.report.publication`: all of them or, on any error, none, the
previous publication left byte-identical). What is published names paths relative to the dataset
only: a skip reason that names a file of the dataset names it so, and any other absolute path is
withheld, so a copied dataset publishes the same bytes.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from pipeline.base.metrics import phases
from pipeline.cost import KernelRates
from pipeline.data import rates as kernel_rates
from pipeline.data.dataset import Dataset
from pipeline.data.reader import Shard
from pipeline.data.scan import Skipped, scan_shards
from pipeline.data.schema import SCHEMA_VERSION
from pipeline.matrix import counts
from pipeline.matrix.assumptions import assumptions
from pipeline.report import cases, executions, pairs
from pipeline.report.accounts import PhaseAccount
from pipeline.report.deviations import deviations
from pipeline.report.document import Counts, Document, LaunchedCounts, Meta, Missing, PackingEvidence
from pipeline.report.figures import figure_files, is_figure_name
from pipeline.report.launched import launched
from pipeline.report.page import REPORT_NAME, report_html
from pipeline.report.provenance import mixed
from pipeline.report.publication import publish
from pipeline.report.publish import Row, csv_text, json_text

CSV_NAME = "mok-comparison.csv"
PAIRS_NAME = "mok-comparison-pairs.csv"
JSON_NAME = "mok-comparison.json"
# An absolute path, where it starts a word of a text: what is left once the dataset's own are relative.
_ABSOLUTE = re.compile(r"(?<![\w.~/-])/(?=[\w.~-])[^\s'\"()]*")
OUTSIDE = "<a path outside the dataset>"


@dataclass(frozen=True)
class Aggregate:
    """What was written and what was left out, for the command line to report."""

    files: list[Path]
    skipped: list[Skipped]
    missing: list[str]  # launched, but no valid shard
    document: Document
    mixed: dict[str, dict[str, int]]  # comparable settings that differ between the published shards


def aggregate(dataset: Path, out: Path | None = None, *, figures: bool = True, workers: int = 8) -> Aggregate:
    """Read ``dataset``'s shards and write the published files into ``out`` (default: the dataset), with
    the full-scale estimates the kept table holds (the others' cells are empty). A
    :class:`~pipeline.report.publication.PublishError` says why nothing was published."""
    folder = Dataset.existing(dataset)
    out = folder.root if out is None else Path(out)
    scan = scan_shards(folder, workers=workers)
    skipped = list(scan.skipped)
    rows: list[Row] = []
    states: list[PackingEvidence] = []
    accounts: list[PhaseAccount] = []
    estimated = executions.estimated_columns(scan.newest.values())
    rates, rates_note = _rates(folder)
    windows: dict[str, np.ndarray] = {}
    for execution_id in sorted(scan.newest):
        shard = scan.newest[execution_id]
        shard_file = folder.relative(shard.path)
        try:
            reduced = phases(shard.phase, shard.rank, shard.window_ms, shard.iterations)
            row, account = executions.execution(shard, reduced, rates, kept_traces(folder, shard))
            windows[execution_id] = reduced["combined"].windows
        except ValueError as exc:
            skipped.append(Skipped(shard_file, f"metrics cannot be computed ({exc})"))
            continue
        rows.append({**row, **estimated[execution_id], "shard": shard_file})
        if account is not None:
            accounts.append(account)
        if shard.identity.kind == "packing":
            states.append(packing_evidence(shard))
    skipped = sorted(
        (Skipped(s.path, dataset_relative(s.reason, folder)) for s in skipped), key=lambda s: s.path
    )
    suite = scan.suite  # what the dataset's first intent recorded (the report's before suites)
    pair_rows = pairs.pair_rows(rows, windows) if "pairs" in suite.publishes else []
    ledger = launched(folder)
    present = {str(r["execution_id"]) for r in rows}
    missing = sorted(set(ledger.execution_ids) - present)  # launched, no valid shard
    by_id = suite.by_id
    expected = counts([by_id[i] for i in ledger.execution_ids if i in by_id])
    document = Document(
        meta=Meta(
            schema_version=SCHEMA_VERSION,
            counts=Counts(len(rows), len({r["workload_id"] for r in rows}), len(pair_rows)),
            launched=LaunchedCounts(
                *expected,
                source=ledger.source,
                not_in_matrix=tuple(i for i in ledger.execution_ids if i not in by_id),
            ),
            matrix=Counts(*counts(suite.executions)),
            missing=Missing(
                matrix=tuple(sorted(set(by_id) - present)),
                launched_without_shard=tuple(missing),
            ),
            shards_read=tuple(scan.read),
            shards_skipped=tuple(skipped),
            assumptions=assumptions(suite),
            deviations=tuple(deviations(scan.newest[str(r["execution_id"])] for r in rows)),
            kernel_rates=rates_note,
        ),
        executions=tuple(rows),
        pairs=tuple(pair_rows),
        saved_state=tuple(states),
        accounts=tuple(accounts),
    )
    files = {CSV_NAME: csv_text(rows, executions.COLUMNS).encode()}
    if "pairs" in suite.publishes:
        files[PAIRS_NAME] = csv_text(pair_rows, pairs.COLUMNS).encode()
    case_rows = cases.case_rows(rows, scan.newest, suite) if "cases" in suite.publishes else []
    if "cases" in suite.publishes:
        files[cases.CASES_NAME] = csv_text(case_rows, cases.COLUMNS).encode()
    files[JSON_NAME] = json_text(document.to_json()).encode()
    if figures:
        pngs = figure_files(rows, pair_rows, states, paired="pairs" in suite.publishes)
        files |= pngs
        own = [cases.section(case_rows)] if "cases" in suite.publishes else []
        files[REPORT_NAME] = report_html(document, scan.newest, pngs, suite, own).encode()
    written = publish(out, files, owned=published_name)
    published = [scan.newest[str(r["execution_id"])] for r in rows]
    return Aggregate(
        files=written, skipped=skipped, missing=missing, document=document, mixed=mixed(published)
    )


def _rates(folder: Dataset) -> tuple[KernelRates | None, str | None]:
    """The dataset's measured kernel rates and what the document says of them (their device and
    source; a table that cannot be read is not used, and the document says why)."""
    try:
        rates = kernel_rates.kept(folder)
    except kernel_rates.RatesError as err:
        return None, dataset_relative(f"not used: {err}", folder)
    return rates, None if rates is None else f"{rates.device}: {rates.source}"


def kept_traces(folder: Dataset, shard: Shard) -> tuple[str, ...]:
    """The profiles a shard's account kept (``keep_traces``), as paths relative to the dataset: each
    rank's that is a regular file inside it (data for a person to open; nothing here reads them)."""
    if not shard.meta.account.traces:
        return ()
    found = []
    for rank in sorted(r.rank for r in shard.meta.account.ranks):
        path = folder.trace_path(shard.execution_id, shard.attempt, rank)
        if path.is_file() and not path.is_symlink() and folder.inside(path):
            found.append(folder.relative(path))
    return tuple(found)


def published_name(name: str) -> bool:
    """Whether ``name`` is one of the files a publication writes (what a new one replaces or removes)."""
    return name in (CSV_NAME, PAIRS_NAME, cases.CASES_NAME, JSON_NAME, REPORT_NAME) or is_figure_name(name)


def dataset_relative(text: str, folder: Dataset) -> str:
    """``text`` with every path into ``folder`` relative to its root and any other absolute path
    withheld, for publication."""
    for root in sorted({str(folder.root), os.path.realpath(folder.root)}, key=len, reverse=True):
        text = re.sub(re.escape(root) + r"(/|(?![\w.~-]))", lambda m: "" if m.group(1) else ".", text)
    return _ABSOLUTE.sub(OUTSIDE, text)


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
