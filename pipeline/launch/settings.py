"""The launcher settings: every launcher key declared once, and the settings a sweep runs with.

The keys are those users of hydra-submitit-launcher and submitit know, each a field of
:class:`LauncherOptions` declared with :func:`option`: which launchers take it (both, as
hydra-submitit-launcher's ``BaseQueueConf``, or Slurm's alone), the submitit parameter it is passed as,
whether it reaches the sbatch script as text, its least value, what Slurm takes when no one says.
From that one declaration come :class:`LaunchSettings` (the options, with the backend and cluster
preset), the typed configs of ``hydra/launcher=local|slurm`` (:func:`launcher_conf`:
:mod:`pipeline.compose.store` puts them in Hydra's ConfigStore, so ``hydra.launcher.account=x`` needs
no ``+``), the keys each backend allows, :data:`SITE_KEYS` and what the Slurm backend passes to
submitit (:func:`submitit_parameters`). A choice (``backend``, ``group``) is a ``Literal``: any other
value is refused in one line naming it and the allowed ones.

A Slurm value left ``None`` comes from the cluster preset (``conf/cluster/<name>.yaml``:
``ranks_per_node``, ``gpus`` and any launcher key), else from its declared Slurm default: the
launcher config overrides the preset, which overrides the default.

:func:`effective` turns the launcher config and the chosen preset into one frozen
:class:`LaunchSettings`, which the backends, the jobs and the ledger see (the ledger keeps its JSON,
which a resubmission reads back); an unknown key anywhere is a ValueError that lists the allowed
ones, raised before anything is submitted. Every text of a setting is one printable line (a newline
in an sbatch option would start a line of the job's script), and a time limit is at least a minute.

What a dataset records is data, never a command: a resubmission takes the numbers its ledger
recorded (time limit, memory, grouping) but every :data:`SITE_KEYS` value, which reaches the sbatch
script as text (sbatch and srun options, the setup's shell lines), from today's configuration
(:func:`resubmission`), unless the operator names the key to reuse as recorded.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal, Union

from pipeline.base.bounds import check_bounds
from pipeline.base.printable import printable
from pipeline.data.codec import JsonRecord, RecordError, check_choices
from pipeline.data.comparable import LOCAL_CLUSTER

TARGET = "hydra_plugins.moe_bench_launcher.moe_bench_launcher.MoEBenchLauncher"
# What a cluster preset holds besides launcher keys: its name, ranks per node, one GPU per task or none.
PRESET_KEYS = ("name", "ranks_per_node", "gpus", "gpu_memory_gb", "arch")
# who runs the jobs: processes of this machine, this very process (pipeline.launch.debug), or Slurm
BackendName = Literal["local", "debug", "slurm"]
Grouping = Literal["shape", "none"]  # the executions of one resource shape in one job, or each alone
# The Hydra launcher configs (``hydra/launcher=<name>``) and the backends each takes, its default first.
LAUNCHERS: dict[str, tuple[BackendName, ...]] = {"local": ("local", "debug"), "slurm": ("slurm",)}
BOTH, SLURM = ("local", "slurm"), ("slurm",)  # the launchers that take a key
MIN_TIMEOUT_MIN, MAX_TIMEOUT_MIN = 1, 43_200  # Slurm's unit (whole minutes); 30 days
_OPTION = "launcher option"  # the key of an option's declaration in its field's metadata


@dataclass(frozen=True)
class Option:
    """How one launcher key is declared (:func:`option`, :func:`slurm`)."""

    launchers: tuple[str, ...]  # the Hydra launcher configs that take it
    submitit: str | bool = False  # the SlurmExecutor parameter it is passed as (True: its own name)
    convert: Callable[[Any], object] | None = None  # its value as that parameter takes it
    site: bool = False  # reaches the sbatch script as text: a resubmission takes it from today
    at_least: int | None = None  # its least value, where set
    slurm_default: object = None  # what Slurm takes when neither the launcher nor the preset says


def option(default: Any = None, *, launchers: tuple[str, ...] = BOTH, **declared: Any) -> Any:
    """A launcher key's field, both launchers' unless ``launchers`` says: its default (``{}``: an
    empty mapping of its own) and its declaration (the fields of :class:`Option`)."""
    metadata = {_OPTION: Option(launchers, **declared)}
    if default == {}:
        return field(default_factory=dict, metadata=metadata)
    return field(default=default, metadata=metadata)


def slurm(default: Any = None, **declared: Any) -> Any:
    """A key of the Slurm launcher alone (:func:`option`)."""
    return option(default, launchers=SLURM, **declared)


def _gb(value: float) -> str:
    return f"{value:g}GB"


@dataclass(frozen=True)
class LauncherOptions:
    """Every launcher key, once. Both launchers' keys first (hydra-submitit-launcher's
    ``BaseQueueConf``), then Slurm's own; those of the other launcher stay None."""

    timeout_min: float = option(60, submitit="time", convert=math.ceil, slurm_default=60)
    # None: every rank of an execution on one node (Slurm: the preset's ranks_per_node)
    tasks_per_node: int | None = option(at_least=1)
    # executions of one resource shape share one job: shape; one job each: none
    group: Grouping = option("shape")
    # a group's estimated minutes at most; None: half of timeout_min
    group_minutes: float | None = option()
    # executions a group holds at most; None: as many as its minutes allow
    group_size: int | None = option(at_least=1)
    # an execution still running this long is hung; None: from its plan
    deadline_s: float | None = option()
    partition: str | None = slurm(submitit=True, site=True)
    account: str | None = slurm(submitit=True, site=True)
    qos: str | None = slurm(submitit=True, site=True)
    constraint: str | None = slurm(submitit=True, site=True)
    exclude: str | None = slurm(submitit=True, site=True)  # nodes to keep off, Slurm's --exclude list
    gres: str | None = slurm(submitit=True, site=True)
    # None: one GPU per task on a GPU preset, none on a CPU one
    gpus_per_node: int | None = slurm(at_least=0)
    mem_gb: float | None = slurm(submitit="mem", convert=_gb)
    mem_per_gpu: str | None = slurm(submitit=True, site=True)
    exclusive: bool | None = slurm(submitit=True)
    setup: tuple[str, ...] | None = slurm(submitit=True, site=True)  # shell lines of the script before srun
    srun_args: tuple[str, ...] | None = slurm(submitit=True, site=True)
    # any other sbatch option, one by one: +hydra.launcher.additional_parameters.mail-type=END
    additional_parameters: dict[str, Any] = slurm({}, site=True)
    array_parallelism: int | None = slurm(submitit=True, at_least=1)  # at most this many tasks at once
    name: str | None = slurm(submitit="job_name", site=True, slurm_default="moe-bench")  # the job name
    comment: str | None = slurm(submitit=True, site=True)
    # seconds before the limit at which the job requeues
    signal_delay_s: int | None = slurm(submitit=True, at_least=0, slurm_default=90)
    max_timeouts: int | None = slurm(at_least=0, slurm_default=3)  # time-limit requeues of one execution
    wait: bool = slurm(True)  # false: submit and return; follow with pipeline.status
    cpus_per_task: int | None = slurm(submitit=True, at_least=1)

    def __post_init__(self) -> None:
        try:
            check_choices(self)
        except RecordError as err:
            raise ValueError(str(err)) from None
        if not MIN_TIMEOUT_MIN <= self.timeout_min <= MAX_TIMEOUT_MIN:
            raise ValueError(
                f"timeout_min must be >= {MIN_TIMEOUT_MIN} (a job's start alone takes seconds; Slurm counts "
                f"whole minutes) and <= {MAX_TIMEOUT_MIN:,} (30 days, beyond any partition's usual limit), "
                f"got {self.timeout_min}"
            )
        for f in fields(self):
            for text in _texts(getattr(self, f.name)):
                if not text.isprintable():
                    raise ValueError(
                        f"{f.name} holds a control character ({printable(text)[:80]}): a setting is one "
                        "printable line (a newline would start a line of the job's script)"
                    )
        least = {f.name: o.at_least for f, o in declared(type(self)) if o.at_least is not None}
        check_bounds(self, least)
        if self.mem_gb is not None and not self.mem_gb > 0:
            raise ValueError(f"mem_gb must be > 0, got {self.mem_gb}")
        for key in ("group_minutes", "deadline_s"):
            value = getattr(self, key)
            if value is not None and not 0 < value <= MAX_TIMEOUT_MIN * 60:
                raise ValueError(f"{key} must be > 0 and at most 30 days, got {value}")


