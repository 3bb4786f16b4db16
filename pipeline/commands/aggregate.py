"""``python -m pipeline.aggregate DATASET_DIR``: publish a dataset's shards as CSV, JSON and figures.

Skipped shards (unreadable, incomplete, foreign, or set otherwise than the dataset) and missing
executions are listed on stderr (and in the JSON meta); the files are written all the same, since a
partial dataset is still worth publishing. The files, figures, page and their manifest
(mok-comparison.sha256) replace the previous ones as one set: a write that fails (a full disk, an I/O
error) leaves the previous publication byte-identical and ends in one line. Exit status: 0 when every
execution the dataset's sweeps meant (and every one a skipped file names) has a published row; 1
when one has none, when the published executions differ in their comparable settings (a dataset from
before its sweeps' intents fixed them), when the dataset holds no shard at all, or when the files
could not be written; 2 for bad input, refused before anything is written (a path that is no
directory, a folder to publish into that cannot be written: the dataset without --out, or --out; an
--out among the dataset's own records: its shards, ledger, logs, claims or hydra folder).
The full-scale estimate columns are those kept (``pipeline/data/estimates.py``); ``--estimate`` first
computes the missing ones with ``python -m pipeline.estimate --dataset DATASET_DIR``, a process of its
own, so publishing itself never imports the estimate (torch, fake CUDA, a C++ build). ``--rates FILE``
first keeps a kernel-rate table measured on the dataset's device (the device run writes one) in the
dataset (``kernel-rates.json``), beside which every row of that device publishes its expectation; a
table that does not read is refused in one line (exit 2) before anything is written.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from pipeline import REPO_ROOT
from pipeline.base.exits import BAD_INPUT, FAILED, OK, ArgumentParser, help_text, prog
from pipeline.base.folders import check_writable
from pipeline.base.printable import printable
from pipeline.data import rates as kernel_rates
from pipeline.data.dataset import Dataset, own_folder_problem
from pipeline.report import Aggregate, aggregate
from pipeline.report.provenance import mixed_text
from pipeline.report.publication import PublishError


def _problem(dataset: Path, out: Path | None, workers: int) -> str | None:
    """Why these arguments cannot work, or None."""
    try:
        Dataset.existing(dataset)
    except ValueError as err:
        return str(err)
    if out is not None and (problem := own_folder_problem("--out", out, [dataset])) is not None:
        return problem
    try:
        check_writable(dataset if out is None else out)
    except ValueError as err:
        if out is not None:
            return f"--out {err}"
        return f"dataset {err}: the files are published into the dataset unless --out names another folder"
    if workers < 1:
        return f"--workers {workers}: must be at least 1"
    return None


def unpublished(result: Aggregate) -> list[str]:
    """Executions without a published row that should have one: meant by a sweep of the dataset (its
    ledger), or named by a shard file that was skipped."""
    meant = set(result.missing) if result.document.meta.launched.source == "ledger" else set()
    published = {str(r["execution_id"]) for r in result.document.executions}
    skipped = {Dataset.execution_of_shard(Path(s.path)) for s in result.skipped}
    return sorted((meant | skipped) - published)


def _estimate(dataset: Path) -> None:
    """``--estimate``: compute and keep the full-scale estimates the dataset publishes that are not kept
    yet, by the estimate's own command in a process of its own (publishing never imports the estimate's
    machinery); its lines pass through, and a failure leaves the kept estimates to publish."""
    command = ["python", "-m", "pipeline.estimate", "--dataset", str(dataset)]
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, *command[1:]], env={**os.environ, "PYTHONPATH": path}, check=False
    )  # the code of this process, wherever it runs from
    if done.returncode:
        ended = f"{shlex.join(command)} ended with status {done.returncode}"
        _say(f"--estimate: {ended}; publishing the kept estimates only")


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog=prog("pipeline.aggregate"), description=help_text(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("dataset", type=Path, help="dataset directory holding shards/ (and ledger/)")
    parser.add_argument("--out", type=Path, default=None, help="where to write the files (default: dataset)")
    parser.add_argument(
        "--no-figures",
        action="store_true",
        help="publish only the CSV and JSON files (an earlier publication's figures and page go with it)",
    )
    parser.add_argument("--workers", type=int, default=8, help="threads reading shards (default 8)")
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="first compute the full-scale estimates not yet kept (python -m pipeline.estimate --dataset "
        "DATASET, seconds of CPU each); without it only the kept ones are published, the others empty",
    )
    parser.add_argument(
        "--rates",
        type=Path,
        default=None,
        metavar="FILE",
        help="first keep this kernel-rate table (JSON, measured on the dataset's device: the device run's "
        "kernel-rates.json) in the dataset; its rows publish the expectation from it",
    )
    args = parser.parse_args(argv)
    problem = _problem(args.dataset, args.out, args.workers)
    if problem is None and args.rates is not None:
        try:
            rates = kernel_rates.load(args.rates)
            check_writable(args.dataset)  # the table is kept in the dataset, wherever --out publishes
        except kernel_rates.RatesError as err:
            problem = f"--rates {err}"
        except ValueError as err:
            problem = f"--rates: dataset {err}"
    if problem is not None:
        _say(problem)
        return BAD_INPUT
    if not Dataset(args.dataset).shard_files():
        _say(f"{args.dataset} holds no shards: nothing to publish")
        return FAILED
    if args.rates is not None:
        kernel_rates.keep(Dataset(args.dataset), rates)
    if args.estimate:
        _estimate(args.dataset)
    try:
        result = aggregate(args.dataset, args.out, figures=not args.no_figures, workers=args.workers)
    except ValueError as exc:
        _say(str(exc))
        return BAD_INPUT
    except PublishError as exc:
        _say(str(exc))
        return FAILED
    except OSError as exc:  # reading: publication turns its own into a PublishError
        _say(f"cannot read the dataset: {exc}; nothing was published")
        return FAILED
    for skipped in result.skipped:
        _say(f"skipped {skipped.path}: {skipped.reason}", named=False)
    left = unpublished(result)
    if result.missing and not set(result.missing) <= set(left):  # else the line below says it
        _say(f"missing {len(result.missing)} execution(s): {' '.join(result.missing)}", named=False)
    counts = result.document.meta.counts
    print(
        printable(
            f"{counts.executions} executions, {counts.matched_workloads} matched workloads, "
            f"{counts.pairs} pairs; wrote {', '.join(str(f) for f in result.files)}"
        )
    )
    if result.mixed:
        _say(f"settings differ between the published executions: {mixed_text(result.mixed)}", named=False)
    if left:
        _say(f"not published: {len(left)} execution(s) without a row: {' '.join(left)}", named=False)
    return FAILED if left or result.mixed else OK


def _say(line: str, *, named: bool = True) -> None:
    """One line on stderr, the dataset's strings in it made printable; ``named``: after the command's name."""
    print(printable(f"pipeline.aggregate: {line}" if named else line), file=sys.stderr)
