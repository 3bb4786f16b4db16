"""Atomic shard writer: a shard exists under its final name complete or not at all.

The table goes through :func:`pipeline.data.atomic.atomic_write` (a temporary sibling, fsync, rename),
so a crash at any point leaves no ``attempt-<n>.parquet``: readers never see half a shard, and an
existing attempt is never replaced.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from pipeline.data.atomic import atomic_write
from pipeline.data.dataset import Dataset
from pipeline.data.meta import ExecutionMeta
from pipeline.data.schema import METADATA_KEY, Identity, RankWindows, table


def write_shard(dataset: Dataset, identity: Identity, ranks: list[RankWindows], meta: ExecutionMeta) -> Path:
    """Write one execution attempt's rows (``ranks``' windows) and metadata; return the final path.

    Refuses to overwrite an existing attempt: attempts are numbered so that no data is ever lost; and
    to write through a link out of the dataset or where a file stands in a folder's place.
    """
    for key in ("execution_id", "workload_id", "attempt"):
        if getattr(identity, key) != getattr(meta, key):
            raise ValueError(f"rows say {key}={getattr(identity, key)!r}, metadata {getattr(meta, key)!r}")
    rows = table(identity, ranks)
    if not rows.num_rows:
        raise ValueError(
            f"no rows to write for execution {identity.execution_id!r} attempt {identity.attempt}"
        )
    text = json.dumps(meta.to_json(), sort_keys=True).encode()
    rows = rows.replace_schema_metadata({METADATA_KEY: text})
    final = dataset.shard_path(identity.execution_id, identity.attempt)
    dataset.check_folder(final.parent)
    return atomic_write(final, lambda f: pq.write_table(rows, f), exclusive=True)
