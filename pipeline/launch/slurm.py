"""Slurm side of a sweep: one job array per resource shape; a requeue is a new attempt.

Executions that need the same nodes x tasks go out together as one submitit job array, so a sweep of
the whole matrix costs a handful of ``sbatch`` calls. An array's logs share one folder under
``<dataset>/logs/arrays/``; each attempt's ``logs/<execution_id>/attempt-<n>`` links to it.

Slurm's own requeue is off (``--no-requeue``): a node that dies fails the job, and
``pipeline.resubmit`` runs it again as a new attempt. Time limits and preemption signals go through
submitit's checkpointing instead: the job is requeued with the next attempt number, recorded in the
ledger like any submission, so a requeued execution never writes a second shard for one attempt.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import submitit
from submitit.helpers import DelayedSubmission

from pipeline.bench.execute import run_execution
from pipeline.data.schema import shard_path
from pipeline.launch import ledger
from pipeline.launch.executor import make_executor, resource_shape
from pipeline.launch.sweep import Planned, record_submitted


class SlurmTask:
    """The callable each Slurm job runs: one execution attempt, checkpointable by submitit."""

    def __init__(self, planned: Planned, cluster: str) -> None:
        self.execution_id = planned.execution.execution_id
        self.overrides = planned.overrides
        self.cluster = cluster

    def __call__(self, config: dict[str, Any], attempt: int) -> dict[str, Any] | None:
        return run_execution(config, attempt, self.cluster)

    def checkpoint(self, config: dict[str, Any], attempt: int) -> DelayedSubmission | None:
        """On a time-limit or preemption signal (rank 0): requeue this job as the next attempt.

        None (no requeue) when this attempt's shard is already written: the execution is done.
        """
        dataset = Path(config["dataset_dir"])
        if shard_path(dataset, self.execution_id, attempt).exists():
            return None
        job_id = submitit.JobEnvironment().job_id
        # Jobs are submitted non-requeueable (a dead node must fail them); this requeue is wanted.
        subprocess.run(["scontrol", "update", f"JobId={job_id}", "Requeue=1"], check=True, timeout=60)
        following = ledger.next_attempt(dataset, self.execution_id)
        old_logs = ledger.log_dir(dataset, self.execution_id, attempt)
        new_logs = ledger.log_dir(dataset, self.execution_id, following)
        _link(new_logs, old_logs.resolve())
        ledger.append(
            dataset,
            {
                "event": "submitted",
                "execution_id": self.execution_id,
                "attempt": following,
                "overrides": self.overrides,
                "job_id": job_id,
                "launcher": "slurm",
                "cluster": self.cluster,
                "log_dir": str(new_logs),
                "submitted_at": ledger.now(),
                "requeued_from": attempt,
            },
        )
        return DelayedSubmission(self, config, following)


def submit(planned: list[Planned], launcher: dict[str, Any]) -> list[submitit.Job]:
    """Submit the executions grouped by (dataset, nodes, tasks per node); jobs in ``planned`` order."""
    groups: dict[tuple[Path, int, int], list[int]] = defaultdict(list)
    for i, p in enumerate(planned):
        groups[(p.dataset, *resource_shape(p.shape.ranks, launcher["tasks_per_node"]))].append(i)
    jobs: list[submitit.Job | None] = [None] * len(planned)
    for (dataset, nodes, per_node), members in groups.items():
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        folder = dataset / "logs" / "arrays" / f"{stamp}-{nodes}x{per_node}-{secrets.token_hex(3)}"
        folder.mkdir(parents=True)
        executor = make_executor(launcher, folder, nodes * per_node, launcher["gpus"])
        with executor.batch():
            for i in members:
                p = planned[i]
                jobs[i] = executor.submit(SlurmTask(p, launcher["cluster"]), p.config, p.attempt)
        for i in members:
            _link(planned[i].log_dir, folder)
            record_submitted(planned[i], jobs[i], launcher)
        print(
            f"job array {jobs[members[0]].job_id.split('_')[0]}: {len(members)} executions on "
            f"{nodes} node(s) x {per_node} task(s)",
            flush=True,
        )
    return jobs


def _link(log_dir: Path, folder: Path) -> None:
    """``logs/<execution_id>/attempt-<n>`` -> the shared folder submitit writes this job's logs in."""
    log_dir.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(folder, log_dir.parent), log_dir, target_is_directory=True)
