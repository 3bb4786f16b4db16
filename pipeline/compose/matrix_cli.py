"""``python -m pipeline.list [overrides]``: list the executions a multirun with these overrides
would launch (execution id, then its overrides) and count them, without launching anything."""

from __future__ import annotations

import sys

from hydra.errors import HydraException

from pipeline.compose.select import select
from pipeline.launch.plan import check_distinct
from pipeline.matrix import counts, execution_of

USAGE = """usage: python -m pipeline.list [OVERRIDE ...]

List the executions a multirun with these Hydra overrides would launch (execution id, then the
overrides that reproduce it) and count them; nothing is launched. Examples:
  python -m pipeline.list                                   the whole matrix (110 executions)
  python -m pipeline.list workload=inference-ep8-f1536 'variant=glob(mok-*)' scale=ci"""


def main(arguments: list[str]) -> int:
    if {"-h", "--help"} & set(arguments):
        print(USAGE)
        return 0
    try:
        jobs = select(arguments)
        executions = [execution_of(cfg) for _, cfg in jobs]
        # the launcher's own check: what it would refuse is not listed as launchable
        check_distinct(
            [(o, c["dataset_dir"], e.execution_id) for (o, c), e in zip(jobs, executions, strict=True)]
        )
    except (ValueError, HydraException) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for (overrides, _), execution in zip(jobs, executions, strict=True):
        print(execution.execution_id, *overrides)
    n, workloads, pairs = counts(executions)
    print(f"{n} executions, {workloads} workloads, {pairs} pairs")
    return 0
