"""The debug backend: each execution run in the sweep's own process, by submitit's
``DebugExecutor``, so that a debugger and a profiler see the execution whole
(``hydra.launcher.backend=debug``, with the local launcher; docs/operations.md).

One rank only (``max_ranks=1``: the plan refuses more) and one execution to a job, one after
another. No deadline ends it: a person may stand at a breakpoint for as long as they like. An
execution that fails is recorded in the ledger as on any backend, then its error is raised where it
happened, so submitit's debug job opens ``pdb``'s post-mortem at that frame (when stdin is a
terminal; at end of input it goes on), and the sweep goes on as after any failure. What the job
prints goes to the console; submitit keeps only its own log lines in the attempt's folder.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import submitit

from pipeline.bench.spec import JobSpec
from pipeline.data import ledger
from pipeline.launch.follow import follow
from pipeline.launch.groups import Group
from pipeline.launch.jobs import COMPLETED, Job, JobState, Outcome, submitted
from pipeline.launch.settings import MAX_TIMEOUT_MIN, LaunchSettings

NO_DEADLINE_S = MAX_TIMEOUT_MIN * 60.0  # the longest a setting allows: 30 days


@dataclass(frozen=True)
class Ran:
    """A debug job once it has run: done, with the error it ended in (None: none), which
    ``results`` raises as submitit's jobs do."""

    job_id: str
    error: Exception | None

    def done(self) -> bool:
        return True

    def results(self) -> list[object]:
        if self.error is not None:
            raise self.error
        return []


class DebugBackend:
    name = "debug"

    def run(
        self, planned: list[JobSpec], settings: LaunchSettings, started: Callable[[JobSpec], None]
    ) -> Iterator[Outcome]:
        """Each execution a job in this process, one after another; its outcome as it ends."""
        from pipeline.bench.group import run_group

        for p in planned:
            p = replace(p, deadline_s=NO_DEADLINE_S)
            p.dataset.check_folder(p.log_dir)
            job = submitit.DebugExecutor(folder=p.log_dir).submit(run_group, [p], debug=True)
            ledger.append(p.dataset, submitted(p, job.job_id, settings))
            error = None
            try:
                job.results()  # runs it here, now; on an error, the post-mortem first
            except Exception as err:  # recorded in the ledger; a job that died first says so here
                error = err
            yield from follow([(Group((p,), 1, 1), Ran(job.job_id, error))], started)

    def job_states(self, jobs: list[Job]) -> dict[str, JobState]:
        """Ended: a debug job runs inside its sweep, whose claim keeps its execution pending while
        the sweep lives; how it ended is its ledger records' to say."""
        return {job.job_id: JobState(COMPLETED) for job in jobs}

    def for_resubmission(self, settings: LaunchSettings) -> LaunchSettings:
        return settings
