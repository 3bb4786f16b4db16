"""Read a dataset's shards and keep the newest complete attempt of each execution: the one place
that decides which attempt of an execution counts (publication and status both ask here).

Unusable files are never fatal and never silent: each one is kept with its reason, by path relative to
the dataset, so the published metadata does not depend on where the dataset lives. A shard whose
comparable settings (:mod:`pipeline.data.comparable`) are not those the dataset's first intent fixed
in its ledger is one of them: its times would pair with differently set ones. (A dataset without an
intent, written before intents were recorded, has its differing settings flagged by the report.)
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pipeline.data import ledger
from pipeline.data.comparable import Comparable
from pipeline.data.dataset import Dataset, parse_attempt
from pipeline.data.reader import Shard, ShardError, read_shard


@dataclass(frozen=True)
class Skipped:
    """A shard file that was not used, and why."""

    path: str
    reason: str

    @property
    def execution_id(self) -> str:
        return Dataset.execution_of_shard(Path(self.path))


@dataclass(frozen=True)
class ShardScan:
    """Outcome of reading a dataset: the winning attempt per execution, every readable and skipped file."""

    newest: dict[str, Shard]  # execution_id -> newest complete attempt
    read: list[str]  # every valid shard, relative to the dataset, sorted
    skipped: list[Skipped]  # sorted by path

    def rejection(self, execution_id: str) -> Skipped | None:
        """The unusable file of the newest attempt of an execution, if any: why it has no valid shard."""
        mine = [s for s in self.skipped if s.execution_id == execution_id]
        return max(mine, key=lambda s: parse_attempt(Path(s.path).name) or 0, default=None)


def scan_shards(dataset: Dataset, workers: int = 8) -> ShardScan:
    """Read every shard file in a thread pool (pyarrow decodes without the GIL) and pick winners."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    files = dataset.shard_files()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        outcomes = list(pool.map(_read, files))
    fixed = ledger.fixed_settings(ledger.read(dataset))
    newest: dict[str, Shard] = {}
    read: list[str] = []
    skipped: list[Skipped] = []
    for path, outcome in zip(files, outcomes, strict=True):
        relative = dataset.relative(path)
        if isinstance(outcome, ShardError):
            skipped.append(Skipped(relative, outcome.reason))
            continue
        differ = None if fixed is None else Comparable.of_config(outcome.meta.config).differences(fixed)
        if differ:
            skipped.append(Skipped(relative, f"settings differ from the dataset's: {differ}"))
            continue
        read.append(relative)
        best = newest.get(outcome.execution_id)
        if best is None or outcome.attempt > best.attempt:
            newest[outcome.execution_id] = outcome
    return ShardScan(newest=newest, read=read, skipped=skipped)


def dataset_settings(dataset: Dataset) -> Comparable | None:
    """The dataset's comparable settings, which a new sweep into it must have: those its first intent
    fixed, else (a dataset written before intents) those of its earliest valid shard, else None."""
    fixed = ledger.fixed_settings(ledger.read(dataset))
    if fixed is not None:
        return fixed
    shards = [o for o in map(_read, dataset.shard_files()) if isinstance(o, Shard)]
    first = min(shards, key=lambda s: (s.meta.started_at, str(s.path)), default=None)
    return None if first is None else Comparable.of_config(first.meta.config)


def _read(path: Path) -> Shard | ShardError:
    try:
        return read_shard(path)
    except ShardError as exc:
        return exc
