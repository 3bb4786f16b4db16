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
        results = run_jobs(jobs, workers, keeping(jobs, done))
        found |= dict(zip(missing, results, strict=True))
    return found


def keeping(
    jobs: list[Job], done: Callable[[dict[str, Any]], None] | None = None
) -> Callable[[dict[str, Any]], None]:
    """What :func:`~pipeline.tools.estimate.pool.run_jobs` calls with each result of ``jobs`` as it
    arrives: ``done``, then the result kept where it is what a dataset publishes (its job of the
    default seed and full scale, the GPU's own SwiGLU form; it succeeded). Kept at once, not when the
    run ends: another process that reads the table meanwhile finds it, and a run cut short loses
    nothing it computed."""
    published: dict[str, bool] = {}
    for job in jobs:  # a key that any job of another seed, scale or form shares is never kept
        key = kept_table.key(job.execution, job.preset.name)
        published[key] = published.get(key, True) and job.published()

    def arrived(result: dict[str, Any]) -> None:
        if done is not None:
            done(result)
        key = kept_table.key(result["execution_id"], result.get("cluster", ""))
        if published.get(key) and "error" not in result:
            kept_table.merge({key: result})

    return arrived


def _execution(suite: Suite, execution_id: str) -> Execution:
    execution = suite.execution(execution_id)
    if execution is None:
        raise ValueError(f"execution {execution_id!r} is not in suite {suite.name}")
    return execution
