"""``python -m pipeline.status DATASET_DIR``: one line per execution, then the counts.

Exits 1 while anything is failed or missing (so scripts can wait on it), 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from pipeline.launch.jobs import FAILED
from pipeline.status import MISSING, STATES, ExecutionStatus, dataset_status


def _line(s: ExecutionStatus) -> str:
    attempt = f"attempt {s.attempt}" if s.attempt is not None else "-"
    job = f"job {s.job_id}" if s.job_id else "-"
    text = f"{s.state:<8} {s.execution_id}  {attempt}  {job}"
    if s.detail:
        text += f"  {s.detail}"
    if s.nodes:
        text += f"  nodes: {','.join(s.nodes)}"
    if s.state in (FAILED, MISSING) and s.submitted is not None:
        text += f"  log: {s.log if s.log is not None else 'missing'}"
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.status", description=__doc__)
    parser.add_argument("dataset_dir", help="dataset folder holding ledger/ and shards/")
    args = parser.parse_args(argv)
    try:
        statuses = dataset_status(args.dataset_dir)
    except (ValueError, RuntimeError) as err:
        print(f"pipeline.status: {err}", file=sys.stderr)
        return 2
    for s in statuses:
        print(_line(s))
    counts = Counter(s.state for s in statuses)
    print(", ".join(f"{counts[k]} {k}" for k in STATES) + f" of {len(statuses)} executions")
    return 1 if counts[FAILED] or counts[MISSING] else 0


if __name__ == "__main__":
    sys.exit(main())
