"""Compose the configs of a sweep's jobs quickly: Hydra once per distinct set of other overrides.

A full Hydra composition costs tens of milliseconds, so composing each of the matrix's 110 jobs alone
takes longer than submitting them. Jobs of one sweep usually differ only in their ``workload`` and
``variant`` choices, and those config groups are plain data: choosing an option puts that file's
content at the group's key and nothing else. So each distinct set of the other overrides is composed
by Hydra once, and its jobs get their workload and variant nodes from the config store. The second job
of each set is also composed in full and must come out equal, so a group that stops being plain data
fails loudly instead of composing wrongly.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, cast

from hydra.core.config_loader import ConfigLoader
from omegaconf import DictConfig, OmegaConf

from pipeline.compose.store import GROUPS

DATA_GROUPS = tuple(GROUPS)


def job_config(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config of one execution, without Hydra's own node (what the job receives)."""
    return cast(dict[str, Any], OmegaConf.to_container(without_hydra(cfg), resolve=True))


def without_hydra(cfg: DictConfig) -> DictConfig:
    return OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k != "hydra"])


def compose_jobs(
    loader: ConfigLoader, master: DictConfig, job_overrides: Sequence[Sequence[str]]
) -> list[DictConfig]:
    """The composed config of every job, in order (what ``loader.load_sweep_config`` gives each)."""
    composed: dict[tuple[str, ...], DictConfig] = {}
    checked: set[tuple[str, ...]] = set()
    options: dict[str, DictConfig | None] = {}
    out = []
    for overrides in job_overrides:
        others, choices = _split(list(overrides))
        if others is None or others not in composed:
            cfg = loader.load_sweep_config(master, list(overrides))
            if others is not None:
                composed[others] = cfg
            out.append(cfg)
            continue
        nodes = {g: _group_option(loader, options, f"{g}/{choice}") for g, choice in choices.items()}
        if None in nodes.values():  # an unknown option: Hydra's composition names the available ones
            out.append(loader.load_sweep_config(master, list(overrides)))
            continue
        cfg = copy.deepcopy(composed[others])
        for group, node in nodes.items():
            cfg[group] = node
        if others not in checked:
            _check_equal(cfg, loader.load_sweep_config(master, list(overrides)), overrides)
            checked.add(others)
        out.append(cfg)
    return out


def _split(overrides: list[str]) -> tuple[tuple[str, ...] | None, dict[str, str]]:
    """(the overrides that are not plain data-group choices, the data-group choices); None first when
    an override reaches into a data group (``workload.ep=16``, ``+variant=...``): compose that in full."""
    others, choices = [], {}
    for override in overrides:
        key, _, value = override.partition("=")
        if key in DATA_GROUPS:
            choices[key] = value
        elif key.lstrip("+~").split(".")[0].split("@")[0] in DATA_GROUPS:
            return None, {}
        else:
            others.append(override)
    return tuple(others), choices


def _group_option(loader: ConfigLoader, cache: dict[str, DictConfig | None], name: str) -> DictConfig | None:
    """The content of option ``<group>/<option>``, or None when there is no such option."""
    if name not in cache:
        result = loader.repository.load_config(name)  # type: ignore[attr-defined]
        cache[name] = None if result is None else result.config
    return cache[name]


def _check_equal(fast: DictConfig, full: DictConfig, overrides: Sequence[str]) -> None:
    # compared as YAML text: a NaN (``scale.min_window_ms=nan``, refused later) equals itself there
    if OmegaConf.to_yaml(without_hydra(fast)) != OmegaConf.to_yaml(without_hydra(full)):
        raise RuntimeError(f"quick composition of {list(overrides)} differs from Hydra's: compose in full")
