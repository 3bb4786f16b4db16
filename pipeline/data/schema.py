"""Shard schema: one parquet file per execution attempt, one row per rank x phase x window.

The file's key-value metadata ``execution`` holds JSON (resolved config, provenance, times,
diagnostics, saved-state evidence) and always carries ``schema_version``.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

SCHEMA_VERSION = 1
METADATA_KEY = b"execution"
PHASES = ("forward", "backward", "combined")

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


def shard_dir(dataset: Path, execution_id: str) -> Path:
    return Path(dataset) / "shards" / f"execution={execution_id}"


def shard_path(dataset: Path, execution_id: str, attempt: int) -> Path:
    """``<dataset>/shards/execution=<id>/attempt-<n>.parquet``."""
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    return shard_dir(dataset, execution_id) / f"attempt-{attempt}.parquet"
