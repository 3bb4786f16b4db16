"""A sweep's plan: every execution validated before any is submitted, and what a backend reports back.

Nothing is submitted unless every job of the sweep is valid (known workload and variant, a scale that
holds its EP degree, a feasible routing plan, a device word that exists). Whether the device is there is
resolved where the job runs: a login node without a GPU submits ``device=cuda`` jobs to GPU nodes.
Planning builds each job's :class:`~pipeline.bench.spec.JobSpec` once; the backend submits it and the
job runs it as it is.
"""

from __future__ import annotations

import math
import re
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from pipeline.base.vocabulary import DEVICES
from pipeline.bench.spec import JobSpec
from pipeline.data import ledger
from pipeline.data.comparable import Comparable
from pipeline.data.dataset import Dataset
from pipeline.data.scan import dataset_settings, scan_shards
from pipeline.launch.jobs import Job, JobState
from pipeline.launch.settings import LaunchSettings
from pipeline.matrix import Execution, suite_of
from pipeline.matrix.scale import Shape, TimingPlan, check_number, resolve

if TYPE_CHECKING:  # the job's modules import torch: planning and ``pipeline.status`` need not
    from pipeline.bench.execute import Summary


@dataclass(frozen=True)
class Outcome:
    """How one execution ended: rank 0's summary or the error; or why it never started (``missing``:
    its job ended first, so status calls it missing) or was left to another writer that took it over
    (``taken``); none of these while it was submitted without being waited for."""

    planned: JobSpec
    summary: Summary | None
    error: str | None
    missing: str | None = None
    taken: str | None = None

    @property
    def ended(self) -> bool:
        return any(x is not None for x in (self.summary, self.error, self.missing, self.taken))

    @property
    def failed(self) -> bool:
        """Whether it failed or never ran here (the sweep ends in exit status 1, as status does)."""
        return self.error is not None or self.missing is not None


class Backend(Protocol):
    """What runs a sweep's jobs: local processes or a scheduler. ``run`` yields one outcome per
    execution in the order they end (or at once, unfinished, when the settings do not wait), and
    calls ``started`` as each execution starts running."""

    name: str

    def run(
        self, planned: list[JobSpec], settings: LaunchSettings, started: Callable[[JobSpec], None]
    ) -> Iterator[Outcome]: ...

    def job_states(self, jobs: list[Job]) -> dict[str, JobState]: ...

    def for_resubmission(self, settings: LaunchSettings) -> LaunchSettings:
        """The settings a resubmission runs with (e.g. a scheduler's without waiting)."""
        ...


SEED_LIMIT = 2**32  # the seeds of weights, inputs and routing derive from it (x 1,000,003 + rank: 64 bits)


def validate(config: dict[str, Any]) -> tuple[Execution, Shape, TimingPlan]:
    """The matrix cell, shape and timing of one composed config, every run key checked: the scale's
    keys typed and bounded, the seed, the trace switch, the device word, the dataset folder's type (a
    ValueError names what is wrong); ``python -m pipeline.list`` checks a selection the same way.
    (Whether the routing plans are feasible, the plan checks: building them takes seconds per
    execution at full scale.)"""
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
    if config.get("device") not in DEVICES:  # which device exists is the job's host to say
        raise ValueError(f"device {config.get('device')!r}; allowed: {', '.join(DEVICES)}")
    if not isinstance(config.get("dataset_dir"), str):
        raise ValueError(f"dataset_dir must be a path, got {config.get('dataset_dir')!r}")
    return execution, shape, timing


def plan(jobs: list[tuple[list[str], dict[str, Any]]], settings: LaunchSettings) -> list[JobSpec]:
    """Validate every (overrides, resolved config) job to run with ``settings`` and build its spec;
    raise one ValueError, one line, naming every problem: invalid executions (grouped by problem), a
    dataset folder that cannot be written, two jobs of one execution, a sweep whose comparable
    settings are not those of its dataset."""
    errors: dict[str, list[str]] = {}
    checked = []
    for overrides, config in jobs:
        try:
            execution, shape, timing = validate(config)
            _routing_plans(shape, config["seed"])
            _device_here(config, settings)
        except ValueError as err:
            errors.setdefault(str(err), []).append(_job_name(overrides))
            continue
        checked.append((execution, shape, timing, config, overrides))
    if errors:
        raise ValueError("nothing was launched; " + "; ".join(_invalid(errors, len(jobs))))
    datasets = {d: Dataset.writable(d) for d in dict.fromkeys(c["dataset_dir"] for _, _, _, c, _ in checked)}
    check_distinct([(o, str(datasets[c["dataset_dir"]].root), e.execution_id) for e, _, _, c, o in checked])
    for dataset in dict.fromkeys(datasets.values()):
        mine = [c for _, _, _, c, _ in checked if datasets[c["dataset_dir"]] == dataset]
        check_settings(dataset, [Comparable.of_config(c) for c in mine])
    return [
        JobSpec(
            execution=e,
            shape=s,
            timing=t,
            seed=c["seed"],
            device=c["device"],
            dataset=datasets[c["dataset_dir"]],
            attempt=ledger.next_attempt(datasets[c["dataset_dir"]], e.execution_id),
            backend=settings.backend,
            cluster=settings.cluster,
            config={**c, "dataset_dir": str(datasets[c["dataset_dir"]].root)},
            overrides=o,
            check=suite_of(c).check,
            keep_traces=c.get("keep_traces", False),
        )
        for e, s, t, c, o in checked
    ]


