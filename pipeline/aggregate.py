"""``python -m pipeline.aggregate DATASET_DIR``: publish a dataset's shards as CSV, JSON and figures.

Skipped shards and missing executions are listed on stderr (and in the JSON meta); they do not make
the command fail, since a partial dataset is still worth publishing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.report import aggregate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.aggregate", description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="dataset directory holding shards/ (and ledger/)")
    parser.add_argument("--out", type=Path, default=None, help="where to write the files (default: dataset)")
    parser.add_argument("--no-figures", action="store_true", help="write only the CSV and JSON files")
    parser.add_argument("--workers", type=int, default=8, help="threads reading shards (default 8)")
    args = parser.parse_args(argv)
    try:
        result = aggregate(args.dataset, args.out, figures=not args.no_figures, workers=args.workers)
    except ValueError as exc:
        parser.error(str(exc))
    for skipped in result.skipped:
        print(f"skipped {skipped.path}: {skipped.reason}", file=sys.stderr)
    if result.missing:
        print(f"missing {len(result.missing)} execution(s): {' '.join(result.missing)}", file=sys.stderr)
    counts = result.document["meta"]["counts"]
    print(
        f"{counts['executions']} executions, {counts['matched_workloads']} matched workloads, "
        f"{counts['pairs']} pairs; wrote {', '.join(str(f) for f in result.files)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
