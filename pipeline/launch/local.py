"""The local backend: each group of executions is one submitit job on this machine, one process per
rank (:mod:`pipeline.launch.groups`; ``group=none``: a job per execution).

Jobs run one after another: they share this machine, and concurrent executions would disturb each
other's timing. A job is identified by its pid and checked against its log folder, so that a
reused pid is never mistaken for the job.

The submitting process answers for its jobs: they start with SIGINT and SIGTERM held
(:func:`pipeline.base.exits.held`), so a Ctrl-C to the terminal's process group or a ``kill`` of the
sweep reaches the sweep alone, which then kills the running job's controller and ranks (every
process whose command line names the job's folder), records the attempt as interrupted and
ends; nothing goes on without it. A job whose controller dies (``kill -9`` of the id status prints)
takes its ranks with it (:mod:`pipeline.bench.tether`), and the sweep reads how its members ended
only once none of its processes is left, so the next job never runs beside a rank of the last.

Before each job goes out, the sweep looks again at what it claimed: a member another writer took
over meanwhile (this sweep was silent long enough to look gone: a stalled file system, a suspended
shell) is left to it. Only this host sees a local job's processes: another host asks the heartbeat
that rank 0 of each job keeps (:mod:`pipeline.data.claims`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import submitit

from pipeline.base.devices import gpus_here, resolve_device_on
from pipeline.base.exits import Interrupted, held
from pipeline.bench.spec import JobSpec, Summary
from pipeline.data import claims, ledger
from pipeline.launch.follow import follow
from pipeline.launch.groups import Group, groups, job_folder
from pipeline.launch.jobs import COMPLETED, RUNNING, Job, JobState, Outcome, submitted
from pipeline.launch.settings import LaunchSettings


def run_members(specs: list[JobSpec]) -> list[Summary | None]:
    """What each task of a local job runs (:func:`pipeline.bench.group.run_group`), submitted by
    reference from here: the job imports torch, the sweep that submits it never does."""
    from pipeline.bench.group import run_group

    return run_group(specs)


class LocalBackend:
    name = "local"

    def run(
        self, planned: list[JobSpec], settings: LaunchSettings, started: Callable[[JobSpec], None]
    ) -> Iterator[Outcome]:
        """One job per group (:mod:`pipeline.launch.groups`), one group after another; the outcomes
        of its members as each ends."""
        for whole in groups(planned, settings):
            left = [(p, taken) for p in whole.members if (taken := _taken_over(p)) is not None]
            for p, taken in left:
                yield Outcome(p, None, None, taken=taken)
            if len(left) == len(whole.members):
                continue
            gone = {id(q) for q, _ in left}
            group = replace(whole, members=tuple(p for p in whole.members if id(p) not in gone))
            first = group.members[0]
            gpus = resolve_device_on(first.device, gpus_here()) == "cuda"  # the plan checked it is here
            job = None
            try:
                with held():  # the job and its records, whole; its processes never see the signals
                    folder = job_folder(group)
                    executor = _executor(settings, folder, group, gpus)
                    job = executor.submit(run_members, list(group.members))
                    for p in group.members:
                        ledger.append(p.dataset, submitted(p, job.job_id, settings))
                yield from follow([(group, job)], started, settle=_settle)
            except Interrupted as stop:
                if job is not None:
                    with held(drop=True):
                        stop.detail = _stop(group, job, stop)
                raise

    def job_states(self, jobs: list[Job]) -> dict[str, JobState]:
        return {job.job_id: _state(job) for job in jobs}

    def for_resubmission(self, settings: LaunchSettings) -> LaunchSettings:
        return settings


def _taken_over(p: JobSpec) -> str | None:
    """Why another writer has ``p``'s execution now, where it took over what this sweep claimed."""
    if p.owner is None:
        return None
    claim = claims.newest(p.dataset, p.execution_id)
    if claim is None or claim.attempt <= p.attempt or claim.owner.sweep == p.owner:
        return None
    return (
        f"taken over as attempt {claim.attempt} by {claim.owner.describe()} while this sweep was silent; "
        "left to it"
    )


