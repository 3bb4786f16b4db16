"""Hydra callbacks of ``pipeline.run``: checks that must come before Hydra writes anything.

Hydra makes its run or sweep folder inside the dataset (``hydra.run.dir``, ``hydra.sweep.dir``)
before the launcher sees a job, so a ``dataset_dir``, or one of those folders, that cannot be written
(a file, a read-only place, an empty or over-long path) would end in Hydra's traceback, or quietly
make the current folder a dataset: it is refused here, in one line, first.
"""

from __future__ import annotations

import os
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from pipeline.base.folders import check_path, check_writable, shown
from pipeline.compose.launcher import refusals
from pipeline.data.dataset import Dataset


class DatasetFolder(Callback):
    """Refuse a ``dataset_dir`` or Hydra folder that is no writable folder before the run or the sweep
    starts."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        check_folder(config, "run")

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        check_folder(config, "sweep")


def check_folder(config: DictConfig, mode: str = "run") -> None:
    """Check ``dataset_dir``, then Hydra's folder of this ``mode`` (``run`` or ``sweep``)."""
    with refusals("pipeline.run"):
        root = config.dataset_dir
        if not isinstance(root, str):
            raise ValueError(f"dataset_dir must be a path, got {root!r}")
        Dataset.writable(root)
        folder = str(config.hydra[mode].dir)
        try:
            check_writable(folder)
        except ValueError as err:
            raise ValueError(f"hydra.{mode}.dir {err}") from None
        if mode == "run":  # Hydra logs a run to <hydra.run.dir>/<hydra.job.name>.log
            key, value = "hydra.job.name", str(config.hydra.job.name)
            file = os.path.join(folder, f"{value}.log")
        else:  # each job's folder; a subdir naming the job (${hydra.job.num}) resolves only in the job
            key = "hydra.sweep.subdir"
            value = str(OmegaConf.select(config, key, throw_on_resolution_failure=False) or "0")
            file = os.path.join(folder, value)
        try:
            check_path(file)
        except ValueError as err:
            raise ValueError(f"{key} {shown(value)}: {err}") from None