@dataclass(frozen=True)
class LaunchSettings(LauncherOptions, JsonRecord):
    """The settings one sweep runs with, end to end: every launcher key, its ``backend``, the
    ``cluster`` preset (``local`` with the local backend) and whether that preset gives each task a
    GPU (``gpus``; None with the local backend). Written to the ledger with every submission, read
    back by a resubmission."""

    backend: BackendName = field(kw_only=True)
    cluster: str = field(kw_only=True)
    gpus: bool | None = field(kw_only=True)

    @property
    def on_this_host(self) -> bool:
        """Whether the jobs run on this machine (the local and debug backends), not a scheduler's."""
        return self.backend != "slurm"

    @property
    def group_limit_s(self) -> float:
        """The estimated seconds one job's group may hold: ``group_minutes``, else half the time
        limit (the rest is the estimate's margin)."""
        return 60 * (self.group_minutes if self.group_minutes is not None else self.timeout_min / 2)

    def changed(self, changes: Mapping[str, object]) -> LaunchSettings:
        """These settings with some launcher keys changed (a resubmission's ``--set``); the backend
        and preset stay. A ValueError names an unknown key or a value of the wrong type."""
        allowed = [k for k in allowed_keys(self.backend, type(self)) if k != "backend"]
        unknown = sorted(set(changes) - set(allowed))
        if unknown:
            raise ValueError(
                f"unknown launcher key(s) {', '.join(unknown)} for the {self.backend} launcher; "
                f"allowed: {', '.join(allowed)}"
            )
        try:
            return type(self).from_json({**self.to_json(), **changes})
        except RecordError as err:
            raise ValueError(f"launcher setting {err}") from None


