"""Hydra's view of the matrix: the ``workload`` and ``variant`` config groups and the resolvers.

The two groups are generated from the matrix tables (:mod:`pipeline.matrix`) into Hydra's ConfigStore
rather than mirrored in 27 YAML files: the tables are the only place a name or a field is written, so
the configs cannot drift from the matrix. ``conf/`` keeps what people edit by hand: the top-level
config, the scales, the cluster presets. The launcher configs are typed dataclasses
(:mod:`pipeline.launch.settings`).
"""

from __future__ import annotations

import os
from dataclasses import asdict

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from pipeline import outputs_base
from pipeline.data.dataset import Dataset
from pipeline.launch.settings import CONFS
from pipeline.matrix import VARIANTS, WORKLOADS, Variant, Workload

CONFIG_NAME = "config"
GROUPS: dict[str, tuple[Workload, ...] | tuple[Variant, ...]] = {"workload": WORKLOADS, "variant": VARIANTS}


def register() -> None:
    """Put the matrix into Hydra's ConfigStore and register the resolvers (idempotent): call before
    Hydra composes anything."""
    store = ConfigStore.instance()
    for group, items in GROUPS.items():
        for item in items:
            store.store(group=group, name=item.name, node=asdict(item))
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
