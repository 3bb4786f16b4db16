"""Atomic shard writer: a shard exists under its final name complete or not at all.

The table goes through :func:`pipeline.data.atomic.atomic_write` (a temporary sibling, fsync, rename),
so a crash at any point leaves no ``attempt-<n>.parquet``: readers never see half a shard, and an
existing attempt is never replaced.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.data.atomic import atomic_write
from pipeline.data.dataset import Dataset
from pipeline.data.schema import METADATA_KEY, SCHEMA, SCHEMA_VERSION


def write_shard(
    dataset: Dataset, execution_id: str, attempt: int, rows: list[dict[str, Any]], metadata: dict[str, Any]
) -> Path:
    """Write one execution attempt's rows and ``execution`` metadata; return the final path.

    Refuses to overwrite an existing attempt: attempts are numbered so that no data is ever lost.
    """
    if not rows:
        raise ValueError(f"no rows to write for execution {execution_id!r} attempt {attempt}")
    final = dataset.shard_path(execution_id, attempt)
    stray = {r["execution_id"] for r in rows} - {execution_id}
    if stray:
        raise ValueError(f"rows of other executions {sorted(stray)} in the shard of {execution_id!r}")
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    missing = [f.name for f in SCHEMA if not f.nullable and table.column(f.name).null_count]
    if missing:
        raise ValueError(f"rows lack values for required column(s) {missing}; schema: {SCHEMA.names}")
    meta = {**metadata, "schema_version": SCHEMA_VERSION, "execution_id": execution_id, "attempt": attempt}
    table = table.replace_schema_metadata({METADATA_KEY: json.dumps(meta, sort_keys=True).encode()})

    return atomic_write(final, lambda f: pq.write_table(table, f), exclusive=True)
