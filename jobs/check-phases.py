#!/usr/bin/env python3
"""Phase consistency of a published dataset: inference's forward and combined windows time the same
work, so forwardMS and iterationMS must agree within a tolerance; where there is a backward, the
forward must be faster than the whole iteration.

Meant for datasets of `scale=cpu` and `scale=full`, whose windows are long enough in time for the
bound (`scale=cpu`: >= 30 ms windows, >= 1.8 s per phase; `full`: 30-iteration windows of CUDA-event
time). At `scale=ci` (tiny shapes, five windows of >= 20 ms, a smoke test of every path) the phases
are not expected to agree within 10%, and a failure there says nothing about the timing.

Uses only the standard library and mok-comparison.csv. Prints one line per execution that fails, then
a summary (worst inference deviation, iterations per window and window lengths); exit status 1 when
any execution fails, 2 on bad arguments or a missing file.

Usage: jobs/check-phases.py DATASET_DIR [--tolerance 0.10]
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("dataset", type=Path, help="folder holding mok-comparison.csv")
    parser.add_argument(
        "--tolerance", type=float, default=0.10, help="inference |forward/combined - 1| bound"
    )
    args = parser.parse_args()
    path = args.dataset / "mok-comparison.csv"
    if not path.is_file():
        parser.error(f"{path} does not exist; run python -m pipeline.aggregate {args.dataset} first")
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    failures, deviations, iterations, windows_ms = [], [], [], []
    for row in rows:
        forward, combined = float(row["forwardMS"]), float(row["iterationMS"])
        iterations.append(int(row["iterationsPerWindow"]))
        windows_ms.append(forward * int(row["iterationsPerWindow"]))
        if row["kind"] == "inference":
            deviation = abs(forward / combined - 1.0)
            deviations.append(deviation)
            if deviation > args.tolerance:
                failures.append(
                    f"{row['execution_id']}: forward {forward:.4g} ms vs combined {combined:.4g} ms"
                )
        elif not forward < combined:
            failures.append(f"{row['execution_id']}: forward {forward:.4g} ms >= combined {combined:.4g} ms")
    for line in failures:
        print(f"FAIL {line}")
    other = sorted({row["scale"] for row in rows if row.get("scale")} - {"cpu", "full"})
    if other:
        print(
            f"note: executions at scale {', '.join(other)}: the bound is meant for scale=cpu and full, "
            "whose windows are long enough in time",
            file=sys.stderr,
        )
    print(
        f"{len(rows)} executions, {len(failures)} inconsistent; inference |forward/combined - 1| max "
        f"{max(deviations, default=0.0):.3f} (tolerance {args.tolerance}); iterations per window "
        f"{min(iterations, default=0)}-{max(iterations, default=0)}; forward windows "
        f"{min(windows_ms, default=0.0):.0f}-{max(windows_ms, default=0.0):.0f} ms"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
