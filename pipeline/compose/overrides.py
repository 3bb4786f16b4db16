"""Checks of a command line's overrides that come before Hydra composes anything.

Hydra looks an option of a config group up as a file, so an option name longer than the file system
allows ends in a traceback there: every option chosen for a group must be one of its options. And
Hydra's ``+key=value`` (``++key=value``) adds a key the config does not have, which nothing would
then read: a key is added only at an extension point, where what reads it checks it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.object_type import ObjectType
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, Override
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pipeline import CONFIG_DIR
from pipeline.base.folders import cut, shown
from pipeline.compose.select import search_path
from pipeline.compose.store import CONFIG_NAME, register

# Where ``+`` may add a key, and what checks it there.
EXTENSIONS = {
    "hydra.launcher.": "hydra.launcher.KEY (launcher settings; additional_parameters.KEY: any sbatch option)",
    "hydra.callbacks.": "hydra.callbacks.NAME (a Hydra callback)",
    "scale.": "scale.KEY (scale settings)",
}
_ABSENT = object()


def check(arguments: Sequence[str], config_dirs: Sequence[str | Path] = ()) -> None:
    """A ValueError, in one line, for the first override that chooses no option of its group or adds
    a key outside :data:`EXTENSIONS`; overrides Hydra cannot parse are left to Hydra, which says why.
    ``config_dirs`` (``--config-dir``) and a ``hydra.searchpath`` among the arguments hold options too."""
    try:
        overrides = OverridesParser.create().parse_overrides(list(arguments))
    except (HydraException, OmegaConfBaseException):
        return
    register()
    searched = [*search_path(config_dirs), *(a for a in arguments if a.startswith("hydra.searchpath="))]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        _, repository = loader._parse_overrides_and_create_caching_repo(CONFIG_NAME, searched)  # type: ignore[attr-defined]
        config: DictConfig | None = None
        for override in overrides:
            name = override.key_or_group
            if override.is_delete():
                continue
            if repository.group_exists(name):
                _check_choices(override, sorted(repository.get_group_options(name, ObjectType.CONFIG)))
            elif (override.is_add() or override.is_force_add()) and not name.startswith(tuple(EXTENSIONS)):
                if config is None:
                    config = _defaults(overrides, searched)
                if OmegaConf.select(config, name, default=_ABSENT) is _ABSENT:
                    raise ValueError(
                        f"{cut(override.input_line or name)}: the config has no key {cut(name)} to add; "
                        f"+ adds only {', '.join(EXTENSIONS.values())}; a key the config has is set "
                        "without + (python -m pipeline.run --cfg job lists them)"
                    )


def _check_choices(override: Override, options: list[str]) -> None:
    """Refuse a choice (or one of a sweep's) that is none of the group's ``options``, before Hydra
    looks it up as a file."""
    value = override.value()
    chosen = value.list if isinstance(value, ChoiceSweep) else [value]
    for choice in chosen:  # an interpolation (${oc.env:V}) is Hydra's to resolve
        if isinstance(choice, str) and choice not in options and "${" not in choice:
            group = override.key_or_group
            raise ValueError(
                f"Could not find {shown(f'{group}/{choice}')}; allowed {group}: {', '.join(options)}"
            )


def _defaults(overrides: list[Override], searched: list[str]) -> DictConfig:
    """The config the plain overrides compose (no sweep, nothing added or deleted), to see which keys
    it has; the defaults alone where those do not compose (Hydra then says why)."""
    plain = [
        o.input_line
        for o in overrides
        if o.input_line and not (o.is_sweep_override() or o.is_add() or o.is_force_add() or o.is_delete())
    ]
    try:
        return compose(CONFIG_NAME, overrides=[*searched, *plain], return_hydra_config=True)
    except (HydraException, OmegaConfBaseException):
        return compose(CONFIG_NAME, overrides=searched, return_hydra_config=True)
