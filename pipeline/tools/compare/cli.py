"""``python -m pipeline.compare BASE NEW``: what got faster, what got slower, and is it real.

Exit status: 1 when any time is ``slower`` (beyond the threshold and significant against its noise
after the multiplicity control, its two sides measured under like conditions), or with ``--strict``
when any time is ``inconclusive`` (its sides' measuring conditions differ); 0 otherwise; 2 for bad
input (not a dataset, no common executions, a bad option), with a one-line error.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

from pipeline.base.exits import ArgumentParser
from pipeline.base.folders import check_writable
from pipeline.base.printable import print_document, printable
from pipeline.data.dataset import own_folder_problem
from pipeline.report.publish import json_text
from pipeline.tools.compare.classify import DEFAULT_THRESHOLD, check_threshold
from pipeline.tools.compare.comparison import (
    INCONCLUSIVE,
    any_inconclusive,
    any_slower,
    bounds_text,
    compare,
    conditions_text,
)
from pipeline.tools.compare.family import MULTIPLICITY
from pipeline.tools.compare.page import write_page
from pipeline.tools.compare.side import load

PROG = "python -m pipeline.compare"


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, help="dataset directory measured before (holds shards/)")
    parser.add_argument("new", type=Path, help="dataset directory measured after")
    parser.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help=f"smallest relative change that counts (default {DEFAULT_THRESHOLD}, i.e. 5%%)",
    )
    parser.add_argument(
        "--multiplicity",
        choices=MULTIPLICITY,
        default=MULTIPLICITY[0],
        help="holm: family-wise error (default); bh: Benjamini-Hochberg false discovery rate",
    )
    parser.add_argument(
        "--history",
        type=Path,
        nargs="+",
        default=[],
        metavar="DIR",
        help="earlier datasets of the same sweep beside BASE (never NEW): each time's own run-to-run noise",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 also when a time is inconclusive (its sides measured under differing conditions)",
    )
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON instead of text")
    parser.add_argument("--out", type=Path, default=None, help="also write comparison.html into this folder")
    parser.add_argument("--workers", type=int, default=8, help="threads reading shards (default 8)")
    args = parser.parse_args(argv)
    try:
        check_threshold(args.threshold)  # before reading two datasets
        if args.out is not None:
            _check_out(args.out, [args.base, args.new, *args.history])
        _check_history(args.base, args.new, args.history)
        sides = load(args.base, args.workers), load(args.new, args.workers)
        history = [load(h, args.workers) for h in args.history]
        document = compare(*sides, args.threshold, multiplicity=args.multiplicity, history=history)
        page = None if args.out is None else write_page(args.out, document)
    except (ValueError, OSError) as exc:
        parser.exit(2, printable(f"{PROG}: error: {exc}") + "\n")
    skipped = [(side, s) for side in ("base", "new") for s in document[side]["skipped"]]
    skipped += [(f"history {h['dataset']}", s) for h in document["history"] for s in h["skipped"]]
    # JSON is ASCII: it escapes every control character
    print_document(json_text(document) if args.json else text(document) + "\n", skipped)
    if page is not None:
        print(printable(f"wrote {page}"), file=sys.stderr)
    return 1 if any_slower(document) or (args.strict and any_inconclusive(document)) else 0


def _check_history(base: Path, new: Path, history: list[Path]) -> None:
    """A history dataset is an earlier run beside BASE: NEW in it would count the change as noise,
    BASE or a repeat twice."""
    seen = {base.resolve(): "BASE", new.resolve(): "NEW"}
    for h in history:
        if h.resolve() in seen:
            raise ValueError(
                f"--history {str(h)!r} is {seen[h.resolve()]}; allowed: other datasets, each once"
            )
        seen[h.resolve()] = "named twice"


def _check_out(out: Path, datasets: list[Path]) -> None:
    if (problem := own_folder_problem("--out", out, datasets)) is not None:
        raise ValueError(problem)
    try:
        check_writable(out)
    except ValueError as err:
        raise ValueError(f"--out {err}") from None


def text(document: dict[str, Any]) -> str:
    """The comparison for a terminal: what differs between the datasets first, then the changes; each
    line made printable, since execution ids, settings and reasons come from the datasets."""
    lines = [
        f"{side.upper():4} {document[side]['dataset']}: {document[side]['executions']} executions"
        for side in ("base", "new")
    ]
    if document["history"]:
        names = " ".join(h["dataset"] for h in document["history"])
        lines.append(f"HISTORY {len(document['history'])} datasets: {names}")
    for differ in document["settings_differ"]:
        lines.append(
            f"settings differ: {differ['setting']}: {_values(differ['base'])} -> {_values(differ['new'])}"
        )
    for side in ("base", "new"):
        only = document[f"only_in_{side}"]
        if only:
            lines.append(f"only in {side.upper()} ({len(only)}): {' '.join(only)}")
    lines.append(bounds_text(document))
    lines.append(conditions_text(document))
    changed = [t for t in document["times"] if t["change"] != "unchanged"]
    inconclusive = sum(t["change"] == INCONCLUSIVE for t in changed)
    lines.append(
        f"times, NEW / BASE with {100 * document['confidence']:g}% interval: {len(changed) - inconclusive} "
        f"changed, {inconclusive} inconclusive"
    )
    order = {"slower": 0, "faster": 1, INCONCLUSIVE: 2}
    for t in sorted(changed, key=lambda t: (order[t["change"]], -abs(math.log(t["ratio"])))):
        tail = _noise(t) if t["change"] != INCONCLUSIVE else f"measured {t['measured']}; {t['conditions']}"
        lines.append(
            f"  {t['change']:9} {t['metric']:11} {t['execution_id']}  {t['base']:.4g} -> {t['new']:.4g} ms  "
            f"x{t['ratio']:.3f} {_interval(t)}{_clocks(t)} {tail}"
        )
    speedups = [s for s in document["speedups"] if s["change"] != "unchanged"]
    lines.append(f"speedups (MoK / Dist-MoE time), NEW / BASE: {len(speedups)} changed or inconclusive")
    for s in speedups:
        why = f" measured {s['measured']}; {s['conditions']}" if s["change"] == INCONCLUSIVE else ""
        lines.append(
            f"  {s['change']:9} {s['workload_id']} {s['pipeline']}  {s['base']:.3f} -> {s['new']:.3f}  "
            f"x{s['ratio']:.3f} {_interval(s)}{why}"
        )
    flips = [s for s in document["selections"] if s["flipped"]]
    lines.append(f"selected Dist-MoE pipeline: {len(flips)} of {len(document['selections'])} flipped")
    for s in flips:
        verdict = "significant" if s["significant"] else "within noise"
        lines.append(
            f"  {s['workload_id']}: {s['base']} -> {s['new']}, NEW time ratio x{s['ratio']:.3f} "
            f"{_interval(s)} ({verdict})"
        )
    counts = document["counts"]
    lines.append(
        f"{counts['slower']} slower, {counts['faster']} faster, {counts['unchanged']} unchanged"
        + (f", {counts[INCONCLUSIVE]} inconclusive" if counts[INCONCLUSIVE] else "")
        + " of "
        f"{len(document['times'])} times; speedups {counts['speedup_higher']} higher, "
        f"{counts['speedup_lower']} lower of {len(document['speedups'])}; "
        f"{counts['selections_flipped']} of {counts['selections']} selections flipped"
    )
    return "\n".join(printable(line) for line in lines)


def _clocks(entry: dict[str, Any]) -> str:
    """Where the GPUs' SM clocks differ: the ratio at equal clocks (in clock cycles) beside the time's."""
    clocks = entry.get("clock_ratio")
    if clocks is None or abs(math.log(clocks)) < 1e-3:
        return ""
    return f" (x{entry['normalized_ratio']:.3f} at equal SM clocks: NEW's clock x{clocks:.3f})"


def _noise(entry: dict[str, Any]) -> str:
    if entry.get("p_adjusted") is None:
        return ""
    runs = "no estimate" if entry["between_sigma"] is None else f"{entry['between_sigma']:.3f}"
    if entry.get("between_upper") is not None:
        runs += f", up to {entry['between_upper']:.3f} (few executions)"
    return (
        f"p {entry['p_adjusted']:.2g} (sigma {entry['sigma']:.3f}: windows {entry['within_sigma']:.3f}, "
        f"runs {runs})"
    )


def _values(values: list[str]) -> str:
    return ", ".join(values)


def _interval(entry: dict[str, Any]) -> str:
    if entry["low"] is None:
        return "[no interval: too few windows]"
    return f"[{entry['low']:.3f}, {entry['high']:.3f}]"
