"""Hydra's side of the launcher: compose each job's config (:mod:`pipeline.compose`), then hand the
sweep to :mod:`pipeline.launch`, which validates all of it before submitting anything."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from pipeline.bench.spec import JobSpec
from pipeline.compose import compose_jobs, composed, output
from pipeline.compose.launcher import claimed_sweep, cluster_of, launcher_settings, refusals
from pipeline.launch.groups import check_limits
from pipeline.launch.jobs import Outcome
from pipeline.launch.plan import plan
from pipeline.launch.sweep import ExecutionFailed, run


class MoEBenchLauncher(Launcher):
    """Runs every job of the sweep as one submitit job with one task per rank."""

    def __init__(self, **launcher: Any) -> None:
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None and self.hydra_context is not None, "setup() was not called"
        assert self.task_function is not None, "setup() was not called"
        setup_globals()
        loader = self.hydra_context.config_loader
        with refusals("pipeline.run"):
            configs = compose_jobs(loader, self.config, job_overrides)
            # every job of a sweep shares the launcher; the cluster preset is a job choice: check each
            settings = [launcher_settings(self.config.hydra.launcher, cluster_of(c)) for c in configs]
            if any(s != settings[0] for s in settings):
                raise ValueError("one sweep runs on one cluster preset; sweep cluster= in separate runs")
            jobs = [composed(o, c) for o, c in zip(job_overrides, configs, strict=True)]
            planned = plan(jobs, settings[0])
            check_limits(planned, settings[0])
        config_of = {_key(p): cfg for p, cfg in zip(planned, configs, strict=True)}
        with claimed_sweep("pipeline.run", planned, self.config.hydra.launcher) as sweep:
            folders = {}
            for num, (p, cfg) in enumerate(zip(planned, configs, strict=True), start=initial_job_idx):
                folders[_key(p)] = output.prepare(cfg, num, p.overrides)
            returns = {}
            for p in [*sweep.done, *(q for q, _ in sweep.owned)]:
                e = _key(p)
                returns[e] = job_return(Outcome(p, None, None), config_of[e], folders[e])
            for p, why in sweep.unwritable:  # --resume skipped it: the sweep ends in exit status 1
                e = _key(p)
                returns[e] = job_return(Outcome(p, None, f"not written: {why}"), config_of[e], folders[e])
            callbacks = self.hydra_context.callbacks
            for p in sweep.to_run:
                e = _key(p)
                output.save(config_of[e], folders[e], p.config, p.log_dir)
                callbacks.on_job_start(config=config_of[e], task_function=self.task_function)
            for outcome in run(sweep.to_run, settings[0]):  # in the order executions end
                e = _key(outcome.planned)
                returns[e] = job_return(outcome, config_of[e], folders[e])
                callbacks.on_job_end(config=config_of[e], job_return=returns[e])
        return [returns[_key(p)] for p in planned]


def _key(p: JobSpec) -> tuple[str, str]:
    """A planned job's key: its dataset and execution (claiming renumbers its attempt)."""
    return str(p.dataset.root), p.execution_id


def job_return(outcome: Outcome, cfg: DictConfig, folder: Path) -> JobReturn:
    """Hydra's record of one job; a failed or missing one carries the error the sweeper raises at the
    end (one submitted without waiting, skipped as done by ``--resume`` or left to another writer
    counts as completed: Hydra's sweeper raises on anything else)."""
    planned = outcome.planned
    value: object
    if not outcome.failed:
        status, value = JobStatus.COMPLETED, outcome.summary
    elif outcome.error is not None:
        status = JobStatus.FAILED
        value = ExecutionFailed(
            f"{planned.execution.execution_id} failed ({outcome.error}); log: {planned.log_dir}"
        )
    else:
        status = JobStatus.FAILED
        value = ExecutionFailed(f"{planned.execution.execution_id} never started ({outcome.missing})")
    return JobReturn(
        overrides=planned.overrides,
        cfg=cfg,
        hydra_cfg=cfg,
        working_dir=str(folder),
        task_name=cfg.hydra.job.name,
        status=status,
        _return_value=value,
    )
