"""``python -m pipeline.resubmit DATASET_DIR``: run again what has no valid shard.

Only executions that are failed or missing (see ``pipeline.status``) go out, each as a new attempt
with the overrides and the launcher settings its newest submission recorded (timeout, memory,
grouping, ...; on Slurm without waiting). What a dataset records is data, never a command: the
options that reach the job's sbatch script as text (partition, account, exclude, setup lines, srun
arguments, additional sbatch parameters, ...) come from today's configuration (the launcher's
defaults and today's cluster preset), never from the dataset, unless ``--reuse-recorded KEY`` names
one (what it reuses is shown first). An operator changes settings with ``--set KEY=VALUE`` or the
Hydra spelling ``hydra.launcher.KEY=VALUE``; ``--dry-run`` lists what would go out, with which
settings and what it does not reuse, and submits nothing. Composition, planning and submission run in
this process, so progress shows as it happens. Done, pending and running executions are never
touched, and each attempt is claimed before it goes out (:mod:`pipeline.data.claims`), so running it
twice at once, or while a sweep is still going, never duplicates work. It needs only the dataset
folder: the process that launched the sweep may be long gone.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from hydra.errors import HydraException
from omegaconf.errors import OmegaConfBaseException

from pipeline.base.exits import dataset_parser, refuse
from pipeline.base.printable import printable
from pipeline.bench.spec import JobSpec
from pipeline.compose import composed
from pipeline.compose.errors import one_line
from pipeline.compose.launcher import cluster_of, launcher_settings
from pipeline.compose.select import compose_each
from pipeline.data.comparable import KEYS, text
from pipeline.data.dataset import Dataset
from pipeline.data.scan import dataset_settings
from pipeline.launch.backends import backend
from pipeline.launch.groups import check_limits
from pipeline.launch.jobs import FAILED, Outcome
from pipeline.launch.plan import Composed, plan
from pipeline.launch.settings import SITE_KEYS, LaunchSettings, launcher_of, resubmission
from pipeline.launch.sweep import check_folders, check_shared, claimed, other_writers, run
from pipeline.matrix import REPORT, Suite
from pipeline.survey import MISSING, ExecutionStatus, dataset_survey

CHOICES = (FAILED, MISSING)
# Set by resubmission itself: the dataset at hand, the execution's own workload and variant, its
# launcher, and the suite the dataset recorded (``compose_each``).
_SET_HERE = (
    "dataset_dir=",
    "workload=",
    "variant=",
    "hydra/launcher=",
    "suite=",
    "suite.",
    "hydra.searchpath=",
)
_HYDRA_KEY = "hydra.launcher."


@dataclass(frozen=True)
class Batch:
    """Executions that go out together: one backend, the same settings; their composed jobs, their
    states before, and (once planned) their plan; ``unused``: what their records hold that today's
    configuration replaces (key -> the recorded value), ``reused``: what they reuse as recorded."""

    settings: LaunchSettings
    jobs: list[Composed]
    was: list[ExecutionStatus]
    planned: tuple[JobSpec, ...] = ()
    unused: dict[str, object] | None = None
    reused: dict[str, object] | None = None


def job_overrides(
    dataset: Path, status: ExecutionStatus, suite: Suite
) -> tuple[dict[str, object], list[str]]:
    """The launch settings (their recorded JSON) and overrides of the execution's newest submission
    (or of the sweep that meant it, when it never went out), with its own workload and variant (from
    its id, in the dataset's ``suite``) and the dataset at hand (it may have moved since). A recorded
    override that sets Hydra's own keys (its launcher, its folders) is refused: a dataset chooses no
    part of how a job runs."""
    record, intent = status.submitted, status.intended
    intention = None if intent is None else intent.intention(status.execution_id)
    if record is None and (intent is None or intention is None):
        raise ValueError(
            f"{status.execution_id}: no 'submitted' or 'intended' record in the ledger to rerun it from"
        )
    execution = suite.execution(status.execution_id)
    if execution is None:
        raise ValueError(f"{status.execution_id!r} is not an execution of the matrix (suite {suite.name})")
    if record is not None:
        settings, recorded = record.settings, list(record.overrides)
    else:
        assert intent is not None and intention is not None
        settings, recorded = intent.settings, list(intention.overrides)
    others = [o for o in recorded if not o.startswith(_SET_HERE)]
    for override in others:
        if override.lstrip("+~").split("=", 1)[0].split(".", 1)[0].split("/", 1)[0] == "hydra":
            raise ValueError(
                f"{status.execution_id}: the ledger records the override {override[:80]!r}, which sets "
                "Hydra's own configuration; a resubmission takes none from a dataset"
            )
    own = [f"workload={execution.workload.name}", f"variant={execution.variant.name}"]
    return settings, [*own, *others, f"dataset_dir={Dataset(dataset).root}"]


def batches(
    dataset: Path,
    chosen: list[ExecutionStatus],
    changes: dict[str, object],
    reuse: tuple[str, ...] = (),
) -> list[Batch]:
    """Plan the resubmission of ``chosen`` (nothing is submitted): each with the settings its newest
    submission recorded, its site options and shell lines from today's configuration (but the keys
    of ``reuse``, as recorded), as its backend resubmits them, then ``changes``."""
    fixed = dataset_settings(Dataset(dataset)) if chosen else None
    suite = REPORT if fixed is None else fixed.suite  # the dataset's, wherever its file went
    by_backend: dict[str, list[tuple[ExecutionStatus, dict[str, object], list[str]]]] = {}
    for status in chosen:
        recorded, overrides = job_overrides(dataset, status, suite)
        by_backend.setdefault(str(recorded.get("backend")), []).append((status, recorded, overrides))
    groups: dict[str, Batch] = {}  # by the settings' JSON (a settings object holds a mapping)
    for name, members in by_backend.items():
        runner = backend(name)
        try:
            launcher = [f"hydra/launcher={launcher_of(name)}", f"hydra.launcher.backend={name}"]
            configs = compose_each([o for _, _, o in members], launcher, suite.definition())
            todays = [launcher_settings(cfg.hydra.launcher, cluster_of(cfg)) for cfg in configs]
        except (HydraException, OmegaConfBaseException) as err:
            raise ValueError(f"the ledger's overrides do not compose today: {one_line(err)}") from None
        for (status, recorded, overrides), cfg, today in zip(members, configs, todays, strict=True):
            settings = runner.for_resubmission(resubmission(recorded, today, reuse)).changed(changes)
            unused = {k: recorded[k] for k in SITE_KEYS if k not in reuse and _differs(recorded, today, k)}
            reused = {k: recorded.get(k) for k in reuse if recorded.get(k) not in (None, [], {})}
            key = json.dumps([settings.to_json(), unused, reused], sort_keys=True, default=str)
            batch = groups.setdefault(key, Batch(settings, [], [], unused=unused, reused=reused))
            batch.jobs.append(composed(overrides, cfg))
            batch.was.append(status)
    planned = [replace(b, planned=tuple(plan(b.jobs, b.settings))) for b in groups.values()]
    for b in planned:
        check_limits(list(b.planned), b.settings)
    return planned


def _differs(recorded: dict[str, object], today: LaunchSettings, key: str) -> bool:
    """Whether a recorded site value is set and not today's (``[]``, ``{}`` and None are unset)."""
    value = recorded.get(key)
    mine = today.to_json()[key]
    return value not in (None, [], {}) and json.dumps(value, sort_keys=True) != json.dumps(
        mine, sort_keys=True
    )