def check_distinct(jobs: list[tuple[list[str], str, str]]) -> None:
    """Refuse two jobs of (overrides, dataset folder, execution id) that would be one execution of
    one dataset: an execution is its matrix cell, so a setting outside the matrix (``seed=0,1``,
    ``scale.tokens=16,32``) makes no new one. Each such setting goes into a dataset of its own."""
    seen: dict[tuple[str, str], list[str]] = {}
    for overrides, dataset, execution_id in jobs:
        first = seen.setdefault((dataset, execution_id), overrides)
        if first is not overrides:
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


def _routing_plans(shape: Shape, seed: int) -> None:
    """Plan every rank's routing once, so that a workload its ranks cannot realize is refused here."""
    from pipeline.bench.work import routing_plans

    routing_plans(shape, seed)


def _device_here(config: dict[str, Any], settings: LaunchSettings) -> None:
    """Refuse what cannot run where the jobs go: a device the local host lacks, and ``scale=full`` on
    CPUs unless ``device=cpu`` asks for it (the default scale would start up to 64 CPU ranks at
    D = 7,168 on a machine without a GPU)."""
    from pipeline.bench.distributed import resolve_device

    device = config["device"]
    if settings.backend == "local":
        gpus = resolve_device("auto") == "cuda"
        resolve_device(device)  # the local jobs run on this host: it says whether the device exists
    else:
        gpus = bool(settings.gpus)
    if config["scale"]["name"] == "full" and device == "auto" and not gpus:
        where = (
            "this host has no GPU"
            if settings.backend == "local"
            else f"cluster {settings.cluster} has no GPUs"
        )
        raise ValueError(
            f"scale=full but {where}: it would run each execution on CPU ranks at the report's shape "
            "(hours each); choose scale=cpu or scale=ci, or ask for it with device=cpu"
        )


def _job_name(overrides: list[str]) -> str:
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


def intents(planned: list[JobSpec], settings: LaunchSettings) -> dict[Dataset, ledger.Intended]:
    """The intent of a sweep in each of its datasets: every execution it means there, with its
    overrides, the launch settings and the comparable settings (one per dataset: the plan checked)."""
    by_dataset: dict[Dataset, list[JobSpec]] = {}
    for p in planned:
        by_dataset.setdefault(p.dataset, []).append(p)
    return {
        dataset: ledger.Intended(
            executions=tuple(ledger.Intention(p.execution_id, tuple(p.overrides)) for p in mine),
            settings=settings.to_json(),
            comparable=Comparable.of_config(mine[0].config),
        )
        for dataset, mine in by_dataset.items()
    }


def resumed(planned: list[JobSpec]) -> tuple[list[JobSpec], list[JobSpec]]:
    """(to run, done already) of ``planned``: done is an execution with a valid shard in its dataset,
    of the dataset's settings, which the plan made sure the sweep has (what ``--resume`` skips)."""
    done = {d: set(scan_shards(d).newest) for d in dict.fromkeys(p.dataset for p in planned)}
    return (
        [p for p in planned if p.execution_id not in done[p.dataset]],
        [p for p in planned if p.execution_id in done[p.dataset]],
    )


def resource_shape(ranks: int, tasks_per_node: int | None) -> tuple[int, int]:
    """(nodes, tasks per node) holding ``ranks`` tasks, at most ``tasks_per_node`` per node."""
    per_node = ranks if tasks_per_node is None else min(ranks, tasks_per_node)
    if per_node < 1 or ranks % per_node:
        raise ValueError(f"{ranks} ranks cannot be spread evenly at {tasks_per_node} tasks per node")
    return math.ceil(ranks / per_node), per_node


def submitted(
    p: JobSpec,
    job_id: str,
    settings: LaunchSettings,
    *,
    attempt: int | None = None,
    requeued_from: int | None = None,
) -> ledger.Submitted:
    """The ledger's record of one submission of ``p`` (as ``attempt`` when a requeue renumbers it)."""
    attempt = p.attempt if attempt is None else attempt
    dataset = p.dataset
    return ledger.Submitted(
        execution_id=p.execution.execution_id,
        attempt=attempt,
        job_id=str(job_id),
        overrides=p.overrides,
        backend=settings.backend,
        cluster=settings.cluster,
        log_dir=dataset.relative(dataset.log_dir(p.execution.execution_id, attempt)),
        requeued_from=requeued_from,
        settings=settings.to_json(),
        owner=p.owner,
        host=socket.gethostname() if settings.backend == "local" else None,  # a local job runs here
    )


def cause(err: Exception) -> str:
    """What went wrong, in one line, from an error submitit raised: the last line of the task's
    traceback that it quotes (``ValueError: ...``), else its first line (a job that left no result)."""
    text = str(err)
    trace = re.search(r"with trace:\n-+\n(.*?)\n-+\n", text, re.S)
    if trace is not None:
        return first_line(trace.group(1).strip().splitlines()[-1])
    lines = text.strip().splitlines()
    if type(err).__name__ == "UncompletedJobError":  # "Job J (task: 0) with path P" / "has not produced..."
        return " ".join(line.strip() for line in lines[:2])
    return f"{type(err).__name__}: {first_line(text)}"


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else "no reason given"
