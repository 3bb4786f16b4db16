"""The Slurm backend: one job array per resource shape, one task per group of executions; a requeue
is a new attempt.

Executions that need the same nodes x tasks go out together as one submitit job array, so a sweep of
the whole matrix costs a handful of ``sbatch`` calls, and its tasks are groups
(:mod:`pipeline.launch.groups`), so it costs a handful of jobs, each running its executions one after
another in one allocation (``group=none``: a task per execution). An array's logs share one folder
under the dataset's ``logs/arrays/``; each attempt's ``logs/<execution_id>/attempt-<n>`` links to it.

Slurm's own requeue is off (``--no-requeue``): a node that dies fails the job, and
``pipeline.resubmit`` runs it again as a new attempt. Time limits and preemption signals go through
submitit's checkpointing instead: the job is requeued with the members that have no shard, each with
its next attempt number, recorded in the ledger like any submission, so a requeued execution never
writes a second shard for one attempt.

Where jobs stand: squeue for live and recently ended jobs, sacct for how they ended (exit codes),
asked once per call for all jobs so that status stays fast on large sweeps.
"""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import submitit
from submitit.helpers import DelayedSubmission

from pipeline.bench.spec import JobSpec, Summary
from pipeline.data import ledger
from pipeline.data.dataset import Dataset
from pipeline.launch.follow import follow
from pipeline.launch.groups import Group, groups
from pipeline.launch.jobs import COMPLETED, FAILED, PENDING, RUNNING, Job, JobState, Outcome, submitted
from pipeline.launch.settings import LaunchSettings, submitit_parameters

POLL_S = 2.0  # how often a waiting sweep looks at its jobs
_SLURM_PENDING = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
_SLURM_RUNNING = {"RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT", "RESIZING"}


class SlurmTask:
    """The callable each Slurm job runs: one group's executions, checkpointable by submitit."""

    def __init__(self, settings: LaunchSettings) -> None:
        self.settings = settings

    def __call__(self, specs: list[JobSpec]) -> list[Summary | None]:
        from pipeline.bench.distributed import resolve_device
        from pipeline.bench.group import run_group

        try:  # the device is resolved here, on the job's node, not on the submitting host
            resolve_device(specs[0].device)
        except ValueError as err:
            env = submitit.JobEnvironment()
            if env.global_rank == 0:
                reason = f"ValueError: {err} (node {env.hostnames[env.node]})"
                for spec in specs:
                    record = ledger.Failed(spec.execution_id, spec.attempt, env.job_id, reason=reason)
                    ledger.append(spec.dataset, record)
            raise
        return run_group(specs)

    def checkpoint(self, specs: list[JobSpec]) -> DelayedSubmission | None:
        """On a time-limit or preemption signal (rank 0): requeue this job with the members that have
        no shard yet, each as its next attempt; None (no requeue) when every member is done."""
        left = [s for s in specs if not s.dataset.shard_path(s.execution_id, s.attempt).exists()]
        if not left:
            return None
        job_id = submitit.JobEnvironment().job_id
        # Jobs are submitted non-requeueable (a dead node must fail them); this requeue is wanted.
        subprocess.run(["scontrol", "update", f"JobId={job_id}", "Requeue=1"], check=True, timeout=60)
        following = []
        for spec in left:
            attempt = ledger.next_attempt(spec.dataset, spec.execution_id)
            _end_running(
                spec, job_id, f"requeued by Slurm's signal (preemption or time limit) as attempt {attempt}"
            )
            spec.dataset.link_log_dir(spec.execution_id, attempt, spec.log_dir.resolve())
            record = submitted(spec, job_id, self.settings, attempt=attempt, requeued_from=spec.attempt)
            ledger.append(spec.dataset, record)
            following.append(replace(spec, attempt=attempt))
        return DelayedSubmission(self, following)


def _end_running(spec: JobSpec, job_id: str, reason: str) -> None:
    """Record the running attempt of ``spec`` as failed before the requeue: Slurm may kill the job's
    processes before the interrupted execution records its own end. An attempt that never started, or
    has ended, is left as it is."""
    records = ledger.read(spec.dataset)
    running = any(
        isinstance(r, ledger.Started) and (r.execution_id, r.attempt) == (spec.execution_id, spec.attempt)
        for r in records
    )
    if running and not ledger.ended(records, spec.execution_id, spec.attempt):
        ledger.append(spec.dataset, ledger.Failed(spec.execution_id, spec.attempt, job_id, reason=reason))


class SlurmBackend:
    name = "slurm"

    def run(
        self, planned: list[JobSpec], settings: LaunchSettings, started: Callable[[JobSpec], None]
    ) -> Iterator[Outcome]:
        """Submit everything as job arrays, then (unless ``wait`` is false) follow every job."""
        jobs = submit(planned, settings)
        if not settings.wait:
            datasets = " ".join(sorted({str(p.dataset.root) for p in planned}))
            print(
                f"submitted {len(planned)} executions in {len(jobs)} jobs; "
                f"follow: python -m pipeline.status {datasets}",
                flush=True,
            )
            return (Outcome(p, None, None) for group, _ in jobs for p in group.members)
        return follow(jobs, started, POLL_S)

    def job_states(self, jobs: list[Job]) -> dict[str, JobState]:
        return _states([j.job_id for j in jobs]) if jobs else {}

    def for_resubmission(self, settings: LaunchSettings) -> LaunchSettings:
        """A resubmission goes out and returns: follow it with ``pipeline.status``."""
        return replace(settings, wait=False)


