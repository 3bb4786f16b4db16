"""The launcher settings of a composed config: ``hydra.launcher`` and the ``cluster`` preset, merged
and checked by :func:`pipeline.launch.settings.effective`; a refusal ends the command in one line."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from pipeline import CONFIG_DIR
from pipeline.base.exits import refuse
from pipeline.bench.spec import JobSpec
from pipeline.launch.settings import LaunchSettings, effective
from pipeline.launch.sweep import Claimed, claimed


def presets() -> list[str]:
    """The cluster presets of ``conf/cluster/``."""
    return sorted(p.stem for p in (CONFIG_DIR / "cluster").glob("*.yaml"))


def launcher_settings(launcher: DictConfig, cluster: DictConfig | None) -> LaunchSettings:
    """The effective settings of ``hydra.launcher`` on the chosen ``cluster`` node (None: none chosen)."""
    plain = cast(dict[str, Any], OmegaConf.to_container(launcher, resolve=True))
    preset = None if cluster is None else cast(dict[str, Any], OmegaConf.to_container(cluster, resolve=True))
    return effective(plain, preset, presets())


def resume_of(launcher: DictConfig) -> bool:
    """Whether the sweep skips executions already done (``--resume``, ``hydra.launcher.resume=true``)."""
    return bool(launcher.get("resume", False))


def cluster_of(cfg: DictConfig) -> DictConfig | None:
    """The ``cluster`` node of a composed config, or None when no preset was chosen."""
    node = cfg.get("cluster")
    return node if isinstance(node, DictConfig) else None


@contextmanager
def refusals(command: str, cleanup: Callable[[], None] | None = None) -> Iterator[None]:
    """Bad input (a ValueError) ends ``command`` with its message on stderr and exit status 2, after
    ``cleanup`` (what Hydra wrote for the run that is refused)."""
    try:
        yield
    except ValueError as err:
        if cleanup is not None:
            cleanup()
        raise SystemExit(refuse(command, err)) from None


RESUME = "--resume"


@contextmanager
def claimed_sweep(
    command: str, planned: list[JobSpec], launcher: DictConfig, cleanup: Callable[[], None] | None = None
) -> Iterator[Claimed]:
    """The one way into a sweep for both entry points: the planned executions' attempts claimed for
    this process (held until the block ends), a refusal (another writer has what the sweep means)
    ending ``command`` in one line, and a line for each execution ``--resume`` skips."""
    with contextlib.ExitStack() as held:
        with refusals(command, cleanup):  # a shared folder of the dataset that is not its own refuses too
            sweep = held.enter_context(claimed(planned, resume_of(launcher)))
            sweep.check()
        for line in sweep.skips(RESUME):
            print(line, flush=True)
        yield sweep
