"""Read a dataset's shards and keep the newest valid attempt of each execution: the one place that
decides which attempt of an execution counts (publication and status both ask here).

A dataset is untrusted input. Unusable files are never fatal and never silent: each one is kept with
its reason, by path relative to the dataset, so the published metadata does not depend on where the
dataset lives. Besides what the reader refuses (:mod:`pipeline.data.reader`: anything but a regular
file, never opened; a shard that contradicts its execution id; impossible window times), these are
unusable:

- a shard of an execution the dataset does not mean: none of its ledger's intents names it (nor was it
  launched before the first intent); a dataset without an intent, written before intents were
  recorded, means the matrix's executions;
- a link that leads outside the dataset (what a dataset names stays inside it);
- a shard whose comparable settings (:mod:`pipeline.data.comparable`) are not those the dataset's
  first intent fixed in its ledger: its times would pair with differently set ones. (A dataset without
  an intent has its differing settings flagged by the report.)

An unusable attempt never hides an older valid one: the newest valid attempt wins. Files are read on
daemon threads while the calling thread waits in short timed waits, so SIGINT and SIGTERM end a command
(:mod:`pipeline.base.exits`) at once even while a read is blocked (a stalled network file system).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pipeline.data import ledger
from pipeline.data.comparable import Comparable
from pipeline.data.dataset import Dataset, parse_attempt
from pipeline.data.reader import Shard, ShardError, read_shard
from pipeline.matrix import EXECUTION_BY_ID, REPORT, Suite

_T = TypeVar("_T")
_WAKE_S = 0.2  # how often the waiting thread wakes, so that a signal's handler runs promptly


@dataclass(frozen=True)
class Skipped:
    """A shard file that was not used, and why."""

    path: str
    reason: str


@dataclass(frozen=True)
class ShardScan:
    """Outcome of reading a dataset: the winning attempt per execution, every readable and skipped file."""

    newest: dict[str, Shard]  # execution_id -> newest valid attempt
    read: list[str]  # every valid shard, relative to the dataset, sorted
    skipped: list[Skipped]  # sorted by path
    suite: Suite = REPORT  # the dataset's (its first intent's; the report's before intents)

    def rejection(self, execution_id: str) -> Skipped | None:
        """The unusable file of the newest attempt of an execution, if any: why it has no valid shard."""
        mine = [s for s in self.skipped if Dataset.execution_of_shard(Path(s.path)) == execution_id]
        return max(mine, key=lambda s: parse_attempt(Path(s.path).name) or 0, default=None)


@dataclass(frozen=True)
class Meant:
    """The executions a dataset means, and why another is not among them (said when one is refused)."""

    execution_ids: frozenset[str]
    why_not: str

    @classmethod
    def of(cls, records: list[ledger.Record]) -> Meant:
        """Those its intents name, and those launched before its first intent (by sweeps that recorded
        none); without an intent, the matrix's."""
        intents = ledger.intents(records)
        if not intents:
            return cls(frozenset(EXECUTION_BY_ID), "not in the matrix (the dataset records no intent)")
        before = ledger.attempt_records(
            list(itertools.takewhile(lambda r: not isinstance(r, ledger.Intended), records))
        )
        named = {i.execution_id for intent in intents for i in intent.executions}
        return cls(frozenset(named | {r.execution_id for r in before}), "no intent in its ledger names it")

    def refusal(self, execution_id: str) -> str | None:
        """Why a shard of ``execution_id`` is not the dataset's, or None where it is."""
        if execution_id in self.execution_ids:
            return None
        return f"execution {execution_id!r} is not one of the dataset's: {self.why_not}"


def scan_shards(dataset: Dataset, workers: int = 8) -> ShardScan:
    """Read every shard file on ``workers`` threads (pyarrow decodes without the GIL) and pick winners."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    records = ledger.read(dataset)
    fixed = ledger.fixed_settings(records)
    suite = REPORT if fixed is None else fixed.suite
    newest: dict[str, Shard] = {}
    read: list[str] = []
    skipped: list[Skipped] = []
    for path, outcome in _examine_all(dataset, Meant.of(records), workers, suite):
        relative = dataset.relative(path)
        if isinstance(outcome, str):
            skipped.append(Skipped(relative, outcome))
            continue
        differ = None if fixed is None else Comparable.of_config(outcome.meta.config).differences(fixed)
        if differ:
            skipped.append(Skipped(relative, f"settings differ from the dataset's: {differ}"))
            continue
        read.append(relative)
        best = newest.get(outcome.execution_id)
        if best is None or outcome.attempt > best.attempt:
            newest[outcome.execution_id] = outcome
    return ShardScan(newest=newest, read=read, skipped=skipped, suite=suite)


def dataset_settings(dataset: Dataset, workers: int = 8) -> Comparable | None:
    """The dataset's comparable settings, which a new sweep into it must have: those its first intent
    fixed, else (a dataset written before intents) those of its earliest valid shard, else None."""
    records = ledger.read(dataset)
    fixed = ledger.fixed_settings(records)
    if fixed is not None:
        return fixed
    outcomes = _examine_all(dataset, Meant.of(records), workers, REPORT)
    shards = [o for _, o in outcomes if isinstance(o, Shard)]
    first = min(shards, key=lambda s: (s.meta.started_at, str(s.path)), default=None)
    return None if first is None else Comparable.of_config(first.meta.config)


def _examine_all(
    dataset: Dataset, meant: Meant, workers: int, suite: Suite
) -> list[tuple[Path, Shard | str]]:
    """Every shard file of the dataset, an execution of ``suite``, with its shard or the reason it is
    unusable, in path order."""
    files = dataset.shard_files()

    def examine(path: Path) -> Shard | str:
        refusal = meant.refusal(Dataset.execution_of_shard(path))
        if refusal is not None:
            return refusal
        if not dataset.inside(path):
            return "a link that leads outside the dataset: what a dataset names stays inside it"
        try:
            return read_shard(path, suite)
        except ShardError as exc:
            return exc.reason

    return list(zip(files, _on_daemon_threads(examine, files, workers), strict=True))


def _on_daemon_threads(work: Callable[[Path], _T], items: Sequence[Path], workers: int) -> list[_T]:
    """``work`` of every item on up to ``workers`` daemon threads, the results in order. The calling
    thread waits in timed waits, so a signal's handler runs on it (and its exception ends the command)
    even while a worker is stuck in a read that never returns; daemon threads, unlike a thread pool's,
    are not joined at exit, so such a worker keeps no process alive."""
    futures: list[Future[_T]] = [Future() for _ in items]
    jobs = iter(zip(items, futures, strict=True))
    lock = threading.Lock()

    def run() -> None:
        while True:
            with lock:
                job = next(jobs, None)
            if job is None:
                return
            item, future = job
            try:
                future.set_result(work(item))
            except BaseException as exc:  # handed to the waiting thread, which raises it
                future.set_exception(exc)

    for n in range(min(workers, len(items))):
        threading.Thread(target=run, name=f"shard-scan-{n}", daemon=True).start()
    for future in futures:
        while not wait([future], timeout=_WAKE_S).done:
            pass
    return [f.result() for f in futures]
