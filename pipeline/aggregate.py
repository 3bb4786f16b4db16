"""``python -m pipeline.aggregate DATASET_DIR``: publish a dataset's shards as CSV, JSON and figures.

Skipped shards and missing executions are listed on stderr (and in the JSON meta); they do not make
the command fail, since a partial dataset is still worth publishing. A dataset without any shard
does (exit 1), as does bad input (exit 2: a path that is no directory, an ``--out`` that is a file).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipeline.data.dataset import Dataset
from pipeline.report import aggregate


def _problem(dataset: Path, out: Path | None, workers: int) -> str | None:
    """Why these arguments cannot work, or None."""
    try:
        Dataset.existing(dataset)
    except ValueError as err:
        return str(err)
    if out is not None and out.exists() and not out.is_dir():
        return f"--out {out} is a file, not a directory"
    if workers < 1:
        return f"--workers {workers}: must be at least 1"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.aggregate", description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="dataset directory holding shards/ (and ledger/)")
    parser.add_argument("--out", type=Path, default=None, help="where to write the files (default: dataset)")
    parser.add_argument("--no-figures", action="store_true", help="write only the CSV and JSON files")
    parser.add_argument("--workers", type=int, default=8, help="threads reading shards (default 8)")
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="compute the full-scale estimates not yet kept (seconds of CPU each); without it their "
        "columns are empty",
    )
    args = parser.parse_args(argv)
    problem = _problem(args.dataset, args.out, args.workers)
    if problem is not None:
        print(f"pipeline.aggregate: {problem}", file=sys.stderr)
        return 2
    if not Dataset(args.dataset).shard_files():
        print(f"pipeline.aggregate: {args.dataset} holds no shards: nothing to publish", file=sys.stderr)
        return 1
    try:
        result = aggregate(
            args.dataset, args.out, figures=not args.no_figures, workers=args.workers, estimate=args.estimate
        )
    except ValueError as exc:
        print(f"pipeline.aggregate: {exc}", file=sys.stderr)
        return 2
    for skipped in result.skipped:
        print(f"skipped {skipped.path}: {skipped.reason}", file=sys.stderr)
    if result.missing:
        print(f"missing {len(result.missing)} execution(s): {' '.join(result.missing)}", file=sys.stderr)
    counts = result.document.meta.counts
    print(
        f"{counts.executions} executions, {counts.matched_workloads} matched workloads, "
        f"{counts.pairs} pairs; wrote {', '.join(str(f) for f in result.files)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
