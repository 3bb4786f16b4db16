"""Shard schema: one parquet file per execution attempt, one row per rank x phase x window
(``<dataset>/shards/execution=<id>/attempt-<n>.parquet``, see :mod:`pipeline.data.dataset`).

The columns: the attempt's :class:`ShardIdentity` (one value in every row), then per row ``rank``,
``window``, ``phase`` and ``window_ms`` (that rank's window time in milliseconds). The file's
key-value metadata ``execution`` holds the :class:`~pipeline.data.meta.ExecutionMeta` JSON object
(``docs/dataset.md`` lists its fields).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

import pyarrow as pa

from pipeline.data.meta import ExecutionMeta
from pipeline.matrix import Execution

SCHEMA_VERSION = ExecutionMeta.VERSION
METADATA_KEY = b"execution"

SCHEMA = pa.schema(
    [
        pa.field("execution_id", pa.string(), nullable=False),
        pa.field("workload_id", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("profile", pa.string(), nullable=False),
        pa.field("precision", pa.string(), nullable=False),
        pa.field("implementation", pa.string(), nullable=False),
        pa.field("pipeline", pa.string(), nullable=False),
        pa.field("ep", pa.int32(), nullable=False),
        pa.field("ranks", pa.int32(), nullable=False),
        pa.field("d_ff", pa.int32(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("window", pa.int32(), nullable=False),
        pa.field("iterations", pa.int32(), nullable=False),
        pa.field("phase", pa.string(), nullable=False),
        pa.field("window_ms", pa.float64(), nullable=False),
        pa.field("attempt", pa.int32(), nullable=False),
        pa.field("job_id", pa.string(), nullable=False),
        pa.field("device", pa.string(), nullable=False),
    ]
)


@dataclass(frozen=True)
class Identity:
    """What an attempt's rows all name: the execution (nominal EP and d_ff of the matrix), the ranks
    that ran it, the iterations per window and the attempt."""

    execution_id: str
    workload_id: str
    kind: str
    profile: str
    precision: str
    implementation: str
    pipeline: str
    ep: int
    ranks: int
    d_ff: int
    iterations: int
    attempt: int

    @classmethod
    def of(cls, execution: Execution, ranks: int, iterations: int, attempt: int) -> Identity:
        """The identity of ``attempt`` of ``execution`` on ``ranks`` ranks (fields in column order)."""
        w, v = execution.workload, execution.variant
        return cls(
            execution.execution_id, execution.workload_id, w.kind, w.profile, v.precision,
            v.implementation, v.pipeline, w.ep, ranks, w.d_ff, iterations, attempt,
        )  # fmt: skip


@dataclass(frozen=True)
class ShardIdentity(Identity):
    """An :class:`Identity` as read back: every rank recorded the same job and device."""

    job_id: str
    device: str


@dataclass(frozen=True)
class RankWindows:
    """One rank's window times per phase (``{"forward": [ms, ...], ...}``) and where it ran."""

    rank: int
    job_id: str
    device: str
    times: dict[str, list[float]]


# Columns that hold one value in every row of a shard.
IDENTITY_COLUMNS = tuple(f.name for f in fields(ShardIdentity))


def table(identity: Identity, ranks: list[RankWindows]) -> pa.Table:
    """The shard's rows: one per rank x phase x window."""
    ident = asdict(identity)
    rows = [
        {**ident, "rank": r.rank, "window": i, "phase": phase, "window_ms": ms, "job_id": r.job_id,
         "device": r.device}
        for r in ranks
        for phase, windows in r.times.items()
        for i, ms in enumerate(windows)
    ]  # fmt: skip
    return pa.Table.from_pylist(rows, schema=SCHEMA)
