"""Run a planned sweep on its backend and report progress an operator can follow.

Before anything is submitted, the sweep's intent goes into each of its datasets' ledgers (one record:
every execution it means), so an interrupted sweep loses none of them: ``pipeline.status`` reports
those that never went out as missing and ``pipeline.resubmit`` brings them. A line when each execution
starts and when it ends (in the order they end, on any backend), each with the counts, the elapsed
time and an estimate of the time left; a failure's line carries its error and its log. The lines are
plain (Slurm logs, pipes); on a terminal a status line below them is redrawn in place between events.
A summary closes the sweep; an interrupt (SIGINT, SIGTERM) closes it with one line saying what was
stopped and what is left. Which backend runs it is the settings' ``backend``
(:mod:`pipeline.launch.backends`).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from pipeline.bench.spec import JobSpec
from pipeline.data import ledger
from pipeline.exits import Interrupted
from pipeline.launch.backends import backend
from pipeline.launch.plan import Outcome, intents
from pipeline.launch.settings import LaunchSettings


class ExecutionFailed(RuntimeError):
    """An execution of the sweep failed (its line and the summary have said which and why)."""


def clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class Progress:
    """Counts of a sweep's executions and the lines that report them."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total, self.stream = total, stream or sys.stdout
        self.live = self.stream.isatty()
        self.t0 = time.monotonic()
        self.running: set[str] = set()
        self.done = self.failed = 0

    def tally(self) -> str:
        elapsed = time.monotonic() - self.t0
        ended = self.done + self.failed
        eta = clock(elapsed / ended * (self.total - ended)) if ended else "?"
        return (
            f"[{ended}/{self.total} ended: {self.done} done, {self.failed} failed, "
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
            self._line(f"FAILED  {p.execution.execution_id}  {outcome.error}  log: {p.log_dir}")
        elif outcome.summary is not None:
            self.done += 1
            ms = outcome.summary.iteration_ms["combined"]
            self._line(f"done    {p.execution.execution_id}  {ms:.3f} ms/iteration  {outcome.summary.shard}")

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


def run(planned: list[JobSpec], settings: LaunchSettings) -> list[Outcome]:
    """Record the sweep's intent, submit the executions, wait for each (unless the settings do not
    wait), print progress; the outcomes in the order the executions ended."""
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
        left = left_over(planned, outcomes, len(progress.running), settings)
        stop.detail = "; ".join(part for part in (stop.detail, left) if part)
        raise
    finally:
        progress.close()
    if all(o.ended for o in outcomes):
        failed = sum(o.error is not None for o in outcomes)
        print(f"{len(outcomes)} executions: {len(outcomes) - failed} done, {failed} failed", flush=True)
    return outcomes


def left_over(planned: list[JobSpec], outcomes: list[Outcome], running: int, settings: LaunchSettings) -> str:
    """What an interrupted sweep leaves: how many ended and how many never started, and the command
    that brings the rest (the jobs of a scheduler go on without the sweep)."""
    ended = [o for o in outcomes if o.ended]
    done = sum(o.error is None for o in ended)
    datasets = " ".join(dict.fromkeys(str(p.dataset.root) for p in planned))
    if settings.backend != "local":
        return (
            f"{done} done, {len(ended) - done} failed; the other jobs go on: "
            f"python -m pipeline.status {datasets}"
        )
    return (
        f"{done} done, {len(ended) - done} failed, {len(planned) - len(ended) - running} not started; "
        f"python -m pipeline.resubmit {datasets} runs the failed and missing ones"
    )