def _settle(group: Group, job: submitit.Job, patience_s: float = 2.0) -> str | None:
    """Return once no process of ``job`` is left: its ranks end on their own within a moment of their
    controller (:mod:`pipeline.bench.tether`); any still there after ``patience_s`` is killed, so that
    none writes after its members' verdicts are read and none runs beside the next job. Says how the
    job died where its controller was killed by a signal."""
    folder = group.members[0].log_dir  # the job's folder, or a link to it
    deadline = time.monotonic() + patience_s
    while _job_processes(folder) and time.monotonic() < deadline:
        time.sleep(0.05)
    _kill(folder, int(job.job_id))
    code = None if job._process is None else job._process.returncode
    if code is not None and code < 0:
        return f"job {job.job_id}'s controller was killed by {signal.Signals(-code).name}"
    return None


def _executor(settings: LaunchSettings, folder: Path, group: Group, gpus: bool) -> submitit.Executor:
    executor = submitit.LocalExecutor(folder=folder)
    executor.update_parameters(
        nodes=group.nodes,
        tasks_per_node=group.per_node,
        gpus_per_node=group.per_node if gpus else 0,
        timeout_min=settings.timeout_min,
    )
    return executor


def _stop(group: Group, job: submitit.Job, stop: Interrupted) -> str:
    """Kill the job's controller and ranks, record its running member as interrupted (unless it
    ended first; the members that never started stay missing), and say so."""
    _kill(group.members[0].log_dir, int(job.job_id))
    if job._process is not None:  # submitit's handle of the controller: reap it
        job._process.wait()
    records = ledger.read(group.dataset)
    begun = {(r.execution_id, r.attempt) for r in records if isinstance(r, ledger.Started)}
    running = [
        p
        for p in group.members
        if (p.execution_id, p.attempt) in begun and not ledger.ended(records, p.execution_id, p.attempt)
    ]
    if not running:
        return f"job {job.job_id} had no execution running"
    p = running[0]
    ledger.append(p.dataset, ledger.Interrupted(p.execution_id, p.attempt, str(job.job_id), signal=stop.name))
    return f"stopped {p.execution_id} attempt {p.attempt} (recorded as interrupted)"


def _kill(folder: Path, controller: int, patience_s: float = 10.0) -> None:
    """SIGKILL the controller, then every process of the job (whose command line names ``folder``)
    until none is left: ranks started between two looks are caught by the next."""
    with contextlib.suppress(ProcessLookupError):
        if controller in _job_processes(folder):
            os.kill(controller, signal.SIGKILL)
    deadline = time.monotonic() + patience_s
    while (left := _job_processes(folder)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _job_processes(folder: Path) -> list[int]:
    """The live processes of the job whose folder is ``folder`` (or a link to it): its controller and
    its ranks."""
    return [
        int(e.name) for e in Path("/proc").iterdir() if e.name.isdigit() and _runs_job(int(e.name), folder)
    ]


def _state(job: Job) -> JobState:
    """Running while its process lives, else ended: how each member ended is its own ledger records'
    to say (never submitit's result pickle: reading a dataset must not run what it holds). A job of
    another host runs while its heartbeat is fresh: this host cannot see its process."""
    if job.host is not None and job.host != socket.gethostname():
        live = job.beat is not None and claims.job_alive(*job.beat, job.job_id)
        return JobState(RUNNING if live else COMPLETED)
    return JobState(RUNNING if _runs_job(int(job.job_id), job.log_dir) else COMPLETED)


def _runs_job(pid: int, folder: Path) -> bool:
    """True while process ``pid`` is alive (not a zombie) and is submitit's process of the job whose
    folder is ``folder`` (a reused pid is not the job)."""
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    zombie = "\nState:\tZ" in status
    named = {str(folder), os.path.realpath(folder)}  # a member's folder may link to its group's
    return not zombie and bool(named & set(arguments)) and any("submitit" in a for a in arguments)
