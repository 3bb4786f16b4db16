"""``python -m pipeline.resubmit DATASET_DIR [--only failed|missing]``: run again what has no shard.

Only executions that are failed or missing (see ``pipeline.status``) go out, each as a new attempt
through ``pipeline.run`` with the overrides the ledger recorded for it, on the launcher it used (on
Slurm without waiting). Done, pending and running executions are never touched, so running it twice,
or while a sweep is still going, never duplicates work. It needs only the dataset folder: the process
that launched the sweep may be long gone.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from pipeline.data.dataset import Dataset
from pipeline.launch.backends import backend
from pipeline.launch.jobs import FAILED
from pipeline.matrix import EXECUTION_BY_ID, Execution
from pipeline.status import MISSING, ExecutionStatus, dataset_status

CHOICES = (FAILED, MISSING)
# Set by resubmission itself: the dataset at hand, the execution's own workload and variant, its launcher.
_SET_HERE = ("dataset_dir=", "workload=", "variant=", "hydra/launcher=")


def run_commands(
    dataset: Path, chosen: list[ExecutionStatus]
) -> list[tuple[list[ExecutionStatus], list[str]]]:
    """``pipeline.run`` command lines that submit these executions again, each with those it covers.

    Every command names its workloads and its variant explicitly (taken from the execution ids), so a
    sweep selects exactly the chosen executions and never falls back to the default sweep of the whole
    matrix, and writes to ``dataset`` even if the folder has moved since. Executions recorded with the
    same launcher, variant and other overrides share one command.
    Scheduled jobs go out without waiting (the backend says how); local ones run here, one after another.
    """
    groups: dict[tuple[str, ...], list[tuple[ExecutionStatus, Execution]]] = {}
    for status in chosen:
        record = status.submitted
        if record is None:
            raise ValueError(f"{status.execution_id}: no 'submitted' record in the ledger to rerun it from")
        if status.execution_id not in EXECUTION_BY_ID:
            raise ValueError(f"{status.execution_id!r} is not an execution of the matrix")
        execution = EXECUTION_BY_ID[status.execution_id]
        others = [o for o in record.overrides if not o.startswith(_SET_HERE)]
        others += [f"dataset_dir={Dataset(dataset).root}", f"variant={execution.variant.name}"]
        others.append(f"hydra/launcher={record.launcher}")
        others += backend(record.launcher).resubmit_overrides
        groups.setdefault(tuple(others), []).append((status, execution))
    return [
        (
            [status for status, _ in members],
            [sys.executable, "-m", "pipeline.run", "--multirun", *others]
            + ["workload=" + ",".join(e.workload.name for _, e in members)],
        )
        for others, members in groups.items()
    ]


def resubmit(dataset: Path, only: str | None = None) -> list[ExecutionStatus]:
    """Submit every failed and/or missing execution again; return those submitted."""
    if only is not None and only not in CHOICES:
        raise ValueError(f"--only {only!r} is not allowed; allowed: {', '.join(CHOICES)}")
    wanted = {only} if only else set(CHOICES)
    chosen = [s for s in dataset_status(dataset) if s.state in wanted]
    commands = run_commands(dataset, chosen)  # all reproducible before anything is submitted
    for members, command in commands:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            names = ", ".join(s.execution_id for s in members)
            raise RuntimeError(
                f"resubmitting {names} failed (pipeline.run exited {done.returncode}):\n{tail}"
            )
    return chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.resubmit", description=__doc__)
    parser.add_argument("dataset_dir", help="dataset folder holding ledger.jsonl and shards/")
    parser.add_argument("--only", choices=CHOICES, help="resubmit only failed or only missing executions")
    args = parser.parse_args(argv)
    try:
        chosen = resubmit(Path(args.dataset_dir), args.only)
    except (ValueError, RuntimeError) as err:
        print(f"pipeline.resubmit: {err}", file=sys.stderr)
        return 2
    for s in chosen:
        print(f"resubmitted {s.execution_id} (was {s.state}, attempt {s.attempt})")
    print(f"{len(chosen)} execution(s) resubmitted")
    return 0


if __name__ == "__main__":
    sys.exit(main())
