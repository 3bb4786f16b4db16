"""Hydra callbacks of ``pipeline.run``: checks that must come before Hydra writes anything.

Hydra makes its run or sweep folder inside the dataset (``hydra.run.dir``, ``hydra.sweep.dir``)
before the launcher sees a job, so a ``dataset_dir`` that cannot be written (a file, a read-only
place) would end in Hydra's traceback: it is refused here, in one line, first.
"""

from __future__ import annotations

from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from pipeline.compose.launcher import refusals
from pipeline.data.dataset import Dataset


class DatasetFolder(Callback):
    """Refuse a ``dataset_dir`` that is no writable folder before the run or the sweep starts."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        check_folder(config)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        check_folder(config)


def check_folder(config: DictConfig) -> None:
    with refusals("pipeline.run"):
        root = config.dataset_dir
        if not isinstance(root, str):
            raise ValueError(f"dataset_dir must be a path, got {root!r}")
        Dataset.writable(root)
