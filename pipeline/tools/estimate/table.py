"""The published estimate columns, computed once per (code, execution, preset) and kept.

Publishing a dataset shows the estimate of each of its executions on its cluster preset; running them
takes seconds of CPU each, so results are kept in the table whose place, key and columns
:mod:`pipeline.data.estimates` owns (the report reads it there, never importing this package). Changing
the code path, the presets or torch starts a new table. ``python -m pipeline.estimate`` fills it: for a
selection, or with ``--dataset DIR`` for what a dataset publishes (what ``pipeline.aggregate --estimate``
runs). Nothing here imports torch: only the workers do, when something is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pipeline.data import estimates as kept_table
from pipeline.matrix import REPORT, Execution, Suite
from pipeline.tools.estimate.jobs import Job
from pipeline.tools.estimate.presets import Preset


def estimates(
    keys: Iterable[tuple[str, str]],
    workers: int | None = None,
    done: Callable[[dict[str, Any]], None] | None = None,
    suite: Suite = REPORT,
) -> dict[tuple[str, str], dict | None]:
    """The estimate of every (execution id of ``suite``, preset name) in ``keys``, from the kept table,
    computing (and keeping) the missing ones; ``done`` is called with each computed result as it
    arrives."""
    wanted = sorted(set(keys))
    found = kept_table.kept(wanted)
    missing = [k for k in wanted if found[k] is None]
    if missing:
        from pipeline.tools.estimate.pool import run_jobs  # spawns workers; only when something is missing

        presets = {name: Preset.named(name) for _, name in missing}
        jobs = [Job.of_execution(_execution(suite, e), presets[p], check=suite.check) for e, p in missing]
        results = run_jobs(jobs, workers, done)
        keep(jobs, results)
        found |= dict(zip(missing, results, strict=True))
    return found


def keep(jobs: list[Job], results: list[dict[str, Any]]) -> None:
    """Keep the results of the jobs that are what a dataset publishes (the default seed and full
    scale, the GPU's own SwiGLU form) and succeeded."""
    published = {
        kept_table.key(job.execution, job.preset.name): result
        for job, result in zip(jobs, results, strict=True)
        if job.published() and "error" not in result
    }
    if published:
        kept_table.merge(published)


def _execution(suite: Suite, execution_id: str) -> Execution:
    execution = suite.execution(execution_id)
    if execution is None:
        raise ValueError(f"execution {execution_id!r} is not in suite {suite.name}")
    return execution
