"""Find and read a dataset's shards; keep the newest complete attempt of each execution.

Unusable files are never fatal and never silent: each one is kept with its reason, by path relative to
the dataset, so the published metadata does not depend on where the dataset lives.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pipeline.data.reader import Shard, ShardError, read_shard


@dataclass(frozen=True)
class Skipped:
    """A shard file that was not used, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class ShardScan:
    """Outcome of reading a dataset: the winning attempt per execution, every readable and skipped file."""

    newest: dict[str, Shard]  # execution_id -> newest complete attempt
    read: list[str]  # every valid shard, relative to the dataset, sorted
    skipped: list[Skipped]  # sorted by path


def shard_files(dataset: Path) -> list[Path]:
    """Every ``shards/execution=*/*.parquet`` file of the dataset, sorted."""
    return sorted((Path(dataset) / "shards").glob("execution=*/*.parquet"))


def scan_shards(dataset: Path, workers: int = 8) -> ShardScan:
    """Read every shard file in a thread pool (pyarrow decodes without the GIL) and pick winners."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    dataset = Path(dataset)
    files = shard_files(dataset)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        outcomes = list(pool.map(_read, files))
    newest: dict[str, Shard] = {}
    read: list[str] = []
    skipped: list[Skipped] = []
    for path, outcome in zip(files, outcomes, strict=True):
        relative = path.relative_to(dataset).as_posix()
        if isinstance(outcome, ShardError):
            skipped.append(Skipped(relative, outcome.reason))
            continue
        read.append(relative)
        best = newest.get(outcome.execution_id)
        if best is None or outcome.attempt > best.attempt:
            newest[outcome.execution_id] = outcome
    return ShardScan(newest=newest, read=read, skipped=skipped)


def _read(path: Path) -> Shard | ShardError:
    try:
        return read_shard(path)
    except ShardError as exc:
        return exc