def check_changes(dataset: Path, statuses: list[ExecutionStatus], changes: dict[str, object]) -> None:
    """Refuse ``changes`` that no resubmission could take, whatever is chosen: a comparable setting of
    the dataset (a resubmission keeps them), or a launcher value the recorded settings refuse."""
    comparable = [k for k in changes if k in KEYS]
    if comparable:
        fixed = dataset_settings(Dataset(dataset))
        held = (
            "" if fixed is None else f" ({' '.join(f'{k}={text(fixed.value(k))}' for k in comparable)} here)"
        )
        asked = " ".join(f"{k}={text(changes[k])}" for k in comparable)
        raise ValueError(
            f"{', '.join(comparable)}: comparable settings of the dataset{held}, which a resubmission keeps; "
            f"run {asked} into a new dataset_dir with python -m pipeline.run"
        )
    recorded = [r.settings for s in statuses for r in (s.submitted, s.intended) if r is not None]
    for settings in {json.dumps(r, sort_keys=True): r for r in recorded}.values():
        numbers = {k: v for k, v in settings.items() if k not in SITE_KEYS}  # the rest is today's
        try:
            kept = LaunchSettings.from_json(numbers)
        except ValueError as err:
            raise ValueError(f"recorded launcher setting {err}") from None
        kept.changed(changes)