def declared(options: type[LauncherOptions]) -> list[tuple[dataclasses.Field[Any], Option]]:
    """Every launcher key of ``options`` (a class of settings) with its declaration, in order."""
    return [(f, f.metadata[_OPTION]) for f in fields(options) if _OPTION in f.metadata]


def site_keys(options: type[LauncherOptions] = LaunchSettings) -> tuple[str, ...]:
    """The keys whose values reach the job's sbatch script as text: options of sbatch and srun, and
    the setup's shell lines. A resubmission takes them from today's configuration, never from a
    dataset unless the operator names them (what a dataset records is data, never a command)."""
    return tuple(f.name for f, o in declared(options) if o.site)


SITE_KEYS = site_keys()
# Keys of the launcher config that say how this sweep goes out, not how its jobs run: not recorded.
SWEEP_KEYS = ("resume",)


def launcher_conf(launcher: str, options: type[LauncherOptions] = LaunchSettings) -> type:
    """Hydra's typed config of ``hydra/launcher=<launcher>``, made from the declaration: Hydra's
    ``_target_``, the ``backend`` (the launcher's first by default), every key the launcher takes
    (a choice as a string, a tuple as a list; on Slurm ``None`` where a preset or the Slurm default
    may fill it in), and the sweep's own ``resume`` (skip executions already done: ``--resume``).
    Hydra cannot override the keys of a frozen config, so this one is not."""
    hints = typing.get_type_hints(options)
    specs: list[tuple[str, Any, Any]] = [("_target_", str, TARGET), ("backend", str, LAUNCHERS[launcher][0])]
    for f, o in declared(options):
        if launcher not in o.launchers:
            continue
        open_ = launcher == "slurm" and o.slurm_default is not None  # the preset's, or Slurm's default
        if f.default_factory is not dataclasses.MISSING:
            default: Any = field(default_factory=f.default_factory)
        else:
            default = None if open_ else f.default
        kind = _hydra_type(hints[f.name])
        specs.append((f.name, kind | None if default is None else kind, default))
    specs.append(("resume", bool, False))
    return dataclasses.make_dataclass(f"{launcher.title()}LauncherConf", specs)


def _hydra_type(hint: Any) -> Any:
    """The type Hydra's config gives a key of type ``hint``: without None, a ``Literal`` as ``str``
    (OmegaConf takes no Literal; the settings refuse what is not allowed), a tuple as a list."""
    if typing.get_origin(hint) in (Union, types.UnionType):
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    origin = typing.get_origin(hint)
    if origin is Literal:
        return str
    if origin is tuple:
        return list[typing.get_args(hint)[0]]  # type: ignore[misc]
    return hint


CONFS: dict[str, type] = {name: launcher_conf(name) for name in LAUNCHERS}
LocalLauncherConf, SlurmLauncherConf = CONFS["local"], CONFS["slurm"]


def submitit_parameters(settings: LauncherOptions) -> dict[str, object]:
    """The submitit SlurmExecutor parameters of every key declared as one, where set (a tuple as a
    list, a value converted as declared): the rest of the job's parameters its backend works out."""
    out: dict[str, object] = {}
    for f, o in declared(type(settings)):
        value = getattr(settings, f.name)
        if o.submitit is False or value is None:
            continue
        if isinstance(value, tuple):
            value = list(value)
        out[f.name if o.submitit is True else o.submitit] = value if o.convert is None else o.convert(value)
    return out


