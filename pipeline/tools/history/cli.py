"""``python -m pipeline.history DATASET... --out DIR``: each execution's times across datasets, the
steps in them, ``history.html`` and ``history.json``.

Datasets of other comparable settings (scale, seed, ranks cap, cluster) are never compared: where
the settings change, every series is split and the output says so. Exit status: 1 when a series ends
on a slower step (its newest point, in the newest dataset, lies
after a step found ``slower``), or with ``--strict`` when a step is ``inconclusive`` or a newest point
was measured under other conditions than its series' usual ones; 0 otherwise; 2 for bad input (fewer
than two datasets, one that is not a dataset, one named twice, a bad option), with a one-line error.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pipeline.base.exits import ArgumentParser
from pipeline.base.folders import check_writable
from pipeline.base.printable import print_document, printable
from pipeline.data.atomic import atomic_write
from pipeline.data.dataset import own_folder_problem
from pipeline.report.publish import json_text
from pipeline.tools.compare.classify import DEFAULT_THRESHOLD, check_threshold
from pipeline.tools.compare.side import load
from pipeline.tools.history.page import page_html
from pipeline.tools.history.series import INCONCLUSIVE, history, ordered

PROG = "python -m pipeline.history"
PAGE_NAME, JSON_NAME = "history.html", "history.json"


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument(
        "datasets", type=Path, nargs="+", help="dataset directories (any order: they are sorted by time)"
    )
    parser.add_argument("--out", type=Path, required=True, help=f"folder for {PAGE_NAME} and {JSON_NAME}")
    parser.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help=f"smallest relative step that counts (default {DEFAULT_THRESHOLD}, i.e. 5%%)",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 also for an inconclusive step or a newest point measured under other conditions",
    )
    parser.add_argument("--json", action="store_true", help="print the document as JSON instead of text")
    parser.add_argument("--workers", type=int, default=8, help="threads reading shards (default 8)")
    args = parser.parse_args(argv)
    try:
        check_threshold(args.threshold)
        _check_datasets(args.datasets)
        if (problem := own_folder_problem("--out", args.out, args.datasets)) is not None:
            raise ValueError(problem)
        try:
            check_writable(args.out)
        except ValueError as err:
            raise ValueError(f"--out {err}") from None
        sides = ordered([load(d, args.workers) for d in args.datasets])
        document = history(sides, args.threshold)
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write(args.out / JSON_NAME, json_text(document))
        atomic_write(args.out / PAGE_NAME, page_html(document))
    except (ValueError, OSError) as exc:
        parser.exit(2, printable(f"{PROG}: error: {exc}") + "\n")
    skipped = [(d["dataset"], s) for d in document["datasets"] for s in d["skipped"]]
    # JSON is ASCII: it escapes every control character
    print_document(json_text(document) if args.json else text(document) + "\n", skipped)
    print(printable(f"wrote {args.out / PAGE_NAME} and {args.out / JSON_NAME}"), file=sys.stderr)
    counts = document["counts"]
    strict = args.strict and (counts[INCONCLUSIVE] or counts["newest_differing"])
    return 1 if counts["open_slower"] or strict else 0


def _check_datasets(datasets: list[Path]) -> None:
    if len(datasets) < 2:
        raise ValueError(f"a history needs at least two datasets, got {len(datasets)}")
    seen: set[Path] = set()
    for d in datasets:
        if d.resolve() in seen:
            raise ValueError(f"dataset {str(d)!r} named twice; allowed: each once")
        seen.add(d.resolve())


def text(document: dict[str, Any]) -> str:
    """The history for a terminal: the datasets in time order, then every step; each line printable."""
    lines = [
        f"D{d['index']} {d['dataset']}: {d['executions']} executions, measured {d['measured'][0]} to "
        f"{d['measured'][1]}, git {_values(d['described'].get('git_sha', {}))}"
        for d in document["datasets"]
    ]
    for change in document["settings_changes"]:
        lines.append(
            f"settings change at D{change['at']} ({change['change']}): every series is split there; "
            "no step is judged across it"
        )
    lines.append(f"steps: {document['method']}")
    lines.append(f"promise: {document['promise']}")
    counts = document["counts"]
    lines.append(
        f"{counts['series']} series, {counts['steps']} steps ({counts['slower']} slower, {counts['faster']} "
        f"faster, {counts[INCONCLUSIVE]} inconclusive); {counts['points_differing']} points measured under "
        "other conditions than their series' usual ones (left out of the search)"
    )
    for e in document["series"]:
        for s in e["steps"]:
            why = f" measured {s['measured']}; {s['conditions']}" if s["change"] == INCONCLUSIVE else ""
            lines.append(
                f"  {s['change']:9} {e['metric']:11} {e['execution_id']}  at D{s['at']}: "
                f"{s['before_ms']:.4g} -> {s['after_ms']:.4g} ms  x{s['ratio']:.3f} [{s['low']:.3f}, "
                f"{s['high']:.3f}] p {s['p_adjusted']:.2g}{why}"
            )
    if document["open_slower"]:
        lines.append(f"ends on a slower step: {', '.join(document['open_slower'])}")
    return "\n".join(printable(line) for line in lines)


def _values(values: dict[str, int]) -> str:
    return ", ".join(values) or "unknown"
