"""One side of a comparison: a dataset folder's published rows, with the window samples behind each time.

The shards are read by the report's scan (newest complete attempt per execution) and reduced by the
report's rows, so a comparison sees exactly the numbers ``pipeline.aggregate`` publishes. Each time
comes with the per-iteration window times of the rank that set it (the slowest rank, chosen in this
dataset from the per-rank medians); the other dataset may have found a different rank slowest.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.data.dataset import Dataset
from pipeline.data.scan import Skipped, scan_shards
from pipeline.metrics import slowest_rank_samples
from pipeline.report import executions
from pipeline.report.provenance import describe

# Published time columns and the shard phase each reduces.
METRICS = {"iterationMS": "combined", "forwardMS": "forward", "backwardMS": "backward"}


@dataclass(frozen=True)
class Side:
    """The executions of one dataset that have a published row."""

    path: Path
    rows: dict[str, dict[str, Any]]  # execution_id -> published row
    samples: dict[str, dict[str, np.ndarray]]  # execution_id -> metric -> slowest rank's ms per iteration
    described: dict[str, dict[str, int]]  # provenance field -> value -> executions
    skipped: list[Skipped]


def load(path: Path, workers: int = 8) -> Side:
    """Read a dataset folder; a folder without one usable shard is not a dataset (``ValueError``)."""
    path = Path(path)
    folder = Dataset.existing(path)
    scan = scan_shards(folder, workers=workers)
    skipped = list(scan.skipped)
    rows: dict[str, dict[str, Any]] = {}
    samples: dict[str, dict[str, np.ndarray]] = {}
    for execution_id in sorted(scan.newest):
        shard = scan.newest[execution_id]
        try:
            rows[execution_id] = executions.execution_row(shard)
        except ValueError as exc:
            skipped.append(Skipped(folder.relative(shard.path), f"metrics cannot be computed ({exc})"))
            continue
        samples[execution_id] = {
            metric: slowest_rank_samples(
                shard.rank[shard.phase == phase],
                shard.window_ms[shard.phase == phase],
                shard.iterations[shard.phase == phase],
            )
            for metric, phase in METRICS.items()
            if rows[execution_id][metric] is not None
        }
    if not rows:
        found = f"{len(skipped)} unusable shard file(s)" if skipped else "no shards/execution=*/*.parquet"
        raise ValueError(f"not a dataset: {str(path)!r} has no usable shard ({found})")
    described = describe(scan.newest[i] for i in rows)
    return Side(path, rows, samples, described, sorted(skipped, key=lambda s: s.path))
