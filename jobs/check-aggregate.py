#!/usr/bin/env python3
"""Independent check of a published dataset: recompute times and speedups from the shards.

Uses only pyarrow and the standard library (no project code), so a bug shared by the pipeline's
modules cannot hide here. For each row of mok-comparison.csv it reads the shard the row names,
recomputes iterationMS (combined), forwardMS and backwardMS as the report defines them (per rank:
median over windows of window_ms / iterations; then the slowest rank), and compares; for each row of
mok-comparison-pairs.csv, where the dataset's suite publishes pairs, it recomputes the speedup (MoK
time / Dist-MoE time) and the selection (the fastest Dist-MoE pipeline per matched workload). A newer
attempt than the one published must be reported as skipped in mok-comparison.json. Each row's phase
account must be its slowest rank's, as the shard's metadata records it, and its phases and unclaimed
time must add up to its profiled iteration; how far the profiled iterations lie from the timed ones is
printed. Exit status 1 on any mismatch.

Usage: jobs/check-aggregate.py DATASET_DIR [--published DIR] [--rel-tol 2e-5] [--within 0.15]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

PHASE_COLUMNS = {"combined": "iterationMS", "forward": "forwardMS", "backward": "backwardMS"}
COMMUNICATION = ("dispatch", "combine")


def slowest_rank_medians(shard: Path) -> dict[str, float]:
    """Per phase: max over ranks of the median per-iteration window time."""
    return {phase: ms for phase, (ms, _) in slowest_ranks(shard).items()}


def slowest_ranks(shard: Path) -> dict[str, tuple[float, int]]:
    """Per phase: the largest median per-iteration window time over ranks, and that rank (the lowest
    on ties)."""
    per_rank: dict[tuple[str, int], list[float]] = defaultdict(list)
    for row in pq.read_table(shard, columns=["phase", "rank", "window_ms", "iterations"]).to_pylist():
        per_rank[(row["phase"], row["rank"])].append(row["window_ms"] / row["iterations"])
    out: dict[str, tuple[float, int]] = {}
    for (phase, rank), times in sorted(per_rank.items()):
        median = statistics.median(times)
        if phase not in out or median > out[phase][0]:
            out[phase] = (median, rank)
    return out


def check_account(
    eid: str, row: dict[str, str], shard: Path, rel_tol: float
) -> tuple[list[str], float | None]:
    """The row's account against its slowest rank's in the shard's metadata; the profiled / timed ratio."""
    timed, rank = slowest_ranks(shard)["combined"]
    meta = json.loads(pq.read_schema(shard).metadata[b"execution"])
    account = meta.get("account") or {"ranks": []}
    mine = [a for a in account["ranks"] if a["rank"] == rank]
    if not mine:
        empty = row.get("profiledMS", "") == ""
        return ([] if empty else [f"{eid}: profiledMS published without an account of rank {rank}"]), None
    (acc,) = mine
    problems = []
    ranks = int(row["ranks"])
    if not close(row["profiledMS"], acc["profiled_ms"], rel_tol):
        problems.append(
            f"{eid}: profiledMS published {row['profiledMS']!r}, rank {rank} profiled {acc['profiled_ms']!r}"
        )
    for phase, ms in acc["phases"].items():
        column = f"phase{phase.capitalize()}MS"
        want = None if phase in COMMUNICATION and ranks == 1 else ms
        if not close(row[column], want, rel_tol):
            problems.append(f"{eid}: {column} published {row[column]!r}, recorded {want!r}")
    total = sum(acc["phases"].values()) + acc["unclaimed_ms"]
    if not math.isclose(total, acc["profiled_ms"], rel_tol=1e-6, abs_tol=1e-9):
        problems.append(f"{eid}: phases and unclaimed add up to {total!r}, not {acc['profiled_ms']!r}")
    return problems, acc["profiled_ms"] / timed


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def close(published: str, value: float | None, rel_tol: float) -> bool:
    if value is None:
        return published == ""
    return published != "" and math.isclose(float(published), value, rel_tol=rel_tol)


