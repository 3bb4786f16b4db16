"""From Hydra overrides to the executions they select, the way ``--multirun`` expands them.

Used by ``python -m pipeline.matrix`` (to list a selection without launching it) and by the launcher
(to validate every job of a sweep before anything starts).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf

from pipeline.launch.job_configs import compose_jobs
from pipeline.matrix import (
    VARIANT_BY_NAME,
    VARIANTS,
    WORKLOAD_BY_NAME,
    WORKLOADS,
    Execution,
    Variant,
    Workload,
)
from pipeline.matrix.scale import Shape, scale_from_config, shape_for

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO_ROOT / "conf"
CONFIG_NAME = "config"

# ``${repo_path:outputs/dataset}`` -> absolute path under the repository (the default dataset_dir).
OmegaConf.register_new_resolver("repo_path", lambda rel: str(REPO_ROOT / rel), replace=True)


def execution_of(cfg: Mapping[str, Any]) -> Execution:
    """The matrix cell a composed config describes; a ValueError lists the allowed names otherwise."""
    workload = Workload(**cfg["workload"])
    variant = Variant(**cfg["variant"])
    if workload not in WORKLOADS:
        allowed = ", ".join(WORKLOAD_BY_NAME)
        raise ValueError(f"workload {dict(cfg['workload'])} is not in the matrix; allowed: {allowed}")
    if variant not in VARIANTS:
        allowed = ", ".join(VARIANT_BY_NAME)
        raise ValueError(f"variant {dict(cfg['variant'])} is not in the matrix; allowed: {allowed}")
    return Execution(workload, variant)


def shape_of(cfg: Mapping[str, Any]) -> Shape:
    """Resolved shape of a composed config (raises ValueError when the scale cannot hold it)."""
    return shape_for(execution_of(cfg).workload, scale_from_config(dict(cfg["scale"]), cfg["max_ranks"]))


def expand(arguments: list[str], sweeper_params: Mapping[str, str]) -> list[list[str]]:
    """Job override lists of a multirun: the sweeper's default params, replaced key by key by the
    command-line arguments, expanded as Hydra's basic sweeper does (``a,b``, ``glob(*)``, ...)."""
    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    params = [f"{k}={v}" for k, v in sweeper_params.items()]
    (jobs,) = BasicSweeper.split_arguments(parser.parse_overrides(params + arguments), None)
    return jobs


def select(arguments: list[str]) -> list[tuple[list[str], DictConfig]]:
    """(overrides, composed config) of every job ``--multirun arguments`` would launch, each checked."""
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        master = compose(CONFIG_NAME, return_hydra_config=True)
        jobs = expand(arguments, master.hydra.sweeper.params or {})
        # composed the way the launcher composes a sweep (see its job_configs module)
        configs = compose_jobs(GlobalHydra.instance().config_loader(), master, jobs)
    for cfg in configs:
        shape_of(cfg)
    return list(zip(jobs, configs, strict=True))