def parse_changes(assignments: list[str]) -> dict[str, object]:
    """``KEY=VALUE`` or ``hydra.launcher.KEY=VALUE`` -> {KEY: VALUE}, VALUE read as YAML (7, true,
    [a, b], {comment: x})."""
    changes = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        key = key.lstrip("+").removeprefix(_HYDRA_KEY)
        if not sep or not key:
            raise ValueError(f"{assignment!r} is not KEY=VALUE (or hydra.launcher.KEY=VALUE)")
        try:
            changes[key] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ValueError(f"{assignment!r}: the value is not YAML") from None
    return changes


def failed_nodes(statuses: list[ExecutionStatus], exclude: str | None) -> str | None:
    """Slurm's ``--exclude`` list: ``exclude`` and every node a failed attempt of ``statuses`` ran on."""
    nodes = [n for n in (exclude or "").split(",") if n]
    nodes += sorted({n for s in statuses if s.state == FAILED for n in s.nodes} - set(nodes))
    return ",".join(nodes) or None


def resubmit(
    dataset: Path,
    only: str | None = None,
    changes: dict[str, object] | None = None,
    dry_run: bool = False,
    exclude_failed_nodes: bool = False,
    reuse: tuple[str, ...] = (),
) -> tuple[list[ExecutionStatus], list[Outcome], int, int]:
    """Submit every failed and/or missing execution again (or, dry, list them): those chosen, the
    outcomes of those that ran (none on a scheduler, which does not wait), how many went out (or,
    dry, would) and how many were refused (a folder of theirs is not the dataset's to write). With
    ``exclude_failed_nodes`` the new attempts keep off every node a failed attempt ran on; ``reuse``
    names site keys taken from the dataset's records rather than today's."""
    if only is not None and only not in CHOICES:
        raise ValueError(f"--only {only!r} is not allowed; allowed: {', '.join(CHOICES)}")
    wanted = {only} if only else set(CHOICES)
    statuses, skipped = dataset_survey(dataset)
    for s in skipped:
        print(printable(f"skipped {s.path}: {s.reason}"), file=sys.stderr)
    check_changes(dataset, statuses, changes or {})
    chosen = [s for s in statuses if s.state in wanted]
    planned = batches(dataset, chosen, changes or {}, reuse)  # all of it planned before anything is submitted
    if exclude_failed_nodes:
        if any(batch.settings.on_this_host for batch in planned):
            raise ValueError("--exclude-failed-nodes needs a Slurm dataset: the local launcher has no nodes")
        planned = [
            replace(b, settings=replace(b.settings, exclude=failed_nodes(statuses, b.settings.exclude)))
            for b in planned
        ]
    for batch in planned:  # what runs from the dataset's records, shown before anything goes out
        for key, value in (batch.reused or {}).items():
            print(
                printable(
                    f"reusing the dataset's recorded {key}: {json.dumps(value)} (--reuse-recorded {key})"
                )
            )
    outcomes: list[Outcome] = []
    sent = refused = 0
    for batch in planned:
        shown = " ".join(
            f"{k}={v}" for k, v in sorted(batch.settings.to_json().items()) if v not in (None, [], {})
        )
        was = {p.execution_id: w.state for p, w in zip(batch.planned, batch.was, strict=True)}
        unused = [
            f"  recorded {k}={json.dumps(v)} not reused (today's configuration instead; --reuse-recorded {k} "
            "reuses it)"
            for k, v in (batch.unused or {}).items()
        ]
        if dry_run:
            check_shared([batch.planned[0].dataset])
            going, writers = 0, other_writers(list(batch.planned))
            for p in batch.planned:
                try:
                    check_folders(p)
                except ValueError as err:
                    print(printable(f"resubmit: {p.execution_id} would not be written ({err}): skipped"))
                    refused += 1
                    continue
                if writers[id(p)]:
                    print(printable(f"resubmit: {p.execution_id} is {writers[id(p)]}: skipped"))
                    continue
                print(f"would resubmit {p.execution_id} as attempt {p.attempt} (was {was[p.execution_id]})")
                going += 1
            if going:
                for line in [f"  launcher: {shown}", *unused]:
                    print(printable(line), flush=True)
            sent += going
            continue
        # what another writer took meanwhile (a sweep still going, a second resubmission) stays its
        with claimed(list(batch.planned), resume=True) as sweep:
            for line in sweep.skips("resubmit"):
                print(line, flush=True)
            for p in sweep.to_run:
                print(f"resubmitting {p.execution_id} as attempt {p.attempt} (was {was[p.execution_id]})")
            if sweep.to_run:
                for line in [f"  launcher: {shown}", *unused]:
                    print(printable(line), flush=True)
            sent += len(sweep.to_run)
            refused += len(sweep.unwritable)
            outcomes += [o for o in run(sweep.to_run, batch.settings) if o.ended]
    return chosen, outcomes, sent, refused


