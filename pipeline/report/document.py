"""The published JSON document (``mok-comparison.json``) as types: what the aggregation builds and the
page reads, written once by ``Document.to_json`` (``docs/dataset.md`` defines every field)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.base.saved_state import LayerState, Policy
from pipeline.data.codec import JsonRecord
from pipeline.data.scan import Skipped
from pipeline.matrix.assumptions import Assumption
from pipeline.report.accounts import PhaseAccount
from pipeline.report.deviations import Deviation
from pipeline.report.publish import Row


@dataclass(frozen=True)
class Counts:
    """Executions, matched workloads (shape + precision) and Dist-MoE / MoK pairs of a selection."""

    executions: int
    matched_workloads: int
    pairs: int


@dataclass(frozen=True)
class LaunchedCounts(Counts):
    """The counts of what was launched in the matrix, where the launched set came from (``ledger``, or
    ``matrix`` for a dataset without one), and launched ids the matrix does not know."""

    source: str
    not_in_matrix: tuple[str, ...]


@dataclass(frozen=True)
class Missing:
    """Execution ids without a published row: of the matrix, and of what was launched."""

    matrix: tuple[str, ...]
    launched_without_shard: tuple[str, ...]


@dataclass(frozen=True)
class Meta:
    """What the document covers: counts, completeness and the shard files read or skipped."""

    schema_version: int
    counts: Counts
    launched: LaunchedCounts
    matrix: Counts
    missing: Missing
    shards_read: tuple[str, ...]
    shards_skipped: tuple[Skipped, ...]
    assumptions: tuple[Assumption, ...]  # the matrix's choices the report does not state
    deviations: tuple[Deviation, ...]  # where what ran differs from what the report measured
    kernel_rates: str | None  # the dataset's measured kernel rates behind the expectation (its source)


@dataclass(frozen=True)
class PackingEvidence:
    """Saved-state evidence of one packing execution as its shard recorded it: per layer, and per
    stack (``policy``; None where the shard's schema version recorded none); ``balanced_rows`` (T x K)
    is a layer's routed rows on the tracked GPU at load 1, ``layers_recomputing`` counts layers with
    recomputed rows, ``capacity_flags`` the raised capacity flags (None for MoK, which has none)."""

    execution_id: str
    workload_id: str
    implementation: str
    pipeline: str
    precision: str
    ep: int
    profile: str
    balanced_rows: int
    layers_recomputing: int
    capacity_flags: int | None
    policy: Policy | None
    layers: tuple[LayerState, ...]


@dataclass(frozen=True)
class Document(JsonRecord):
    """``mok-comparison.json``: meta, one row per execution and per pair, packing evidence, and each
    execution's phase account."""

    meta: Meta
    executions: tuple[Row, ...]
    pairs: tuple[Row, ...]
    saved_state: tuple[PackingEvidence, ...]
    accounts: tuple[PhaseAccount, ...]
