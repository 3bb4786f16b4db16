"""Benchmark: compare two 110-execution datasets (the whole matrix on each side). Target: under 2 s.

Two datasets of synthetic shards (every execution of the matrix once, ranks = nominal EP unless
--max-ranks caps it, the full scale's 5 windows x 30 iterations, or ``--windows N``) are written first
(not timed), then ``pipeline.compare`` runs end to end in this process: read and validate both
datasets, reduce, the noise model, tests, classification and the text; and again with the page
(``--out``: figure and HTML).

    python benchmarks/compare_110.py [--repeat 5] [--max-ranks N] [--windows N] [--keep DIR]

``--keep DIR`` writes the datasets to DIR/base and DIR/new and leaves them, so the command line can
also be timed as a whole process (``python -m pipeline.compare DIR/base DIR/new``).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.matrix import EXECUTIONS  # noqa: E402
from pipeline.tools.compare.cli import main as compare_main  # noqa: E402
from pipeline.tools.synthetic_shards import shard_table, write_table  # noqa: E402


def generate(dataset: Path, seed: int, max_ranks: int | None, windows: int | None) -> int:
    """One complete attempt of every execution of the matrix; return the window rows written."""
    rng = np.random.default_rng(seed)
    rows = 0
    for e in EXECUTIONS:
        ranks = e.workload.ep if max_ranks is None else min(e.workload.ep, max_ranks)
        table = shard_table(e, 1, rng, ranks=ranks, device="NVIDIA H200", job_id="1_1", windows=windows)
        write_table(dataset, table)
        rows += table.num_rows
    return rows


def timed(arguments: list[str]) -> tuple[float, float, int]:
    """Wall and CPU seconds and the exit status of one in-process run of the command line (output
    discarded); CPU time is the process's, all threads: on a shared machine it drifts less than wall."""
    sink = io.StringIO()
    start, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        status = compare_main(arguments)
    return time.perf_counter() - start, time.process_time() - cpu, status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--max-ranks", type=int, default=None)
    parser.add_argument("--windows", type=int, default=None, help="windows per rank (default: the scale's 5)")
    parser.add_argument("--keep", type=Path, default=None, help="write the datasets here and keep them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        base, new = root / "base", root / "new"
        start = time.perf_counter()
        rows = sum(generate(d, seed, args.max_ranks, args.windows) for d, seed in ((base, 1), (new, 2)))
        elapsed = time.perf_counter() - start
        print(f"generated 2 x {len(EXECUTIONS)} shards, {rows} window rows in {elapsed:.1f} s")
        for label, extra in (("text", []), ("text + page", ["--out", str(root / "page")])):
            walls, cpus = [], []
            for _ in range(args.repeat):
                wall, cpu, status = timed([str(base), str(new), *extra])
                walls.append(wall)
                cpus.append(cpu)
            print(
                f"compare ({label}): wall median {statistics.median(walls):.2f} s (min {min(walls):.2f}, "
                f"max {max(walls):.2f}), CPU median {statistics.median(cpus):.2f} s, {args.repeat} runs, "
                f"exit status {status}"
            )


if __name__ == "__main__":
    main()
