"""Compose the configs of a sweep's jobs quickly: Hydra once per distinct set of other overrides.

A full Hydra composition costs tens of milliseconds, so composing each of the matrix's 110 jobs alone
takes longer than submitting them. Jobs of one sweep usually differ only in their ``workload`` and
``variant`` choices, and those are plain names (:data:`pipeline.compose.store.CHOICES`): choosing one
sets that key and nothing else. So each distinct set of the other overrides is composed by Hydra
once, and its jobs get their two names set on a copy. The second job of each set is also composed in
full and must come out equal, so a choice that stops being a plain value fails loudly instead of
composing wrongly.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any, cast

from hydra.core.config_loader import ConfigLoader
from omegaconf import DictConfig, OmegaConf

from pipeline.compose.store import CHOICES
from pipeline.launch.plan import Composed

_PLAIN = re.compile(r"[A-Za-z0-9._-]+")  # a name that needs no parsing (no quotes, no interpolation)


def composed(overrides: Sequence[str], cfg: DictConfig) -> Composed:
    """One job as the plan takes it: the ``overrides`` that select it and its resolved config, without
    Hydra's own node (what the job receives)."""
    config = cast(Mapping[str, Any], OmegaConf.to_container(without_hydra(cfg), resolve=True))
    return Composed(tuple(overrides), config)


def without_hydra(cfg: DictConfig) -> DictConfig:
    return OmegaConf.masked_copy(cfg, [str(k) for k in cfg if k != "hydra"])


def compose_jobs(
    loader: ConfigLoader, master: DictConfig, job_overrides: Sequence[Sequence[str]]
) -> list[DictConfig]:
    """The composed config of every job, in order (what ``loader.load_sweep_config`` gives each)."""
    composed: dict[tuple[str, ...], DictConfig] = {}
    checked: set[tuple[str, ...]] = set()
    out = []
    for overrides in job_overrides:
        others, choices = _split(list(overrides))
        if others is None or others not in composed:
            cfg = loader.load_sweep_config(master, list(overrides))
            if others is not None:
                composed[others] = cfg
            out.append(cfg)
            continue
        cfg = copy.deepcopy(composed[others])
        for key, name in choices.items():
            cfg[key] = name
        if others not in checked:
            _check_equal(cfg, loader.load_sweep_config(master, list(overrides)), overrides)
            checked.add(others)
        out.append(cfg)
    return out


def _split(overrides: list[str]) -> tuple[tuple[str, ...] | None, dict[str, str]]:
    """(the overrides that are not plain choices of a name, those choices); None first when an
    override reaches into a choice (``workload.ep=16``, ``+variant=...``) or chooses anything but a
    plain name: compose that in full, as Hydra does."""
    others, choices = [], {}
    for override in overrides:
        key, _, value = override.partition("=")
        if key in CHOICES and _PLAIN.fullmatch(value):
            choices[key] = value
        elif key.lstrip("+~").split(".")[0].split("@")[0] in CHOICES:
            return None, {}
        else:
            others.append(override)
    return tuple(others), choices


def _check_equal(fast: DictConfig, full: DictConfig, overrides: Sequence[str]) -> None:
    # compared as YAML text: a NaN (``scale.min_window_ms=nan``, refused later) equals itself there
    if OmegaConf.to_yaml(without_hydra(fast)) != OmegaConf.to_yaml(without_hydra(full)):
        raise RuntimeError(f"quick composition of {list(overrides)} differs from Hydra's: compose in full")