def submit(planned: list[JobSpec], settings: LaunchSettings) -> list[tuple[Group, submitit.Job]]:
    """One job array per (dataset, nodes, tasks per node), a task per group of it; the groups in the
    plan's order with their jobs."""
    arrays: dict[tuple[Dataset, int, int], list[Group]] = defaultdict(list)
    for group in groups(planned, settings):
        arrays[(group.dataset, group.nodes, group.per_node)].append(group)
    jobs: list[tuple[Group, submitit.Job]] = []
    for (dataset, nodes, per_node), members in arrays.items():
        folder = dataset.new_array_dir(nodes, per_node)
        executor = _executor(settings, folder, nodes, per_node)
        with executor.batch():
            submitted_jobs = [executor.submit(SlurmTask(settings), list(g.members)) for g in members]
        for group, job in zip(members, submitted_jobs, strict=True):
            for p in group.members:
                record = submitted(p, job.job_id, settings)
                dataset.link_log_dir(p.execution_id, p.attempt, folder)
                ledger.append(dataset, record)
            jobs.append((group, job))
        count = sum(len(g.members) for g in members)
        print(
            f"job array {submitted_jobs[0].job_id.split('_')[0]}: {count} executions in {len(members)} "
            f"job(s) on {nodes} node(s) x {per_node} task(s)",
            flush=True,
        )
    return jobs


def _executor(settings: LaunchSettings, folder: Path, nodes: int, per_node: int) -> submitit.Executor:
    """sbatch for ``nodes`` x ``per_node`` tasks with the sweep's settings: every key declared as a
    submitit parameter (:func:`pipeline.launch.settings.submitit_parameters`), one GPU per task on GPU
    presets unless ``gpus_per_node`` says otherwise.

    ``--no-requeue``: Slurm must not rerun a job by itself (a dead node fails it, resubmission makes a
    new attempt); submitit's checkpointing re-enables requeue when a time limit or preemption nears.
    """
    executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=settings.max_timeouts)
    gpus = settings.gpus_per_node
    executor.update_parameters(
        **submitit_parameters(settings),
        nodes=nodes,
        ntasks_per_node=per_node,
        gpus_per_node=gpus if gpus is not None else (per_node if settings.gpus else None),
        additional_parameters={"no-requeue": True, **settings.additional_parameters},
    )
    return executor


def _states(job_ids: list[str]) -> dict[str, JobState]:
    """squeue knows live and recently ended jobs; sacct knows how jobs ended, with their exit codes.
    A job that just ended may not have reached accounting yet: squeue's word stands for it then. A job
    that failed within seconds can for a moment name fewer nodes than it was allocated (in squeue
    and in sacct): it counts as running until its node list is whole, so a failure names every node."""
    wanted = set(job_ids)
    states: dict[str, JobState] = {}
    ended: dict[str, JobState] = {}
    live = _run(["squeue", "--noheader", "--array", "--states=all", "--format=%i|%T|%N|%D|%r"])
    for line in live.splitlines():
        job_id, state, nodes, count, reason = line.split("|", 4)
        if job_id not in wanted:
            continue
        if state in _SLURM_RUNNING:
            states[job_id] = JobState(RUNNING)
        elif state in _SLURM_PENDING:
            states[job_id] = JobState(PENDING, None if reason == "None" else reason)
        else:
            ended[job_id] = _finished(state, "not in accounting yet", nodes, count)
    rest = wanted - states.keys()
    if rest:
        # Ask by array job id: sacct folds array tasks that never started into one "123_[4-9]" record.
        jobs = ",".join(sorted({job_id.split("_")[0] for job_id in rest}))
        query = ["sacct", "-X", "-n", "-P", "-o", "JobID,State,ExitCode,NNodes,NodeList", "-j", jobs]
        for line in _run(query).splitlines():
            record, state, exit_code, count, nodes = line.split("|")
            for job_id in _array_tasks(record):
                if job_id in rest:
                    states[job_id] = _finished(state, exit_code, nodes, count)
    for job_id in wanted - states.keys():
        states[job_id] = ended.get(job_id, JobState(FAILED, f"job {job_id} is unknown to squeue and sacct"))
    return states


def _array_tasks(record: str) -> list[str]:
    """Job ids a sacct JobID stands for: ``123``, ``123_4``, or ``123_[4-6,9%8]`` -> 123_4 ... 123_9."""
    match = re.fullmatch(r"(\d+)_\[([\d,-]+)(?:%\d+)?\]", record)
    if match is None:
        return [record]
    tasks = []
    for part in match.group(2).split(","):
        first, _, last = part.partition("-")
        tasks += [f"{match.group(1)}_{t}" for t in range(int(first), int(last or first) + 1)]
    return tasks


def _finished(state: str, exit_code: str, nodes: str = "", count: str = "0") -> JobState:
    word = state.split()[0]
    if word == "COMPLETED":
        return JobState(COMPLETED)
    if word in _SLURM_PENDING:
        return JobState(PENDING, word)
    if word in _SLURM_RUNNING:
        return JobState(RUNNING)
    hosts = _hostnames(nodes)
    if hosts and len(hosts) < int(count or 0):
        return JobState(RUNNING)  # its node list not yet whole
    return JobState(FAILED, f"Slurm {state}, exit code {exit_code}", hosts)


def _hostnames(nodes: str) -> tuple[str, ...]:
    """sacct's NodeList (``n[1-2],n4``) as node names; none for a job that never ran."""
    if not nodes or nodes in ("None", "None assigned"):
        return ()
    return tuple(_run(["scontrol", "show", "hostnames", nodes]).split())


def _run(command: list[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        message = f"{command[0]} not found: the ledger names Slurm jobs; run this on a Slurm host"
        raise RuntimeError(message) from None
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:2])} failed: {done.stderr.strip()}")
    return done.stdout
