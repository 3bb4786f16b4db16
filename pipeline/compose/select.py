"""From Hydra overrides to the executions they select, the way ``--multirun`` expands them, without
launching anything (``python -m pipeline.list``)."""

from __future__ import annotations

from collections.abc import Mapping

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from pipeline import CONFIG_DIR
from pipeline.compose.jobs import compose_jobs
from pipeline.compose.store import CONFIG_NAME, register
from pipeline.matrix.scale import resolve


def expand(arguments: list[str], sweeper_params: Mapping[str, str]) -> list[list[str]]:
    """Job override lists of a multirun: the sweeper's default params, replaced key by key by the
    command-line arguments, expanded as Hydra's basic sweeper does (``a,b``, ``glob(*)``, ...)."""
    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    params = [f"{k}={v}" for k, v in sweeper_params.items()]
    (jobs,) = BasicSweeper.split_arguments(parser.parse_overrides(params + arguments), None)
    return jobs


def select(arguments: list[str]) -> list[tuple[list[str], DictConfig]]:
    """(overrides, composed config) of every job ``--multirun arguments`` would launch, each checked."""
    register()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        master = compose(CONFIG_NAME, return_hydra_config=True)
        jobs = expand(arguments, master.hydra.sweeper.params or {})
        # composed the way the launcher composes a sweep
        configs = compose_jobs(GlobalHydra.instance().config_loader(), master, jobs)
    for cfg in configs:
        resolve(cfg)
    return list(zip(jobs, configs, strict=True))


def compose_each(job_overrides: list[list[str]], hydra_overrides: list[str]) -> list[DictConfig]:
    """The composed config (Hydra's node included) of every job, as the launcher composes a sweep run
    with ``hydra_overrides`` (``hydra/launcher=slurm``); a resubmission composes in-process this way."""
    register()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        master = compose(CONFIG_NAME, overrides=hydra_overrides, return_hydra_config=True)
        return compose_jobs(GlobalHydra.instance().config_loader(), master, job_overrides)