def main(argv: list[str] | None = None) -> int:
    parser = dataset_parser("pipeline.resubmit", __doc__)
    parser.add_argument(
        "launcher_keys", nargs="*", metavar="hydra.launcher.KEY=VALUE", help="change a launcher setting"
    )
    parser.add_argument("--only", choices=CHOICES, help="resubmit only failed or only missing executions")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="change a launcher setting"
    )
    parser.add_argument("--dry-run", action="store_true", help="list what would go out; submit nothing")
    parser.add_argument(
        "--exclude-failed-nodes",
        action="store_true",
        help="keep new attempts off the nodes failed attempts ran on (Slurm --exclude)",
    )
    parser.add_argument(
        "--reuse-recorded",
        action="append",
        default=[],
        choices=SITE_KEYS,
        metavar="KEY",
        help="take this site option or shell line (setup, srun_args, additional_parameters, partition, ...) "
        "from the dataset's records, as recorded, instead of today's configuration; shown before it runs",
    )
    args = parser.parse_intermixed_args(argv)
    try:
        changes = parse_changes([*args.set, *args.launcher_keys])
        reused = tuple(dict.fromkeys(args.reuse_recorded))
        chosen, outcomes, sent, refused = resubmit(
            Path(args.dataset_dir), args.only, changes, args.dry_run, args.exclude_failed_nodes, reused
        )
    except (ValueError, RuntimeError) as err:
        return refuse("pipeline.resubmit", err)
    others = len(chosen) - sent - refused
    left = [f"{n} {what}" for n, what in ((others, "another writer's"), (refused, "refused")) if n]
    also = f" ({', '.join(left)}, of the {len(chosen)} failed or missing)" if left else ""
    print(f"{sent} execution(s) {'would be ' if args.dry_run else ''}resubmitted{also}")
    return 1 if refused or any(o.failed for o in outcomes) else 0