def check(dataset: Path, published: Path, rel_tol: float, within: float = 0.15) -> list[str]:
    """All mismatches between the published files and the recomputation, as readable lines."""
    problems: list[str] = []
    times: dict[str, float] = {}
    ratios: list[float] = []
    meta = json.loads((published / "mok-comparison.json").read_text())["meta"]
    skipped = {s["path"] for s in meta["shards_skipped"]}
    executions = read_csv(published / "mok-comparison.csv")
    for row in executions:
        eid = row["execution_id"]
        shard = dataset / "shards" / f"execution={eid}" / f"attempt-{row['attempt']}.parquet"
        for other in shard.parent.glob("attempt-*.parquet"):
            number = other.stem.removeprefix("attempt-")
            relative = other.relative_to(dataset).as_posix()
            if number.isdigit() and int(number) > int(row["attempt"]) and relative not in skipped:
                problems.append(f"{eid}: newer {other.name} neither used nor reported as skipped")
        recomputed = slowest_rank_medians(shard)
        for phase, column in PHASE_COLUMNS.items():
            if not close(row[column], recomputed.get(phase), rel_tol):
                problems.append(
                    f"{eid}: {column} published {row[column]!r}, recomputed {recomputed.get(phase)!r}"
                )
        times[eid] = recomputed["combined"]
        found, ratio = check_account(eid, row, shard, rel_tol)
        problems += found
        if ratio is not None:
            ratios.append(ratio)
    fastest: dict[str, tuple[float, str]] = {}
    pairs_file = published / "mok-comparison-pairs.csv"  # a suite that publishes no pairs has none
    pairs = read_csv(pairs_file) if pairs_file.exists() else []
    for row in pairs:
        dist, mok = row["dist_execution_id"], row["mok_execution_id"]
        if dist not in times or mok not in times:
            problems.append(f"pair {dist}: execution missing from mok-comparison.csv")
            continue
        for column, value in (
            ("distIterationMS", times[dist]),
            ("mokIterationMS", times[mok]),
            ("speedup", times[mok] / times[dist]),
        ):
            if not close(row[column], value, rel_tol):
                problems.append(f"pair {dist}: {column} published {row[column]!r}, recomputed {value!r}")
        best = fastest.get(row["workload_id"])
        if best is None or (times[dist], dist) < best:
            fastest[row["workload_id"]] = (times[dist], dist)
    for row in pairs:
        expected = fastest.get(row["workload_id"], (None, None))[1] == row["dist_execution_id"]
        if (row["selected"] == "true") != expected:
            problems.append(
                f"pair {row['dist_execution_id']}: selected={row['selected']}, expected {expected}"
            )
    print(f"checked {len(executions)} executions and {len(pairs)} pairs against the shards")
    if ratios:
        near = sum(abs(r - 1) <= within for r in ratios)
        print(
            f"phase accounts: {len(ratios)} of {len(executions)} executions, each adding up to its profiled "
            f"iteration; profiled / timed {min(ratios):.3f}-{max(ratios):.3f} (median "
            f"{statistics.median(ratios):.3f}), {near} of {len(ratios)} within {within:.0%}"
        )
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--published", type=Path, default=None, help="folder of the published files")
    parser.add_argument(
        "--rel-tol", type=float, default=2e-5, help="relative tolerance (files carry 6 digits)"
    )
    parser.add_argument(
        "--within", type=float, default=0.15, help="the profiled / timed band counted (default 0.15)"
    )
    args = parser.parse_args()
    errors = check(args.dataset, args.published or args.dataset, args.rel_tol, args.within)
    for line in errors:
        print(line, file=sys.stderr)
    if errors:
        print(f"FAILED: {len(errors)} mismatch(es)", file=sys.stderr)
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
