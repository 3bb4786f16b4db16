"""From Hydra overrides to the executions they select, the way ``--multirun`` expands them, without
launching anything (``python -m pipeline.list``), and the expansion of ``workload`` and ``variant``
over the chosen suite that the sweeper shares.

A sweep runs one suite: ``workload`` and ``variant`` are names of its workloads and variants, and a
``glob(...)`` of them (the default sweep, ``glob(*)``) expands over the suite's names in sorted order,
as Hydra expands a config group's options."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Glob, Override
from omegaconf import DictConfig

from pipeline import CONFIG_DIR
from pipeline.base.folders import shown
from pipeline.compose.jobs import compose_jobs
from pipeline.compose.store import CHOICES, CONFIG_NAME, register
from pipeline.matrix import Suite, suite_of
from pipeline.matrix.scale import resolve


def search_path(config_dirs: Sequence[str | Path]) -> list[str]:
    """The Hydra override that adds ``config_dirs`` (``--config-dir``) to the config search path: where
    a suite of one's own (``DIR/suite/NAME.yaml``) is found."""
    if not config_dirs:
        return []
    folders = ",".join(f"file://{Path(d).absolute()}" for d in config_dirs)
    return [f"hydra.searchpath=[{folders}]"]


def named(overrides: list[Override], suite: Suite, parser: OverridesParser) -> list[Override]:
    """``overrides`` with the last of each key kept (in the place of its first, as Hydra's sweeper
    keeps it), every ``workload`` / ``variant`` glob expanded over ``suite``'s names and every name
    checked; a ValueError names one that is not the suite's, and what is."""
    last: dict[str, Override] = {}
    for override in overrides:
        last[override.get_key_element()] = override
    out = []
    for key, override in last.items():
        if override.key_or_group.split(".")[0] == "suite" and override.is_sweep_override():
            raise ValueError(
                f"{override.input_line}: a sweep runs one suite; sweep each into a dataset_dir of its own"
            )
        if override.key_or_group not in CHOICES or override.package is not None or override.is_delete():
            out.append(override)
            continue
        group = override.key_or_group
        names = sorted(suite.workload_names() if group == "workload" else suite.variant_names())
        value = override.value()
        if isinstance(value, Glob):
            chosen = value.filter(names)
            if not chosen:
                raise ValueError(
                    f"{override.input_line} matches no {group} of suite {suite.name}; allowed {group}: "
                    f"{', '.join(names)}"
                )
            out.append(parser.parse_override(f"{key}={','.join(chosen)}"))
            continue
        chosen = list(override.sweep_string_iterator()) if override.is_sweep_override() else [value]
        for name in chosen:
            if name not in names:
                allowed = ", ".join(names)
                raise ValueError(
                    f"{group} {shown(str(name))} is not in suite {suite.name}; allowed {group}: {allowed}"
                )
        out.append(override)
    return out


def expand(arguments: list[str], sweeper_params: Mapping[str, str], suite: Suite) -> list[list[str]]:
    """Job override lists of a multirun: the sweeper's default params, replaced key by key by the
    command-line arguments, expanded as Hydra's basic sweeper does (``a,b``, ``glob(*)``, ...), the
    names of workloads and variants over ``suite``."""
    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    params = [f"{k}={v}" for k, v in sweeper_params.items()]
    overrides = named(parser.parse_overrides(params + arguments), suite, parser)
    (jobs,) = BasicSweeper.split_arguments(overrides, None)
    return jobs


def select(
    arguments: list[str], config_dirs: Sequence[str | Path] = ()
) -> list[tuple[list[str], DictConfig]]:
    """(overrides, composed config) of every job ``--multirun arguments`` would launch, each checked;
    ``config_dirs`` are searched for configs too (``--config-dir``: a suite of one's own)."""
    register()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        master = compose(
            CONFIG_NAME, overrides=[*search_path(config_dirs), *_suite(arguments)], return_hydra_config=True
        )
        jobs = expand(arguments, master.hydra.sweeper.params or {}, suite_of(master))
        # composed the way the launcher composes a sweep
        configs = compose_jobs(GlobalHydra.instance().config_loader(), master, jobs)
    for cfg in configs:
        resolve(cfg)
    return list(zip(jobs, configs, strict=True))


def _suite(arguments: list[str]) -> list[str]:
    """The arguments that choose or change the suite (``suite=seed-003``, ``suite.shape.ep=8``), but a
    sweep (which :func:`named` refuses): the master config holds the suite the jobs are named in."""
    parsed = OverridesParser.create().parse_overrides(arguments)
    return [
        o.input_line
        for o in parsed
        if o.input_line and o.key_or_group.split(".")[0] == "suite" and not o.is_sweep_override()
    ]


def compose_each(
    job_overrides: list[list[str]], hydra_overrides: list[str], suite: Mapping[str, object] | None = None
) -> list[DictConfig]:
    """The composed config (Hydra's node included) of every job, as the launcher composes a sweep run
    with ``hydra_overrides`` (``hydra/launcher=slurm``); a resubmission composes in-process this way,
    with the ``suite`` its dataset recorded (a suite of one's own need not be on the search path)."""
    register()
    if suite is not None:  # what chose or changed the suite: the recorded definition says it all
        job_overrides = [[o for o in overrides if not _of_suite(o)] for overrides in job_overrides]
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        master = compose(CONFIG_NAME, overrides=hydra_overrides, return_hydra_config=True)
        configs = compose_jobs(GlobalHydra.instance().config_loader(), master, job_overrides)
    if suite is not None:
        for cfg in configs:
            cfg.suite = dict(suite)
    return configs


def _of_suite(override: str) -> bool:
    """Whether ``override`` chooses or changes the suite (``suite=NAME``, ``suite.shape.ep=8``)."""
    return override.partition("=")[0].lstrip("+~").split(".")[0].split("@")[0] == "suite"
