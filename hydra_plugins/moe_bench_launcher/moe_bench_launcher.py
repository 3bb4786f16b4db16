"""Hydra's side of the launcher: compose each job's config (:mod:`pipeline.compose`), then hand the
sweep to :mod:`pipeline.launch`, which validates all of it before submitting anything."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hydra.core.utils import JobReturn, JobStatus, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig

from pipeline.compose import compose_jobs, job_config
from pipeline.compose.launcher import cluster_of, launcher_settings, refusals
from pipeline.launch.plan import Outcome, plan
from pipeline.launch.sweep import run


class MoEBenchLauncher(Launcher):
    """Runs every job of the sweep as one submitit job with one task per rank."""

    def __init__(self, **launcher: Any) -> None:
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context = config, hydra_context

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None and self.hydra_context is not None, "setup() was not called"
        setup_globals()
        loader = self.hydra_context.config_loader
        with refusals("pipeline.run"):
            configs = compose_jobs(loader, self.config, job_overrides)
            # every job of a sweep shares the launcher; the cluster preset is a job choice: check each
            settings = [launcher_settings(self.config.hydra.launcher, cluster_of(c)) for c in configs]
            if any(s != settings[0] for s in settings):
                raise ValueError("one sweep runs on one cluster preset; sweep cluster= in separate runs")
            planned = plan([(list(o), job_config(c)) for o, c in zip(job_overrides, configs, strict=True)])
        outcomes = run(planned, settings[0])
        return [job_return(o, c) for o, c in zip(outcomes, configs, strict=True)]


def job_return(outcome: Outcome, cfg: DictConfig) -> JobReturn:
    """Hydra's record of one job; a failed one carries the error the sweeper raises at the end."""
    planned = outcome.planned
    if outcome.error is None:
        status, value = JobStatus.COMPLETED, outcome.summary
    else:
        status = JobStatus.FAILED
        value = RuntimeError(
            f"{planned.execution.execution_id} failed ({outcome.error}); log: {planned.log_dir}"
        )
    return JobReturn(
        overrides=planned.overrides,
        cfg=cfg,
        hydra_cfg=cfg,
        working_dir=str(planned.log_dir),
        task_name=cfg.hydra.job.name,
        status=status,
        _return_value=value,
    )