def _texts(value: object) -> list[str]:
    """Every string in a setting's value (a list's items, a mapping's keys and values)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _texts(v)]
    if isinstance(value, Mapping):
        return [t for k, v in value.items() for t in (*_texts(k), *_texts(v))]
    return []


def resubmission(
    recorded: Mapping[str, object], today: LaunchSettings, reused: Collection[str] = ()
) -> LaunchSettings:
    """The settings a resubmission runs with: those a submission ``recorded`` (its JSON: the time
    limit, memory, grouping, ...), with every :data:`SITE_KEYS` value from ``today``'s configuration
    (the launcher's defaults and today's cluster preset) but those ``reused`` as recorded, which the
    operator named. A ValueError names what does not fit (a recorded value of the wrong type)."""
    site = site_keys(type(today))
    unknown = sorted(set(reused) - set(site))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not a key to reuse; allowed: {', '.join(site)}")
    if recorded.get("backend") != today.backend:
        raise ValueError(
            f"the ledger records backend {str(recorded.get('backend'))[:40]!r}, not {today.backend!r}"
        )
    mine = today.to_json()
    values = {**recorded, **{k: mine[k] for k in site if k not in reused}}
    try:
        return type(today).from_json(values)
    except RecordError as err:
        raise ValueError(f"recorded launcher setting {err}") from None


def launcher_of(backend: str) -> str:
    """The Hydra launcher config whose jobs ``backend`` runs (a ValueError names the allowed ones)."""
    for launcher, backends in LAUNCHERS.items():
        if backend in backends:
            return launcher
    allowed = ", ".join(f"{b} (hydra/launcher={name})" for name, bs in LAUNCHERS.items() for b in bs)
    raise ValueError(f"backend {str(backend)[:40]!r} is not allowed; allowed: {allowed}")


def allowed_keys(backend: str, options: type[LauncherOptions] = LaunchSettings) -> list[str]:
    """The launcher keys of one backend that its jobs run with (not Hydra's ``_target_``, nor the
    sweep's own ``SWEEP_KEYS``)."""
    launcher = launcher_of(backend)
    return ["backend", *(f.name for f, o in declared(options) if launcher in o.launchers)]


def effective(
    launcher: Mapping[str, Any],
    cluster: Mapping[str, Any] | None,
    presets: list[str],
    options: type[LaunchSettings] = LaunchSettings,
) -> LaunchSettings:
    """The settings a sweep runs with (of the class ``options``, the declaration): the launcher
    config's keys, preset values filled in where the launcher left ``None``, then the Slurm defaults."""
    launcher = {k: v for k, v in launcher.items() if k not in SWEEP_KEYS}
    backend = launcher.get("backend")
    if launcher.get("_target_", TARGET) != TARGET or backend is None:
        target = str(launcher.get("_target_", "?")).rsplit(".", 1)[-1]
        raise ValueError(f"launcher {target} is not allowed; allowed: hydra/launcher={'|'.join(LAUNCHERS)}")
    name = launcher_of(str(backend))
    allowed = allowed_keys(name, options)
    unknown = sorted(set(launcher) - set(allowed) - {"_target_"})
    for other in LAUNCHERS:  # a key of the other config: this backend is not that launcher's
        if unknown and other != name and set(unknown) <= set(allowed_keys(other, options)):
            raise ValueError(
                f"backend {backend} runs with hydra/launcher={name}; "
                f"hydra/launcher={other} takes backend {'|'.join(LAUNCHERS[other])}"
            )
    if unknown:
        raise ValueError(
            f"unknown launcher key(s) {', '.join(unknown)} for hydra/launcher={name}; "
            f"allowed: {', '.join(allowed)}"
        )
    settings = {k: launcher.get(k) for k in allowed}
    if name == "local":
        if cluster is not None:
            raise ValueError(
                f"cluster={cluster.get('name')} is a Slurm preset: add hydra/launcher=slurm "
                "(the local launcher runs on this machine)"
            )
        return _settings(options, {**settings, "cluster": LOCAL_CLUSTER, "gpus": None})
    if cluster is None:
        raise ValueError(f"hydra/launcher=slurm needs a cluster preset: cluster={'|'.join(presets)}")
    unknown = sorted(set(cluster) - set(allowed) - set(PRESET_KEYS))
    if unknown:
        raise ValueError(
            f"cluster preset {cluster.get('name')!r}: unknown key(s) {', '.join(unknown)}; "
            f"allowed: {', '.join([*PRESET_KEYS, *allowed])}"
        )
    for key, value in cluster.items():
        if key not in PRESET_KEYS and settings[key] is None:
            settings[key] = value
    if settings["tasks_per_node"] is None:
        settings["tasks_per_node"] = cluster.get("ranks_per_node")
    for f, o in declared(options):
        if settings.get(f.name) is None and o.slurm_default is not None:
            settings[f.name] = o.slurm_default
    return _settings(options, {**settings, "cluster": cluster["name"], "gpus": bool(cluster.get("gpus"))})


def _settings(options: type[LaunchSettings], values: dict[str, object]) -> LaunchSettings:
    try:
        return options.from_json(values)
    except RecordError as err:
        raise ValueError(f"launcher setting {err}") from None
