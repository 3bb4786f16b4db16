"""Which submitit executor runs the jobs, and the resources one execution asks for."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import submitit

EXECUTORS = ("local",)


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
    executor = submitit.LocalExecutor(folder=folder)
    executor.update_parameters(
        nodes=nodes,
        tasks_per_node=per_node,
        gpus_per_node=per_node if gpus else 0,
        timeout_min=launcher["timeout_min"],
    )
    return executor
