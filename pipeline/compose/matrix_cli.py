"""``python -m pipeline.matrix [overrides]``: list the executions a multirun with these overrides
would launch (execution id, then its overrides) and count them, without launching anything."""

from __future__ import annotations

import sys

from hydra.errors import HydraException

from pipeline.compose.select import select
from pipeline.matrix import counts, execution_of


def main(arguments: list[str]) -> int:
    try:
        jobs = select(arguments)
    except (ValueError, HydraException) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    executions = []
    for overrides, cfg in jobs:
        execution = execution_of(cfg)
        executions.append(execution)
        print(execution.execution_id, *overrides)
    n, workloads, pairs = counts(executions)
    print(f"{n} executions, {workloads} workloads, {pairs} pairs")
    return 0
