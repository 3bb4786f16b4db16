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

from pipeline.status import MISSING, ExecutionStatus, dataset_status
from pipeline.status.jobs import FAILED

CHOICES = (FAILED, MISSING)


def run_command(status: ExecutionStatus) -> list[str]:
    """The ``pipeline.run`` command line that submits this execution again.

    Slurm jobs go out fire and forget; local ones run here, one after another, like any local sweep.
    """
    record = status.submitted
    if record is None:
        raise ValueError(f"{status.execution_id}: no 'submitted' record in the ledger to reproduce it from")
    overrides = [o for o in record["overrides"] if not o.startswith("hydra/launcher=")]
    launcher = [f"hydra/launcher={record['launcher']}"]
    if record["launcher"] == "slurm":
        launcher.append("hydra.launcher.wait=false")
    return [sys.executable, "-m", "pipeline.run", "--multirun", *overrides, *launcher]


def resubmit(dataset: Path, only: str | None = None) -> list[ExecutionStatus]:
    """Submit every failed and/or missing execution again; return those submitted."""
    if only is not None and only not in CHOICES:
        raise ValueError(f"--only {only!r} is not allowed; allowed: {', '.join(CHOICES)}")
    wanted = {only} if only else set(CHOICES)
    chosen = [s for s in dataset_status(dataset) if s.state in wanted]
    commands = [run_command(s) for s in chosen]  # all reproducible before anything is submitted
    for status, command in zip(chosen, commands, strict=True):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            raise RuntimeError(f"resubmitting {status.execution_id} failed:\n{tail}")
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
