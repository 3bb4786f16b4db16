"""Run a planned sweep on its backend and report progress an operator can follow.

A sweep first claims the attempts it will write (:func:`claimed`): one writer per execution, so a
resubmission or a second sweep never runs what a live sweep or job still has. Before anything is
submitted, the sweep's intent goes into each of its datasets' ledgers (one record: every execution it
means), so an interrupted sweep loses none of them: ``pipeline.status`` reports
those that never went out as missing and ``pipeline.resubmit`` brings them. A line when each execution
starts and when it ends (in the order they end, on any backend), each with the counts, the elapsed
time and an estimate of the time left; a failure's line carries its error and its log. The lines are
plain (Slurm logs, pipes); on a terminal a status line below them is redrawn in place between events.
A summary closes the sweep; an interrupt (SIGINT, SIGTERM) closes it with one line saying what was
stopped and what is left. Which backend runs it is the settings' ``backend``
(:mod:`pipeline.launch.backends`).
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import TextIO

from pipeline.base.exits import Interrupted
from pipeline.base.printable import printable
from pipeline.bench.spec import JobSpec
from pipeline.data import claims, ledger
from pipeline.data.comparable import Comparable
from pipeline.data.dataset import Dataset
from pipeline.data.scan import scan_shards
from pipeline.launch.backends import backend
from pipeline.launch.jobs import PENDING, RUNNING, Job, Outcome
from pipeline.launch.settings import LaunchSettings


class ExecutionFailed(RuntimeError):
    """An execution of the sweep failed (its line and the summary have said which and why)."""


def clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class Progress:
    """Counts of a sweep's executions and the lines that report them: done, failed and missing (never
    started: its job ended first) as ``pipeline.status`` counts them, and those left to another writer
    that took them over."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total, self.stream = total, stream or sys.stdout
        self.live = self.stream.isatty()
        self.t0 = time.monotonic()
        self.running: set[str] = set()
        self.done = self.failed = self.missing = self.taken = 0

    def counts(self) -> str:
        """``3 done, 1 failed, 1 missing`` (missing and taken over only where there are any)."""
        extra = [f"{self.missing} missing"] if self.missing else []
        extra += [f"{self.taken} left to other writers"] if self.taken else []
        return ", ".join([f"{self.done} done", f"{self.failed} failed", *extra])

    def tally(self) -> str:
        elapsed = time.monotonic() - self.t0
        ended = self.done + self.failed + self.missing + self.taken
        eta = clock(elapsed / ended * (self.total - ended)) if ended else "?"
        return (
            f"[{ended}/{self.total} ended: {self.counts()}, "
            f"{len(self.running)} running; {clock(elapsed)} elapsed, ETA {eta}]"
        )

    def started(self, p: JobSpec) -> None:
        self.running.add(p.execution.execution_id)
        self._line(f"start   {p.execution.execution_id}  attempt {p.attempt}")

    def ended(self, outcome: Outcome) -> None:
        p = outcome.planned
        self.running.discard(p.execution.execution_id)
        if outcome.error is not None:
            self.failed += 1
            self._line(printable(f"FAILED  {p.execution.execution_id}  {outcome.error}  log: {p.log_dir}"))
        elif outcome.missing is not None:
            self.missing += 1
            self._line(printable(f"MISSING {p.execution.execution_id}  {outcome.missing}"))
        elif outcome.taken is not None:
            self.taken += 1
            self._line(printable(f"left    {p.execution.execution_id}  {outcome.taken}"))
        elif outcome.summary is not None:
            self.done += 1
            ms = outcome.summary.iteration_ms.get("combined")
            time_ = "its job ended as it finished" if ms is None else f"{ms:.3f} ms/iteration"
            self._line(f"done    {p.execution.execution_id}  {time_}  {outcome.summary.shard}")

    def _line(self, text: str) -> None:
        if self.live:  # replace the status line, then draw it again below the new line
            self.stream.write(f"\r\033[K{text}  {self.tally()}\n{self.tally()}")
        else:
            self.stream.write(f"{text}  {self.tally()}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.live:
            self.stream.write("\r\033[K")
            self.stream.flush()


@dataclass(frozen=True)
class Claimed:
    """What a sweep may run: ``to_run`` (each with the attempt it claimed, in the plan's order),
    ``done`` (skipped by ``--resume``: a valid shard exists), ``owned`` (skipped: another live
    writer has it, and why) and ``unwritable`` (skipped: a folder it would be written in is not the
    dataset's to write, or its attempt numbers are used up; and why)."""

    to_run: list[JobSpec]
    done: list[JobSpec]
    owned: list[tuple[JobSpec, str]]
    refused: str = ""  # why the sweep may run nothing (another writer has what it means)
    unwritable: list[tuple[JobSpec, str]] = field(default_factory=list)

    def check(self) -> None:
        """Raise the refusal, if any, as the ValueError that ends a command in one line."""
        if self.refused:
            raise ValueError(self.refused)

    def skips(self, prefix: str) -> list[str]:
        """One line per execution skipped: done already, another writer's, or not the dataset's to
        write (printable: owners' names and paths come from the dataset)."""
        lines = [f"{prefix}: {p.execution_id} is done already: skipped" for p in self.done]
        lines += [f"{prefix}: {p.execution_id} is {why}: skipped" for p, why in self.owned]
        lines += [f"{prefix}: {p.execution_id} is not written ({why}): skipped" for p, why in self.unwritable]
        return [printable(line) for line in lines]


CLAIM_TRIES = 100  # attempts a sweep tries to claim for one execution, each lost to a writer racing it


@contextlib.contextmanager
def claimed(planned: list[JobSpec], resume: bool = False) -> Iterator[Claimed]:
    """This process's claim of an attempt of each planned execution (:mod:`pipeline.data.claims`),
    held, with a heartbeat in each dataset, until the context closes (the sweep's end). Claims are
    taken in one order (datasets, then execution ids), so that racing sweeps meet on the same
    execution first. An execution another live writer has (a sweep's claim, or a job still pending
    or running), or one whose folders are not the dataset's to write in (a link out, a file in a
    folder's place: :meth:`Dataset.check_folder`), is skipped with ``resume`` (``--resume``,
    resubmission), which also skips those done already; without it the sweep runs nothing: its claims
    are given back and ``refused`` names why (:meth:`Claimed.check` raises it). A folder every writer
    of a dataset shares that is not the dataset's (``ledger``, ``claims/.owners``, ...) refuses the
    whole sweep before anything is written (ValueError)."""
    owner = claims.Owner.this_process()
    datasets = list(dict.fromkeys(p.dataset for p in planned))
    check_shared(datasets)
    with contextlib.ExitStack() as beating:
        for dataset in datasets:
            beating.enter_context(claims.Heartbeat(dataset, owner.sweep))
        remaining, done = resumed(planned) if resume else (planned, [])
        jobs = _live_jobs(remaining)
        taken: dict[int, JobSpec] = {}
        owned: list[tuple[JobSpec, str]] = []
        unwritable: list[tuple[JobSpec, str]] = []
        refusal = ""
        for p in sorted(remaining, key=lambda p: (str(p.dataset.root), p.execution_id)):
            if refusal and not resume:
                break  # refusing: claim no more
            try:
                check_folders(p)
                attempt = _claim(p, jobs, owner)
            except ValueError as err:  # not the dataset's to write, or its attempt numbers used up
                unwritable.append((p, str(err)))
                refusal = refusal or f"nothing was launched; {err}"
                continue
            if isinstance(attempt, str):
                owned.append((p, attempt))
                refusal = refusal or (
                    f"nothing was launched; {p.execution_id} in {p.dataset.root} is {attempt}: "
                    "wait for it, or add --resume to run only what no other writer has"
                )
            else:
                taken[id(p)] = replace(p, attempt=attempt, owner=owner.sweep)
        if refusal and not resume:
            for q in taken.values():
                claims.release(q.dataset, claims.Claim(q.execution_id, q.attempt, owner))
            yield Claimed([], done, owned, refusal, unwritable)
            return
        yield Claimed([taken[id(p)] for p in remaining if id(p) in taken], done, owned, "", unwritable)


def resumed(planned: list[JobSpec]) -> tuple[list[JobSpec], list[JobSpec]]:
    """(to run, done already) of ``planned``: done is an execution with a valid shard in its dataset,
    of the dataset's settings, which the plan made sure the sweep has (what ``--resume`` skips)."""
    done = {d: set(scan_shards(d).newest) for d in dict.fromkeys(p.dataset for p in planned)}
    return (
        [p for p in planned if p.execution_id not in done[p.dataset]],
        [p for p in planned if p.execution_id in done[p.dataset]],
    )


def check_shared(datasets: list[Dataset]) -> None:
    """Refuse (ValueError) a dataset whose folders every writer shares (``ledger``,
    ``claims/.owners``, ...) are not its own to write in: a link out, a file in a folder's place."""
    for dataset in datasets:
        for folder in dataset.shared_folders():
            dataset.check_folder(folder)


def check_folders(p: JobSpec) -> None:
    """Refuse (ValueError) an execution whose folders (its shards, claims, logs) are not the
    dataset's to write in."""
    for folder in p.dataset.execution_folders(p.execution_id):
        p.dataset.check_folder(folder)


def other_writers(planned: list[JobSpec]) -> dict[int, str]:
    """id of each planned spec -> why another writer has its execution now (a live sweep's claim, a
    job still pending or running; ``""``: none): what :func:`claimed` would skip, asked without
    claiming (a dry run)."""
    jobs = _live_jobs(planned)
    return {id(p): _writer(p, jobs) for p in planned}


def _claim(p: JobSpec, jobs: dict[tuple[Dataset, str], str], owner: claims.Owner) -> int | str:
    """The attempt of ``p``'s execution that ``owner`` claimed, or why another writer has it."""
    for _ in range(CLAIM_TRIES):
        if why := _writer(p, jobs):
            return why
        attempt = ledger.next_attempt(p.dataset, p.execution_id)
        if claims.take(p.dataset, p.execution_id, attempt, owner):
            return attempt
        # another writer took it between the look and the claim: look again
    return f"claimed by other writers {CLAIM_TRIES} times in a row"


def _live_jobs(planned: list[JobSpec]) -> dict[tuple[Dataset, str], str]:
    """(dataset, execution id) -> why its newest submitted attempt is still being written: a job that
    its backend says is pending or running (one question per backend and dataset)."""
    found: dict[tuple[Dataset, str], str] = {}
    for dataset in dict.fromkeys(p.dataset for p in planned):
        records = ledger.read(dataset)
        said = {(r.execution_id, r.attempt) for r in records if isinstance(r, ledger.TERMINAL)}
        newest = ledger.newest_submissions(records)
        mine = {p.execution_id for p in planned if p.dataset == dataset}
        open_jobs = {
            e: Job.of(dataset, r) for e, r in newest.items() if e in mine and (e, r.attempt) not in said
        }
        for name in sorted({j.backend for j in open_jobs.values()}):
            states = backend(name).job_states([j for j in open_jobs.values() if j.backend == name])
            for e, job in open_jobs.items():
                state = states.get(job.job_id) if job.backend == name else None
                if state is not None and state.state in (PENDING, RUNNING):
                    found[dataset, e] = f"{state.state} in job {job.job_id} (attempt {newest[e].attempt})"
    return found


def _writer(p: JobSpec, jobs: dict[tuple[Dataset, str], str]) -> str:
    """Why another writer has ``p``'s execution now (``""``: none has)."""
    claim = claims.newest(p.dataset, p.execution_id)
    if claim is not None and claims.alive(p.dataset, claim.owner):
        if not ledger.ended(ledger.read(p.dataset), p.execution_id, claim.attempt):
            return f"claimed as attempt {claim.attempt} by {claim.owner.describe()}"
    return jobs.get((p.dataset, p.execution_id), "")


def intents(planned: list[JobSpec], settings: LaunchSettings) -> dict[Dataset, ledger.Intended]:
    """The intent of a sweep in each of its datasets: every execution it means there, with its
    overrides, the launch settings and the comparable settings (one per dataset: the plan checked)."""
    by_dataset: dict[Dataset, list[JobSpec]] = {}
    for p in planned:
        by_dataset.setdefault(p.dataset, []).append(p)
    return {
        dataset: ledger.Intended(
            executions=tuple(ledger.Intention(p.execution_id, tuple(p.overrides)) for p in mine),
            settings=settings.to_json(),
            comparable=Comparable.of_config(mine[0].config),
        )
        for dataset, mine in by_dataset.items()
    }


def run(planned: list[JobSpec], settings: LaunchSettings) -> list[Outcome]:
    """Record the sweep's intent, submit the executions (with the attempts :func:`claimed` took),
    wait for each (unless the settings do not wait), print progress; the outcomes in the order the
    executions ended."""
    if not planned:
        print("nothing to run", flush=True)
        return []
    for dataset, intent in intents(planned, settings).items():
        ledger.append(dataset, intent)
    progress = Progress(len(planned))
    outcomes: list[Outcome] = []
    try:
        for outcome in backend(settings.backend).run(planned, settings, progress.started):
            outcomes.append(outcome)
            if outcome.ended:
                progress.ended(outcome)
    except Interrupted as stop:
        left = left_over(planned, settings)
        stop.detail = "; ".join(part for part in (stop.detail, left) if part)
        raise
    finally:
        progress.close()
    if all(o.ended for o in outcomes):
        print(f"{len(outcomes)} executions: {progress.counts()}", flush=True)
    return outcomes


def left_over(planned: list[JobSpec], settings: LaunchSettings) -> str:
    """What an interrupted sweep leaves, as its ledgers record it (an execution that ended while the
    signal came counts as ended): how many ended and how many never started, and the command that
    brings the rest (the jobs of a scheduler go on without the sweep)."""
    records = {d: ledger.attempt_records(ledger.read(d)) for d in {p.dataset for p in planned}}
    kinds: dict[tuple[Dataset, str, int], set[type]] = {
        (p.dataset, p.execution_id, p.attempt): set() for p in planned
    }
    for d, said in records.items():
        for r in said:
            key = (d, r.execution_id, r.attempt)
            if key in kinds:
                kinds[key].add(type(r))
    done = sum(ledger.Finished in k for k in kinds.values())
    failed = sum(ledger.Failed in k for k in kinds.values())
    datasets = " ".join(dict.fromkeys(str(p.dataset.root) for p in planned))
    if not settings.on_this_host:
        return f"{done} done, {failed} failed; the other jobs go on: python -m pipeline.status {datasets}"
    not_started = sum(ledger.Started not in k for k in kinds.values())
    return (
        f"{done} done, {failed} failed, {not_started} not started; "
        f"python -m pipeline.resubmit {datasets} runs the failed and missing ones"
    )
