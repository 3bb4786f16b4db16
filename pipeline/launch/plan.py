"""A sweep's plan: every execution validated before any is submitted, and what a backend reports back.

Nothing is submitted unless every job of the sweep is valid (known workload and variant, a scale that
holds its EP degree, a feasible routing plan, a device word that exists). Whether the device is there is
resolved where the job runs: a login node without a GPU submits ``device=cuda`` jobs to GPU nodes.
Planning builds each job's :class:`~pipeline.bench.spec.JobSpec` once; the backend submits it and the
job runs it as it is.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from pipeline.bench.distributed import DEVICES
from pipeline.bench.execute import Summary
from pipeline.bench.spec import JobSpec
from pipeline.bench.work import routing_plans
from pipeline.data import ledger
from pipeline.data.dataset import Dataset
from pipeline.launch.jobs import Job, JobState
from pipeline.launch.settings import LaunchSettings
from pipeline.matrix.scale import resolve


@dataclass(frozen=True)
class Outcome:
    """How one execution ended: rank 0's summary or the error; neither while it was submitted
    without being waited for."""

    planned: JobSpec
    summary: Summary | None
    error: str | None

    @property
    def ended(self) -> bool:
        return self.summary is not None or self.error is not None


class Backend(Protocol):
    """What runs a sweep's jobs: local processes or a scheduler. ``run`` yields one outcome per
    execution in the order they end (or at once, unfinished, when the settings do not wait), and
    calls ``started`` as each execution starts running."""

    name: str

    def run(
        self, planned: list[JobSpec], settings: LaunchSettings, started: Callable[[JobSpec], None]
    ) -> Iterator[Outcome]: ...

    def job_states(self, jobs: list[Job]) -> dict[str, JobState]: ...

    def for_resubmission(self, settings: LaunchSettings) -> LaunchSettings:
        """The settings a resubmission runs with (e.g. a scheduler's without waiting)."""
        ...


def plan(jobs: list[tuple[list[str], dict[str, Any]]], settings: LaunchSettings) -> list[JobSpec]:
    """Validate every (overrides, resolved config) job to run with ``settings``; raise one ValueError
    listing all problems."""
    errors, checked = [], []
    for overrides, config in jobs:
        try:
            execution, shape, timing = resolve(config)
            if config["device"] not in DEVICES:  # which device exists is the job's host to say
                raise ValueError(f"device {config['device']!r}; allowed: {', '.join(DEVICES)}")
            routing_plans(shape, config["seed"])
        except ValueError as err:
            errors.append(f"{' '.join(overrides)}: {err}")
            continue
        dataset = Dataset(config["dataset_dir"])
        config = {**config, "dataset_dir": str(dataset.root)}
        checked.append((execution, shape, timing, dataset, config, overrides))
    if errors:
        raise ValueError("nothing was launched; invalid executions:\n  " + "\n  ".join(errors))
    check_distinct([(o, str(d.root), e.execution_id) for e, _, _, d, _, o in checked])
    return [
        JobSpec(
            execution=e,
            shape=s,
            timing=t,
            seed=c["seed"],
            device=c["device"],
            dataset=d,
            attempt=ledger.next_attempt(d, e.execution_id),
            backend=settings.backend,
            cluster=settings.cluster,
            config=c,
            overrides=o,
        )
        for e, s, t, d, c, o in checked
    ]


def check_distinct(jobs: list[tuple[list[str], str, str]]) -> None:
    """Refuse two jobs of (overrides, dataset folder, execution id) that would be one execution of
    one dataset: an execution is its matrix cell, so a setting outside the matrix (``seed=0,1``,
    ``scale.tokens=16,32``) makes no new one. Each such setting goes into a dataset of its own."""
    seen: dict[tuple[str, str], list[str]] = {}
    for overrides, dataset, execution_id in jobs:
        first = seen.setdefault((dataset, execution_id), overrides)
        if first is not overrides:
            a = " ".join(o for o in first if o not in overrides) or "(the same overrides)"
            b = " ".join(o for o in overrides if o not in first) or "(the same overrides)"
            raise ValueError(
                f"{a} and {b} both select {execution_id} in {dataset}: a setting outside the matrix "
                "is no new execution; sweep it into one dataset_dir per setting"
            )


def resource_shape(ranks: int, tasks_per_node: int | None) -> tuple[int, int]:
    """(nodes, tasks per node) holding ``ranks`` tasks, at most ``tasks_per_node`` per node."""
    per_node = ranks if tasks_per_node is None else min(ranks, tasks_per_node)
    if per_node < 1 or ranks % per_node:
        raise ValueError(f"{ranks} ranks cannot be spread evenly at {tasks_per_node} tasks per node")
    return math.ceil(ranks / per_node), per_node


def submitted(
    p: JobSpec,
    job_id: str,
    settings: LaunchSettings,
    *,
    attempt: int | None = None,
    requeued_from: int | None = None,
) -> ledger.Submitted:
    """The ledger's record of one submission of ``p`` (as ``attempt`` when a requeue renumbers it)."""
    attempt = p.attempt if attempt is None else attempt
    dataset = p.dataset
    return ledger.Submitted(
        execution_id=p.execution.execution_id,
        attempt=attempt,
        job_id=str(job_id),
        overrides=p.overrides,
        backend=settings.backend,
        cluster=settings.cluster,
        log_dir=dataset.relative(dataset.log_dir(p.execution.execution_id, attempt)),
        requeued_from=requeued_from,
        settings=settings.to_json(),
    )


def collect(p: JobSpec, job: Any) -> Outcome:
    """Wait for a submitit job; record its failure in the ledger unless the job itself did."""
    try:
        summary = job.results()[0]
    except Exception as err:  # submitit re-raises the task's error (or reports the job's death)
        # submitit puts the task's whole traceback in the message; its last line names the error
        lines = str(err).strip().splitlines() or [""]
        reason = f"{type(err).__name__}: {lines[-1]}"
        execution_id, dataset = p.execution.execution_id, p.dataset
        if not ledger.ended(ledger.read(dataset), execution_id, p.attempt):
            ledger.append(dataset, ledger.Failed(execution_id, p.attempt, str(job.job_id), reason=reason))
        return Outcome(p, None, reason)
    return Outcome(p, summary, None)
