"""``python -m pipeline.aggregate DATASET_DIR``: publish a dataset's shards as CSV, JSON and figures.

Skipped shards (unreadable, incomplete, foreign, or set otherwise than the dataset) and missing
executions are listed on stderr (and in the JSON meta); the files are written all the same, since a
partial dataset is still worth publishing. Exit status: 0 when every execution the dataset's sweeps
meant (and every one a skipped file names) has a published row; 1 when one has none, when the
published executions differ in their comparable settings (a dataset from before its sweeps' intents
fixed them), or when the dataset holds no shard at all; 2 for bad input (a path that is no
directory, an --out that cannot be written).
"""

from __future__ import annotations

import sys
from pathlib import Path

from pipeline.data.dataset import Dataset
from pipeline.exits import BAD_INPUT, FAILED, OK, ArgumentParser, help_text, prog, run_command
from pipeline.folders import check_writable
from pipeline.report import Aggregate, aggregate
from pipeline.report.provenance import mixed_text


def _problem(dataset: Path, out: Path | None, workers: int) -> str | None:
    """Why these arguments cannot work, or None."""
    try:
        Dataset.existing(dataset)
    except ValueError as err:
        return str(err)
    if out is not None:
        try:
            check_writable(out)
        except ValueError as err:
            return f"--out {err}"
    if workers < 1:
        return f"--workers {workers}: must be at least 1"
    return None


def unpublished(result: Aggregate) -> list[str]:
    """Executions without a published row that should have one: meant by a sweep of the dataset (its
    ledger), or named by a shard file that was skipped."""
    meant = set(result.missing) if result.document.meta.launched.source == "ledger" else set()
    published = {str(r["execution_id"]) for r in result.document.executions}
    return sorted((meant | {s.execution_id for s in result.skipped}) - published)


def _cannot_estimate() -> str | None:
    """Why estimates cannot be computed here (the fake CUDA shim cannot be built), or None; building
    it now, once, if it is missing."""
    from pipeline.estimate.fake_cuda import FakeCudaError, prepare

    try:
        prepare()
    except FakeCudaError as err:
        return str(err)
    return None


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog=prog("pipeline.aggregate"), description=help_text(__doc__ or "").splitlines()[0]
    )
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
        return BAD_INPUT
    if not Dataset(args.dataset).shard_files():
        print(f"pipeline.aggregate: {args.dataset} holds no shards: nothing to publish", file=sys.stderr)
        return FAILED
    if args.estimate and (reason := _cannot_estimate()):
        print(
            f"pipeline.aggregate: --estimate: {reason}; publishing the kept estimates only", file=sys.stderr
        )
        args.estimate = False
    try:
        result = aggregate(
            args.dataset, args.out, figures=not args.no_figures, workers=args.workers, estimate=args.estimate
        )
    except ValueError as exc:
        print(f"pipeline.aggregate: {exc}", file=sys.stderr)
        return BAD_INPUT
    for skipped in result.skipped:
        print(f"skipped {skipped.path}: {skipped.reason}", file=sys.stderr)
    if result.missing:
        print(f"missing {len(result.missing)} execution(s): {' '.join(result.missing)}", file=sys.stderr)
    counts = result.document.meta.counts
    print(
        f"{counts.executions} executions, {counts.matched_workloads} matched workloads, "
        f"{counts.pairs} pairs; wrote {', '.join(str(f) for f in result.files)}"
    )
    if result.mixed:
        print(
            f"settings differ between the published executions: {mixed_text(result.mixed)}", file=sys.stderr
        )
    left = unpublished(result)
    if left:
        print(f"not published: {len(left)} execution(s) without a row: {' '.join(left)}", file=sys.stderr)
    return FAILED if left or result.mixed else OK


if __name__ == "__main__":
    sys.exit(run_command("pipeline.aggregate", main))
