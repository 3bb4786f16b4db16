"""Run a planned sweep on its backend and report progress as executions end.

Each job is recorded in the ledger before it runs and prints one progress line when it ends; a
summary closes the sweep. Which backend runs it is the launcher config's ``executor``
(:mod:`pipeline.launch.backends`).
"""

from __future__ import annotations

import sys
from typing import Any

from pipeline.launch.backends import backend
from pipeline.launch.plan import Outcome, Planned


def run(planned: list[Planned], launcher: dict[str, Any]) -> list[Outcome]:
    """Submit the executions, wait for each (unless the launcher does not wait), print progress."""
    outcomes = []
    for outcome in backend(launcher["executor"]).run(planned, launcher):
        outcomes.append(outcome)
        if outcome.ended:
            print(f"[{len(outcomes)}/{len(planned)}] {progress_line(outcome)}", flush=True)
            if outcome.error is not None:
                print(
                    f"{outcome.planned.execution.execution_id}: {outcome.error}", file=sys.stderr, flush=True
                )
    if all(o.ended for o in outcomes):
        failed = sum(o.error is not None for o in outcomes)
        print(f"{len(outcomes)} executions: {len(outcomes) - failed} done, {failed} failed", flush=True)
    return outcomes


def progress_line(outcome: Outcome) -> str:
    p = outcome.planned
    if outcome.summary is None:
        return f"FAILED {p.execution.execution_id}  log: {p.log_dir}"
    ms = outcome.summary["iteration_ms"]["combined"]
    return f"{p.execution.execution_id}  {ms:.3f} ms/iteration  {outcome.summary['shard']}"
