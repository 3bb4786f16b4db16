"""A sweep's plan: every execution validated before any is submitted.

Nothing is submitted unless every job of the sweep is valid (known workload and variant, a scale that
holds its EP degree, a feasible routing plan, a device word that exists). Whether the device is there is
resolved where the job runs: a login node without a GPU submits ``device=cuda`` jobs to GPU nodes.
Planning builds each job's :class:`~pipeline.bench.spec.JobSpec` once; the backend submits it and the
job runs it as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.base.devices import gpus_here, resolve_device_on
from pipeline.base.vocabulary import DEVICES
from pipeline.bench.spec import JobSpec
from pipeline.data import ledger
from pipeline.data.comparable import Comparable
from pipeline.data.dataset import Dataset
from pipeline.data.scan import dataset_settings
from pipeline.launch.settings import LaunchSettings
from pipeline.matrix import Execution, suite_of
from pipeline.matrix.loads import layer_loads
from pipeline.matrix.scale import Shape, TimingPlan, check_number, resolve

SEED_LIMIT = 2**32  # the seeds of weights, inputs and routing derive from it (x 1,000,003 + rank: 64 bits)


@dataclass(frozen=True)
class Composed:
    """One job of a sweep as Hydra composed it (:func:`pipeline.compose.composed`): the overrides that
    select it, and its resolved config without Hydra's own node, which the job records as composed."""

    overrides: tuple[str, ...]
    config: Mapping[str, Any]


@dataclass(frozen=True)
class Checked:
    """A composed job, every run key checked (:func:`validate`): its matrix cell, shape and timing,
    and the scale, seed, device word and dataset folder it names."""

    execution: Execution
    shape: Shape
    timing: TimingPlan
    scale: str
    seed: int
    device: str
    dataset_dir: str


def validate(job: Composed) -> Checked:
    """The matrix cell, shape and timing of one composed job, every run key checked: the scale's
    keys typed and bounded, the seed, the trace switch, the device word, the dataset folder's type (a
    ValueError names what is wrong); ``python -m pipeline.list`` checks a selection the same way.
    (Whether the routing plans are feasible, the plan checks: building them takes seconds per
    execution at full scale.)"""
    config = job.config
    execution, shape, timing = resolve(config)
    seed = config.get("seed")
    check_number("seed", seed, integer=True)
    assert isinstance(seed, int)
    if not 0 <= seed < SEED_LIMIT:
        raise ValueError(
            "seed must be >= 0 and < 2**32 (the seeds of weights, inputs and routing derive from it), "
            f"got {seed}"
        )
    if not isinstance(config.get("keep_traces", False), bool):
        raise ValueError(f"keep_traces must be true or false, got {config.get('keep_traces')!r}")
    device = config.get("device")
    if not isinstance(device, str) or device not in DEVICES:  # which device exists: the job's host says
        raise ValueError(f"device {device!r}; allowed: {', '.join(DEVICES)}")
    dataset_dir = config.get("dataset_dir")
    if not isinstance(dataset_dir, str):
        raise ValueError(f"dataset_dir must be a path, got {dataset_dir!r}")
    return Checked(execution, shape, timing, config["scale"]["name"], seed, device, dataset_dir)


def plan(jobs: list[Composed], settings: LaunchSettings) -> list[JobSpec]:
    """Validate every composed job to run with ``settings`` and build its spec; raise one ValueError,
    one line, naming every problem: invalid executions (grouped by problem), a dataset folder that
    cannot be written, two jobs of one execution, a sweep whose comparable settings are not those of
    its dataset."""
    errors: dict[str, list[str]] = {}
    valid: list[tuple[Composed, Checked]] = []
    for job in jobs:
        try:
            checked = validate(job)
            _routable(checked.shape)
            _device_here(checked, settings)
            _in_this_process(checked.shape, settings)
        except ValueError as err:
            errors.setdefault(str(err), []).append(_job_name(job.overrides))
            continue
        valid.append((job, checked))
    if errors:
        raise ValueError("nothing was launched; " + "; ".join(_invalid(errors, len(jobs))))
    datasets = {d: Dataset.writable(d) for d in dict.fromkeys(c.dataset_dir for _, c in valid)}
    check_distinct(
        [(j.overrides, str(datasets[c.dataset_dir].root), c.execution.execution_id) for j, c in valid]
    )
    for dataset in dict.fromkeys(datasets.values()):
        mine = [j.config for j, c in valid if datasets[c.dataset_dir] == dataset]
        check_settings(dataset, [Comparable.of_config(config) for config in mine])
    return [
        JobSpec(
            execution=c.execution,
            shape=c.shape,
            timing=c.timing,
            seed=c.seed,
            device=c.device,
            dataset=datasets[c.dataset_dir],
            attempt=ledger.next_attempt(datasets[c.dataset_dir], c.execution.execution_id),
            backend=settings.backend,
            cluster=settings.cluster,
            config={**j.config, "dataset_dir": str(datasets[c.dataset_dir].root)},
            overrides=list(j.overrides),
            check=suite_of(j.config).check,
            keep_traces=j.config.get("keep_traces", False),
        )
        for j, c in valid
    ]


