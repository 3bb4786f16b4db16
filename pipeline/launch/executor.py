"""Which submitit executor runs the jobs, and the resources one execution asks for."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import submitit

EXECUTORS = ("local", "slurm")


def resource_shape(ranks: int, tasks_per_node: int | None) -> tuple[int, int]:
    """(nodes, tasks per node) holding ``ranks`` tasks, at most ``tasks_per_node`` per node."""
    per_node = ranks if tasks_per_node is None else min(ranks, tasks_per_node)
    if per_node < 1 or ranks % per_node:
        raise ValueError(f"{ranks} ranks cannot be spread evenly at {tasks_per_node} tasks per node")
    return math.ceil(ranks / per_node), per_node


def make_executor(launcher: dict[str, Any], folder: Path, ranks: int, gpus: bool) -> submitit.Executor:
    """The executor of ``launcher.executor`` for one execution, its logs in ``folder``."""
    kind = launcher["executor"]
    if kind not in EXECUTORS:
        raise ValueError(f"executor {kind!r}; allowed: {', '.join(EXECUTORS)}")
    nodes, per_node = resource_shape(ranks, launcher["tasks_per_node"])
    if kind == "slurm":
        return slurm_executor(launcher, folder, nodes, per_node)
    executor = submitit.LocalExecutor(folder=folder)
    executor.update_parameters(
        nodes=nodes,
        tasks_per_node=per_node,
        gpus_per_node=per_node if gpus else 0,
        timeout_min=launcher["timeout_min"],
    )
    return executor


def slurm_executor(launcher: dict[str, Any], folder: Path, nodes: int, per_node: int) -> submitit.Executor:
    """sbatch for ``nodes`` x ``per_node`` tasks, one GPU per task on GPU clusters.

    ``--no-requeue``: Slurm must not rerun a job by itself (a dead node fails it, resubmission makes a
    new attempt); submitit's checkpointing re-enables requeue when a time limit or preemption nears.
    """
    executor = submitit.SlurmExecutor(folder=folder, max_num_timeout=launcher["max_timeouts"])
    executor.update_parameters(
        job_name="moe-bench",
        partition=launcher["partition"],
        time=launcher["timeout_min"],
        nodes=nodes,
        ntasks_per_node=per_node,
        cpus_per_task=launcher["cpus_per_task"],
        gpus_per_node=per_node if launcher["gpus"] else None,
        signal_delay_s=launcher["signal_delay_s"],
        additional_parameters={"no-requeue": True},
    )
    return executor
