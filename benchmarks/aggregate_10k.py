"""Benchmark: aggregate 10,000 synthetic shards (the whole matrix, many attempts each).

Shards are generated in a temporary directory (not timed), with as many ranks as the nominal EP degree
unless --max-ranks caps it, then ``pipeline.report.aggregate`` runs end to end (read, validate, reduce,
pair, write CSV/JSON and figures) and its wall time is printed. Target: under 20 s.

    python benchmarks/aggregate_10k.py [--shards 10000] [--max-ranks N] [--workers 8] [--repeat 1]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.data.dataset import Dataset  # noqa: E402
from pipeline.data.scan import scan_shards  # noqa: E402
from pipeline.matrix import EXECUTIONS  # noqa: E402
from pipeline.report import aggregate  # noqa: E402
from pipeline.tools.synthetic_shards import shard_table, write_table  # noqa: E402


def generate(dataset: Path, shards: int, max_ranks: int | None) -> int:
    """Write ``shards`` complete attempts cycling over the matrix; return the total window rows."""
    rng = np.random.default_rng(2026)
    rows = 0
    for i in range(shards):
        e = EXECUTIONS[i % len(EXECUTIONS)]
        ranks = e.workload.ep if max_ranks is None else min(e.workload.ep, max_ranks)
        table = shard_table(e, i // len(EXECUTIONS) + 1, rng, ranks=ranks, device="NVIDIA H200")
        write_table(dataset, table)
        rows += table.num_rows
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=10_000)
    parser.add_argument("--max-ranks", type=int, default=None)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        dataset = Path(tmp)
        start = time.perf_counter()
        rows = generate(dataset, args.shards, args.max_ranks)
        print(f"generated {args.shards} shards, {rows} window rows in {time.perf_counter() - start:.1f} s")
        for _ in range(args.repeat):
            start = time.perf_counter()
            scan_shards(Dataset(dataset), workers=args.workers)
            print(f"  reading and validating alone: {time.perf_counter() - start:.2f} s")
            start, cpu = time.perf_counter(), time.process_time()
            result = aggregate(dataset, workers=args.workers)
            elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
            counts = result.document.meta.counts
            read = len(result.document.meta.shards_read)
            print(
                f"aggregated {read} shards ({counts.executions} executions, {counts.pairs} pairs) "
                f"with {args.workers} workers in {elapsed:.2f} s ({cpu:.2f} s of CPU)"
            )


if __name__ == "__main__":
    main()
