"""``python -m pipeline.status DATASET_DIR [--state STATE] [--json]``: one line per execution in
aligned columns (state, execution, attempt, job, then the shard, the reason, the nodes and log of a
failure), then the counts; ``--json`` prints the same as one JSON document.

Exits 1 while anything is failed or missing (so scripts can wait on it), 2 on bad input.
"""

from __future__ import annotations

import json
import sys
from collections import Counter

from pipeline.base.exits import dataset_parser, refuse
from pipeline.base.printable import printable
from pipeline.launch.jobs import FAILED
from pipeline.survey import MISSING, STATES, ExecutionStatus, dataset_survey


def _columns(s: ExecutionStatus) -> list[str]:
    attempt = f"attempt {s.attempt}" if s.attempt is not None else "-"
    job = f"job {s.job_id}" if s.job_id else "-"
    tail = [s.detail] if s.detail else []
    if s.nodes:
        tail.append(f"nodes: {','.join(s.nodes)}")
    if s.state in (FAILED, MISSING) and s.submitted is not None:
        tail.append(f"log: {s.log if s.log is not None else 'missing'}")
    return [s.state, s.execution_id, attempt, job, "  ".join(tail)]


def lines(statuses: list[ExecutionStatus]) -> list[str]:
    """The status lines, each column as wide as its widest entry."""
    rows = [_columns(s) for s in statuses]
    widths = [max((len(r[i]) for r in rows), default=0) for i in range(4)]
    return ["  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[4]]).rstrip() for r in rows]


def as_json(s: ExecutionStatus) -> dict[str, object]:
    return {
        "execution_id": s.execution_id,
        "state": s.state,
        "attempt": s.attempt,
        "job_id": s.job_id,
        "backend": s.submitted.backend if s.submitted else None,
        "detail": s.detail,
        "nodes": list(s.nodes),
        "log": None if s.log is None else str(s.log),
    }


def main(argv: list[str] | None = None) -> int:
    parser = dataset_parser("pipeline.status", __doc__)
    parser.add_argument("--state", choices=STATES, action="append", help="show only executions in STATE")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of lines")
    args = parser.parse_args(argv)
    try:
        statuses, skipped = dataset_survey(args.dataset_dir)
    except (ValueError, RuntimeError) as err:
        return refuse("pipeline.status", err)
    for s in skipped:
        print(printable(f"skipped {s.path}: {s.reason}"), file=sys.stderr)
    counts = Counter(s.state for s in statuses)
    shown = [s for s in statuses if not args.state or s.state in args.state]
    if args.json:
        document = {"executions": [as_json(s) for s in shown], "counts": {k: counts[k] for k in STATES}}
        print(json.dumps(document, indent=2))
    else:
        for line in lines(shown):
            print(printable(line))  # ids, reasons and hosts come from the dataset
        print(", ".join(f"{counts[k]} {k}" for k in STATES) + f" of {len(statuses)} executions")
    return 1 if counts[FAILED] or counts[MISSING] else 0