def check_distinct(jobs: Sequence[tuple[Sequence[str], str, str]]) -> None:
    """Refuse two jobs of (overrides, dataset folder, execution id) that would be one execution of
    one dataset: an execution is its matrix cell, so a setting outside the matrix (``seed=0,1``,
    ``scale.tokens=16,32``) makes no new one. Each such setting goes into a dataset of its own."""
    seen: dict[tuple[str, str], int] = {}
    for i, (overrides, dataset, execution_id) in enumerate(jobs):
        first = jobs[seen.setdefault((dataset, execution_id), i)][0]
        if seen[dataset, execution_id] != i:
            a = " ".join(o for o in first if o not in overrides) or "(the same overrides)"
            b = " ".join(o for o in overrides if o not in first) or "(the same overrides)"
            raise ValueError(
                f"{a} and {b} both select {execution_id} in {dataset}: a setting outside the matrix "
                "is no new execution; sweep it into one dataset_dir per setting"
            )


def check_settings(dataset: Dataset, settings: list[Comparable]) -> None:
    """Refuse jobs into ``dataset`` whose comparable settings differ from the dataset's (fixed by its
    first sweep) or from each other, naming the differing keys and the way to a new dataset."""
    fixed = dataset_settings(dataset)
    reference = fixed or settings[0]
    for mine in settings:
        keys = mine.differing(reference)
        if keys:
            holder = (
                f"{dataset.root} holds other settings (fixed by its first sweep)"
                if fixed
                else f"the jobs into {dataset.root} differ"
            )
            raise ValueError(
                f"nothing was launched; {holder}: {mine.differences(reference)}; one dataset holds one "
                f"setting of each: run these into a new dataset_dir, or leave {', '.join(keys)} "
                "as the dataset has them"
            )


def _routable(shape: Shape) -> None:
    """Check every layer's loads (:mod:`pipeline.matrix.loads`, no torch), so that a workload its
    ranks cannot realize is refused here."""
    layer_loads(shape)


def _device_here(checked: Checked, settings: LaunchSettings) -> None:
    """Refuse what cannot run where the jobs go: a device the local host lacks, and ``scale=full`` on
    CPUs unless ``device=cpu`` asks for it (the default scale would start up to 64 CPU ranks at
    D = 7,168 on a machine without a GPU)."""
    device = checked.device
    if settings.on_this_host:
        gpus = gpus_here()
        resolve_device_on(device, gpus)  # the jobs run on this host: it says whether the device exists
    else:
        gpus = bool(settings.gpus)
    if checked.scale == "full" and device == "auto" and not gpus:
        where = "this host has no GPU" if settings.on_this_host else f"cluster {settings.cluster} has no GPUs"
        raise ValueError(
            f"scale=full but {where}: it would run each execution on CPU ranks at the report's shape "
            "(hours each); choose scale=cpu or scale=ci, or ask for it with device=cpu"
        )


def _in_this_process(shape: Shape, settings: LaunchSettings) -> None:
    """Refuse an execution of several ranks on the debug backend, which runs one, in this process."""
    if settings.backend == "debug" and shape.ranks > 1:
        raise ValueError(
            f"backend=debug runs one rank, in this process; this execution has {shape.ranks}: add max_ranks=1"
        )


def _job_name(overrides: Sequence[str]) -> str:
    """A job by its matrix choices (``workload=... variant=...``), else by all of its overrides."""
    chosen = [o for o in overrides if o.startswith(("workload=", "variant="))]
    return " ".join(chosen or overrides) or "the default execution"


def _invalid(errors: dict[str, list[str]], total: int) -> list[str]:
    """Each problem once, with the jobs that have it (a few named, the rest counted)."""
    if total == 1:
        return list(errors)
    out = []
    for message, names in errors.items():
        if len(names) == total:
            who = f"all {total} executions"
        else:
            who = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        out.append(f"{who}: {message}")
    return out
