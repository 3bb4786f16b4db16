"""The launcher settings: which keys each backend takes, and the settings a sweep runs with.

The keys are those users of hydra-submitit-launcher and submitit know. The two Hydra dataclasses are
the typed configs of ``hydra/launcher=local|slurm`` (:mod:`pipeline.compose.store` puts them in
Hydra's ConfigStore, so ``hydra.launcher.account=x`` needs no ``+``). A Slurm value left ``None``
comes from the cluster preset (``conf/cluster/<name>.yaml``: ``ranks_per_node``, ``gpus`` and any
launcher key), else from submitit's default: the launcher config overrides the preset, which
overrides submitit.

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

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from pipeline.base.bounds import check_bounds
from pipeline.base.printable import printable
from pipeline.data.codec import JsonRecord, RecordError
from pipeline.data.comparable import LOCAL_CLUSTER

TARGET = "hydra_plugins.moe_bench_launcher.moe_bench_launcher.MoEBenchLauncher"
# What a cluster preset holds besides launcher keys: its name, ranks per node, one GPU per task or none.
PRESET_KEYS = ("name", "ranks_per_node", "gpus", "gpu_memory_gb", "arch")


@dataclass
class LocalLauncherConf:
    """Each execution is one submitit job on this machine, one process per rank, one after another."""

    _target_: str = TARGET
    backend: str = "local"
    tasks_per_node: int | None = None  # None: every rank of an execution on one node
    timeout_min: float = 60
    group: str = "shape"  # executions of one resource shape share one job: shape; one job each: none
    group_minutes: float | None = None  # a group's estimated minutes at most; None: half of timeout_min
    group_size: int | None = None  # executions a group holds at most; None: as many as its minutes allow
    deadline_s: float | None = None  # an execution still running this long is hung; None: from its plan
    resume: bool = False  # skip executions already done with the dataset's settings (--resume)


@dataclass
class SlurmLauncherConf:
    """One job array per resource shape; ``None`` takes the cluster preset's value, else submitit's."""

    _target_: str = TARGET
    backend: str = "slurm"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    exclude: str | None = None  # nodes to keep off, Slurm's --exclude list
    gres: str | None = None
    gpus_per_node: int | None = None  # None: one GPU per task on a GPU preset, none on a CPU one
    mem_gb: float | None = None
    mem_per_gpu: str | None = None
    exclusive: bool | None = None
    setup: list[str] | None = None  # shell lines of the sbatch script before srun
    srun_args: list[str] | None = None
    # any other sbatch option, one by one: +hydra.launcher.additional_parameters.mail-type=END
    additional_parameters: dict[str, Any] = field(default_factory=dict)
    array_parallelism: int | None = None  # at most this many tasks of a job array at once
    name: str | None = None  # the job name; None: moe-bench
    comment: str | None = None
    timeout_min: float | None = None  # None: 60
    signal_delay_s: int | None = None  # seconds before the limit at which the job requeues; None: 90
    max_timeouts: int | None = None  # time-limit requeues one execution may take; None: 3
    wait: bool = True  # false: submit and return; follow with pipeline.status
    cpus_per_task: int | None = None
    tasks_per_node: int | None = None  # None: the preset's ranks_per_node
    group: str = "shape"  # executions of one resource shape share one job: shape; one job each: none
    group_minutes: float | None = None  # a group's estimated minutes at most; None: half of timeout_min
    group_size: int | None = None  # executions a group holds at most; None: as many as its minutes allow
    deadline_s: float | None = None  # an execution still running this long is hung; None: from its plan
    resume: bool = False  # skip executions already done with the dataset's settings (--resume)


CONFS: dict[str, type[LocalLauncherConf] | type[SlurmLauncherConf]] = {
    "local": LocalLauncherConf,
    "slurm": SlurmLauncherConf,
}
_FALLBACK = {"name": "moe-bench", "timeout_min": 60, "signal_delay_s": 90, "max_timeouts": 3}
MIN_TIMEOUT_MIN, MAX_TIMEOUT_MIN = 1, 43_200  # Slurm's unit (whole minutes); 30 days
# The keys whose values reach the job's sbatch script as text: options of sbatch and srun, and the
# setup's shell lines. A resubmission takes them from today's configuration, never from a dataset
# unless the operator names them (what a dataset records is data, never a command).
SITE_KEYS = tuple(
    "partition account qos constraint exclude gres mem_per_gpu setup srun_args additional_parameters name "
    "comment".split()
)
# Keys of the launcher config that say how this sweep goes out, not how its jobs run: not recorded.
SWEEP_KEYS = ("resume",)
_COUNTS = ("tasks_per_node", "array_parallelism", "cpus_per_task", "group_size")  # at least 1 where set
GROUPINGS = ("shape", "none")  # the executions of one resource shape in one job, or each in its own
_AMOUNTS = ("gpus_per_node", "signal_delay_s", "max_timeouts")  # at least 0 where set


@dataclass(frozen=True)
class LaunchSettings(JsonRecord):
    """The settings one sweep runs with, end to end: its ``backend`` (``local`` or ``slurm``), the
    ``cluster`` preset (``local`` with the local backend) and whether that preset gives each task a
    GPU (``gpus``; None with the local backend), then every launcher key (those of the other backend
    stay None). Written to the ledger with every submission, read back by a resubmission."""

    backend: str
    cluster: str
    gpus: bool | None
    timeout_min: float
    tasks_per_node: int | None = None
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    exclude: str | None = None
    gres: str | None = None
    gpus_per_node: int | None = None
    mem_gb: float | None = None
    mem_per_gpu: str | None = None
    exclusive: bool | None = None
    setup: tuple[str, ...] | None = None
    srun_args: tuple[str, ...] | None = None
    additional_parameters: dict[str, Any] = field(default_factory=dict)  # sbatch options, free-form
    array_parallelism: int | None = None
    name: str | None = None
    comment: str | None = None
    signal_delay_s: int | None = None
    max_timeouts: int | None = None
    wait: bool = True
    cpus_per_task: int | None = None
    group: str = "shape"
    group_minutes: float | None = None
    group_size: int | None = None
    deadline_s: float | None = None

    def __post_init__(self) -> None:
        if self.backend not in CONFS:
            raise ValueError(f"backend {self.backend!r} is not allowed; allowed: {', '.join(CONFS)}")
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
        check_bounds(self, {**dict.fromkeys(_COUNTS, 1), **dict.fromkeys(_AMOUNTS, 0)})
        if self.mem_gb is not None and not self.mem_gb > 0:
            raise ValueError(f"mem_gb must be > 0, got {self.mem_gb}")
        if self.group not in GROUPINGS:
            raise ValueError(f"group {self.group!r} is not allowed; allowed: {', '.join(GROUPINGS)}")
        for key in ("group_minutes", "deadline_s"):
            value = getattr(self, key)
            if value is not None and not 0 < value <= MAX_TIMEOUT_MIN * 60:
                raise ValueError(f"{key} must be > 0 and at most 30 days, got {value}")

    @property
    def group_limit_s(self) -> float:
        """The estimated seconds one job's group may hold: ``group_minutes``, else half the time
        limit (the rest is the estimate's margin)."""
        return 60 * (self.group_minutes if self.group_minutes is not None else self.timeout_min / 2)

    def changed(self, changes: Mapping[str, object]) -> LaunchSettings:
        """These settings with some launcher keys changed (a resubmission's ``--set``); the backend
        and preset stay. A ValueError names an unknown key or a value of the wrong type."""
        allowed = [k for k in allowed_keys(self.backend) if k != "backend"]
        unknown = sorted(set(changes) - set(allowed))
        if unknown:
            raise ValueError(
                f"unknown launcher key(s) {', '.join(unknown)} for the {self.backend} launcher; "
                f"allowed: {', '.join(allowed)}"
            )
        try:
            return LaunchSettings.from_json({**self.to_json(), **changes})
        except RecordError as err:
            raise ValueError(f"launcher setting {err}") from None


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
    unknown = sorted(set(reused) - set(SITE_KEYS))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not a key to reuse; allowed: {', '.join(SITE_KEYS)}")
    if recorded.get("backend") != today.backend:
        raise ValueError(
            f"the ledger records backend {str(recorded.get('backend'))[:40]!r}, not {today.backend!r}"
        )
    mine = today.to_json()
    values = {**recorded, **{k: mine[k] for k in SITE_KEYS if k not in reused}}
    try:
        return LaunchSettings.from_json(values)
    except RecordError as err:
        raise ValueError(f"recorded launcher setting {err}") from None


def allowed_keys(backend: str) -> list[str]:
    """The launcher keys of one backend that its jobs run with (not Hydra's ``_target_``, nor the
    sweep's own ``SWEEP_KEYS``)."""
    return [f.name for f in fields(CONFS[backend]) if f.name != "_target_" and f.name not in SWEEP_KEYS]


def effective(
    launcher: Mapping[str, Any], cluster: Mapping[str, Any] | None, presets: list[str]
) -> LaunchSettings:
    """The settings a sweep runs with: the launcher config's keys, preset values filled in where the
    launcher left ``None``, then submitit's defaults."""
    launcher = {k: v for k, v in launcher.items() if k not in SWEEP_KEYS}
    backend = launcher.get("backend")
    if backend not in CONFS:
        target = str(launcher.get("_target_", "?")).rsplit(".", 1)[-1]
        raise ValueError(f"launcher {target} is not allowed; allowed: hydra/launcher={'|'.join(CONFS)}")
    allowed = allowed_keys(backend)
    unknown = sorted(set(launcher) - set(allowed) - {"_target_"})
    if unknown:
        raise ValueError(
            f"unknown launcher key(s) {', '.join(unknown)} for hydra/launcher={backend}; "
            f"allowed: {', '.join(allowed)}"
        )
    settings = {k: launcher.get(k) for k in allowed}
    if backend == "local":
        if cluster is not None:
            raise ValueError(
                f"cluster={cluster.get('name')} is a Slurm preset: add hydra/launcher=slurm "
                "(the local launcher runs on this machine)"
            )
        return _settings({**settings, "cluster": LOCAL_CLUSTER, "gpus": None})
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
    for key, value in _FALLBACK.items():
        if settings[key] is None:
            settings[key] = value
    return _settings({**settings, "cluster": cluster["name"], "gpus": bool(cluster.get("gpus"))})


def _settings(values: dict[str, object]) -> LaunchSettings:
    try:
        return LaunchSettings.from_json(values)
    except RecordError as err:
        raise ValueError(f"launcher setting {err}") from None
