"""Hydra's per-job output of a sweep, as Hydra's own launchers leave it: each job's folder
``<hydra.sweep.dir>/<hydra.sweep.subdir>`` (Hydra's default subdir ``${hydra.job.num}``) holds
``.hydra/{config,overrides}.yaml`` and ``logs``, a link to the attempt's log folder in the dataset.
(Hydra's ``hydra.yaml`` is left out: rendering Hydra's node per job cost seconds per 100 jobs; the
sweep's ``multirun.yaml`` holds it once.)"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, open_dict, read_write


def prepare(cfg: DictConfig, num: int, overrides: list[str]) -> Path:
    """Set the Hydra fields of job ``num`` in its config (number, task overrides, output folder) and
    return that folder. A quickly composed config carries the first job of its set's overrides: the
    job's own go in here."""
    hydra = cfg.hydra  # flags set on the few nodes written: setting them on all of Hydra's is slow
    with read_write(hydra.job), open_dict(hydra.job):
        hydra.job.num, hydra.job.id = num, str(num)
    with read_write(hydra.overrides):
        hydra.overrides.task = overrides
    folder = Path(str(hydra.sweep.dir)) / str(hydra.sweep.subdir)
    with read_write(hydra.runtime), open_dict(hydra.runtime):
        hydra.runtime.output_dir = str(folder.absolute())
    return folder


def save(cfg: DictConfig, folder: Path, job: dict[str, Any], log_dir: Path) -> None:
    """Write the job's ``.hydra`` files (``job``: its resolved config) and its ``logs`` link (to a
    folder its submission creates)."""
    folder.mkdir(parents=True, exist_ok=True)
    if cfg.hydra.output_subdir is not None:
        hydra_output = folder / str(cfg.hydra.output_subdir)
        hydra_output.mkdir(exist_ok=True)
        overrides = list(cfg.hydra.overrides.task)
        for name, node in (("config.yaml", job), ("overrides.yaml", overrides)):
            (hydra_output / name).write_text(yaml.safe_dump(node, sort_keys=False))
    link = folder / "logs"
    if not link.is_symlink():
        os.symlink(os.path.relpath(log_dir, folder), link, target_is_directory=True)


def discard(folder: Path) -> None:
    """Remove what Hydra wrote into a run or sweep ``folder`` of a command that was refused (its
    ``.hydra`` files, ``multirun.yaml``, the job's log), then the folder, ``hydra/`` above it and the
    dataset folder where that leaves them empty: a refused sweep leaves nothing behind."""
    for name in (".hydra/config.yaml", ".hydra/hydra.yaml", ".hydra/overrides.yaml", "multirun.yaml"):
        (folder / name).unlink(missing_ok=True)
    for log in folder.glob("*.log"):
        log.unlink()
    for empty in (folder / ".hydra", folder, folder.parent, folder.parent.parent):
        try:
            empty.rmdir()
        except FileNotFoundError:  # a sweep's folder has no .hydra of its own
            continue
        except OSError:  # not empty: what else it holds is not Hydra's to remove
            return
