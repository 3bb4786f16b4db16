"""``python -m pipeline.list [overrides]``: list the executions a multirun with these overrides
would launch (execution id, then its overrides) and count them, without launching anything."""

from __future__ import annotations

import sys

from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from pipeline.compose.errors import one_line
from pipeline.compose.jobs import job_config
from pipeline.compose.select import select
from pipeline.exits import BAD_INPUT, OK
from pipeline.launch.plan import check_distinct, validate
from pipeline.matrix import counts

USAGE = """usage: python -m pipeline.list [OVERRIDE ...]

List the executions a multirun with these Hydra overrides would launch (execution id, then the
overrides that reproduce it) and count them; nothing is launched. Examples:
  python -m pipeline.list                                   the whole matrix (110 executions)
  python -m pipeline.list workload=inference-ep8-f1536 'variant=glob(mok-*)' scale=ci"""


def main(arguments: list[str]) -> int:
    if {"-h", "--help"} & set(arguments):
        print(USAGE)
        return OK
    options = [a for a in arguments if a.startswith("-")]
    if options:
        print(
            f"error: unknown option {options[0]}; allowed: -h, --help (the rest are overrides)",
            file=sys.stderr,
        )
        return BAD_INPUT
    try:
        jobs = select(arguments)
        # the launcher's own checks: what it would refuse is not listed as launchable
        executions = [validate(job_config(cfg))[0] for _, cfg in jobs]
        check_distinct(
            [(o, c["dataset_dir"], e.execution_id) for (o, c), e in zip(jobs, executions, strict=True)]
        )
    except (ValueError, HydraException, OmegaConfBaseException) as err:
        print(f"error: {one_line(err)}", file=sys.stderr)
        return BAD_INPUT
    for (overrides, _), execution in zip(jobs, executions, strict=True):
        print(execution.execution_id, *overrides)
    n, workloads, pairs = counts(executions)
    print(f"{n} executions, {workloads} workloads, {pairs} pairs")
    return OK
