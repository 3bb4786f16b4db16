"""Hydra's per-job output of a sweep, as Hydra's own launchers leave it: each job's folder
``<hydra.sweep.dir>/<hydra.sweep.subdir>`` (Hydra's default subdir ``${hydra.job.num}``) holds
``.hydra/{config,hydra,overrides}.yaml`` and ``logs``, a link to the attempt's log folder in the dataset."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from pipeline.compose.jobs import without_hydra


def prepare(cfg: DictConfig, num: int, overrides: list[str]) -> Path:
    """Set the Hydra fields of job ``num`` in its config (number, task overrides, output folder) and
    return that folder. A quickly composed config carries the first job of its set's overrides: the
    job's own go in here."""
    with read_write(cfg.hydra), open_dict(cfg.hydra):
        cfg.hydra.job.num = num
        cfg.hydra.job.id = str(num)
        cfg.hydra.overrides.task = overrides
        folder = Path(str(cfg.hydra.sweep.dir)) / str(cfg.hydra.sweep.subdir)
        cfg.hydra.runtime.output_dir = str(folder.absolute())
    return folder


def save(cfg: DictConfig, folder: Path, log_dir: Path) -> None:
    """Write the job's ``.hydra`` files and its ``logs`` link (to a folder its submission creates)."""
    folder.mkdir(parents=True, exist_ok=True)
    if cfg.hydra.output_subdir is not None:
        hydra_output = folder / str(cfg.hydra.output_subdir)
        hydra_output.mkdir(exist_ok=True)
        for name, node in (
            ("config.yaml", without_hydra(cfg)),
            ("hydra.yaml", OmegaConf.masked_copy(cfg, ["hydra"])),
            ("overrides.yaml", cfg.hydra.overrides.task),
        ):
            (hydra_output / name).write_text(OmegaConf.to_yaml(node))
    link = folder / "logs"
    if not link.is_symlink():
        os.symlink(os.path.relpath(log_dir, folder), link, target_is_directory=True)
