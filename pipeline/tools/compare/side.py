"""One side of a comparison: a dataset folder's published rows, with the window times behind each time.

The shards are read by the report's scan (newest complete attempt per execution) and reduced by the
report's rows, so a comparison sees exactly the numbers ``pipeline.aggregate`` publishes. Each time
comes with the per-iteration window times of the rank that set it (the slowest rank, chosen in this
dataset from the per-rank medians), in the order the shard lists them, which is the order they were
timed; the other dataset may have found a different rank slowest. Each execution also comes with
how it was measured (:class:`~pipeline.tools.compare.conditions.Measured`) and what ran it (``Ran``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.base.metrics import phases
from pipeline.data.comparable import Comparable
from pipeline.data.dataset import Dataset
from pipeline.data.reader import Shard
from pipeline.data.scan import Skipped, scan_shards
from pipeline.report import executions
from pipeline.report.provenance import describe
from pipeline.tools.compare.conditions import Measured

# Published time columns and the shard phase each reduces.
METRICS = {"iterationMS": "combined", "forwardMS": "forward", "backwardMS": "backward"}


@dataclass(frozen=True)
class Ran:
    """What ran one execution of a dataset, and when: the code, the software, the machines."""

    started_at: str
    ended_at: str
    git_sha: str | None
    versions: dict[str, str | None]
    hosts: tuple[str, ...]
    schema_version: int

    @classmethod
    def of(cls, shard: Shard) -> Ran:
        meta = shard.meta
        return cls(
            meta.started_at,
            meta.ended_at,
            meta.provenance.git_sha,
            asdict(meta.provenance.versions),
            tuple(meta.provenance.hosts),
            meta.schema_version,
        )


@dataclass(frozen=True)
class Side:
    """The executions of one dataset that have a published row."""

    path: Path
    rows: dict[str, dict[str, Any]]  # execution_id -> published row
    windows: dict[str, dict[str, np.ndarray]]  # execution_id -> metric -> slowest rank's ms per iteration
    described: dict[str, dict[str, int]]  # provenance field -> value -> executions
    skipped: list[Skipped]
    conditions: dict[str, Measured] = field(default_factory=dict)  # execution_id -> how it was measured
    ran: dict[str, Ran] = field(default_factory=dict)  # execution_id -> what ran it, when
    comparable: dict[str, Comparable] = field(default_factory=dict)  # execution_id -> its settings


def load(path: Path, workers: int = 8) -> Side:
    """Read a dataset folder; a folder without one usable shard is not a dataset (``ValueError``)."""
    path = Path(path)
    folder = Dataset.existing(path)
    scan = scan_shards(folder, workers=workers)
    return side(path, folder, scan.newest, scan.skipped)


def side(path: Path, folder: Dataset, newest: Mapping[str, Shard], skipped: Iterable[Skipped]) -> Side:
    """The side of the shards that count (``newest``: execution id -> shard): their published rows
    and slowest-rank windows; a shard whose metrics cannot be computed is skipped with its reason."""
    skipped = list(skipped)
    rows: dict[str, dict[str, Any]] = {}
    windows: dict[str, dict[str, np.ndarray]] = {}
    for execution_id in sorted(newest):
        shard = newest[execution_id]
        try:
            reduced = phases(shard.phase, shard.rank, shard.window_ms, shard.iterations)
            rows[execution_id] = executions.execution_row(shard, reduced)
        except ValueError as exc:
            skipped.append(Skipped(folder.relative(shard.path), f"metrics cannot be computed ({exc})"))
            continue
        windows[execution_id] = {
            metric: reduced[phase].windows for metric, phase in METRICS.items() if phase in reduced
        }
    if not rows:
        found = f"{len(skipped)} unusable shard file(s)" if skipped else "no shards/execution=*/*.parquet"
        raise ValueError(f"not a dataset: {str(path)!r} has no usable shard ({found})")
    described = describe(newest[i] for i in rows)
    return Side(
        path,
        rows,
        windows,
        described,
        sorted(skipped, key=lambda s: s.path),
        {i: Measured.of(newest[i]) for i in rows},
        {i: Ran.of(newest[i]) for i in rows},
        {i: Comparable.of_config(newest[i].meta.config) for i in rows},
    )
