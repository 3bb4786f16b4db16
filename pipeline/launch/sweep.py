"""Plan and run a sweep: validate every execution first, then submit each as a submitit job.

Nothing is submitted unless every job of the sweep is valid (known workload and variant, a scale that
holds its EP degree, a feasible routing plan). Each job is recorded in the ledger before it runs and
prints one progress line when it ends; a summary closes the sweep. Local jobs run one after another:
they share this machine, and concurrent executions would disturb each other's timing.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import submitit

from pipeline.bench.distributed import resolve_device
from pipeline.bench.execute import run_execution
from pipeline.bench.work import routing_plans
from pipeline.launch import ledger
from pipeline.launch.executor import make_executor
from pipeline.matrix import Execution
from pipeline.matrix.scale import Shape
from pipeline.matrix.select import execution_of, shape_of

TERMINAL = ("finished", "failed")


@dataclass(frozen=True)
class Planned:
    """One validated execution, ready to submit."""

    execution: Execution
    shape: Shape
    config: dict[str, Any]
    overrides: list[str]
    attempt: int

    @property
    def dataset(self) -> Path:
        return Path(self.config["dataset_dir"])

    @property
    def log_dir(self) -> Path:
        return ledger.log_dir(self.dataset, self.execution.execution_id, self.attempt)


@dataclass(frozen=True)
class Outcome:
    planned: Planned
    summary: dict[str, Any] | None  # rank 0's return: shard path and iteration ms per phase
    error: str | None


def plan(jobs: list[tuple[list[str], dict[str, Any]]]) -> list[Planned]:
    """Validate every (overrides, resolved config) job; raise one ValueError listing all problems."""
    errors, checked = [], []
    for overrides, config in jobs:
        try:
            execution, shape = execution_of(config), shape_of(config)
            resolve_device(config["device"])
            routing_plans(shape, config["seed"])
        except ValueError as err:
            errors.append(f"{' '.join(overrides)}: {err}")
            continue
        config = {**config, "dataset_dir": str(Path(config["dataset_dir"]).resolve())}
        checked.append((execution, shape, config, overrides))
    if errors:
        raise ValueError("nothing was launched; invalid executions:\n  " + "\n  ".join(errors))
    seen: dict[tuple[str, str], list[str]] = {}
    for execution, _, config, overrides in checked:
        key = (config["dataset_dir"], execution.execution_id)
        if key in seen:
            raise ValueError(f"{execution.execution_id} selected twice: {seen[key]} and {overrides}")
        seen[key] = overrides
    return [
        Planned(e, s, c, o, ledger.next_attempt(Path(c["dataset_dir"]), e.execution_id))
        for e, s, c, o in checked
    ]


def run(planned: list[Planned], launcher: dict[str, Any]) -> list[Outcome]:
    """Submit the executions, wait for each, print progress and a summary.

    Local jobs run one at a time. On Slurm all go out at once, as job arrays (see
    :mod:`pipeline.launch.slurm`); with ``wait: false`` the sweep returns right after submitting.
    """
    if launcher["executor"] == "slurm":
        from pipeline.launch.slurm import submit  # it builds on this module

        jobs = submit(planned, launcher)
        if not launcher["wait"]:
            datasets = " ".join(sorted({str(p.dataset) for p in planned}))
            print(f"submitted {len(jobs)} executions; follow: python -m pipeline.status {datasets}")
            return [Outcome(p, None, None) for p in planned]
        waiting = (collect(p, job) for p, job in zip(planned, jobs, strict=True))
    else:
        waiting = (_run_one(p, launcher) for p in planned)
    outcomes = []
    for number, outcome in enumerate(waiting, start=1):
        outcomes.append(outcome)
        print(f"[{number}/{len(planned)}] {progress_line(outcome)}", flush=True)
    failed = sum(o.error is not None for o in outcomes)
    print(f"{len(outcomes)} executions: {len(outcomes) - failed} done, {failed} failed", flush=True)
    return outcomes


def progress_line(outcome: Outcome) -> str:
    p = outcome.planned
    if outcome.summary is None:
        return f"FAILED {p.execution.execution_id}  log: {p.log_dir}"
    ms = outcome.summary["iteration_ms"]["combined"]
    return f"{p.execution.execution_id}  {ms:.3f} ms/iteration  {outcome.summary['shard']}"


def _run_one(p: Planned, launcher: dict[str, Any]) -> Outcome:
    gpus = resolve_device(p.config["device"]) == "cuda"
    executor = make_executor(launcher, p.log_dir, p.shape.ranks, gpus)
    job = executor.submit(run_execution, p.config, p.attempt, launcher["cluster"])
    record_submitted(p, job, launcher)
    return collect(p, job)


def record_submitted(p: Planned, job: submitit.Job, launcher: dict[str, Any]) -> None:
    """The ledger's "submitted" record of one job."""
    ledger.append(
        p.dataset,
        {
            "event": "submitted",
            "execution_id": p.execution.execution_id,
            "attempt": p.attempt,
            "job_id": str(job.job_id),
            "overrides": p.overrides,
            "launcher": launcher["executor"],
            "cluster": launcher["cluster"],
            "log_dir": str(p.log_dir),
            "submitted_at": ledger.now(),
        },
    )


def collect(p: Planned, job: submitit.Job) -> Outcome:
    """Wait for the job; record its failure in the ledger unless the job itself did."""
    record = {"execution_id": p.execution.execution_id, "attempt": p.attempt, "job_id": str(job.job_id)}
    try:
        summary = job.results()[0]
    except Exception as err:  # submitit re-raises the task's error (or reports the job's death)
        # submitit puts the task's whole traceback in the message; its last line names the error
        lines = str(err).strip().splitlines() or [""]
        reason = f"{type(err).__name__}: {lines[-1]}"
        if not _ended(p):
            ledger.append(p.dataset, {"event": "failed", **record, "at": ledger.now(), "reason": reason})
        print(f"{p.execution.execution_id}: {reason}", file=sys.stderr, flush=True)
        return Outcome(p, None, reason)
    return Outcome(p, summary, None)


def _ended(p: Planned) -> bool:
    """Whether the job itself recorded how this attempt ended."""
    return any(
        r["event"] in TERMINAL and r["execution_id"] == p.execution.execution_id and r["attempt"] == p.attempt
        for r in ledger.read(p.dataset)
    )
