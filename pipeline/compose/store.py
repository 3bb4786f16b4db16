"""Hydra's view of the matrix: the resolvers, the typed launcher configs, and the keys that name an
execution.

A suite is a config group of YAML files (``conf/suite``, or a folder of one's own given with
``--config-dir``), and an execution is named by two plain keys of the config, ``workload`` and
``variant``: names of the chosen suite's workloads and variants (:mod:`pipeline.matrix.suite`), which
a sweep expands over the suite (:mod:`pipeline.compose.select`). ``conf/`` keeps what people edit by
hand: the top-level config, the suites, the scales, the cluster presets. The launcher configs are
typed dataclasses (:mod:`pipeline.launch.settings`).
"""

from __future__ import annotations

import os

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from pipeline import outputs_base
from pipeline.data.dataset import Dataset
from pipeline.launch.settings import CONFS

CONFIG_NAME = "config"
# The config's keys that name an execution in its suite: a sweep expands them over the suite's names.
CHOICES = ("workload", "variant")


def register() -> None:
    """Put the launcher configs into Hydra's ConfigStore and register the resolvers (idempotent): call
    before Hydra composes anything."""
    store = ConfigStore.instance()
    # typed launcher configs, as hydra-submitit-launcher registers its own: hydra/launcher=local|slurm
    for name, conf in CONFS.items():
        store.store(group="hydra/launcher", name=name, node=conf, provider="moe_bench")
    # ``${repo_path:outputs/dataset}``: an absolute path under the checkout (the default dataset_dir),
    # or under the current directory where the package is installed
    OmegaConf.register_new_resolver("repo_path", lambda rel: str(outputs_base() / rel), replace=True)
    # ``${dataset_hydra:${dataset_dir}}``: where Hydra's own run folders go inside a dataset.
    OmegaConf.register_new_resolver("dataset_hydra", lambda root: str(Dataset(root).hydra_dir), replace=True)
    # ``${pid:}``: this process, so that two sweeps started in the same second get folders of their own
    OmegaConf.register_new_resolver("pid", lambda: str(os.getpid()), replace=True)
