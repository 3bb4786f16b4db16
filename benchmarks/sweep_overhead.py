"""Benchmark: where a sweep's wall time goes, against the timed windows it publishes.

Runs ``python -m pipeline.run --multirun OVERRIDES dataset_dir=DATASET`` (the local launcher unless the
overrides say otherwise) and times it whole, then reads the dataset it wrote: the rank-0 timed windows
of every published execution (the time the dataset measures), the bodies of the executions (from each
job's ``phases`` lines: init, connect, build, gate, capture, calibrate, windows, the phase account and
record), and so

    outside bodies = wall - bodies      (the sweep itself, process starts, imports, submission)
    inside bodies outside windows = bodies - windows   (build, the gate, warm-up, calibration, records)

and the ratio of the wall time to the windows. With ``--read`` it only reads an existing dataset and
takes the wall time from ``--wall``.

    python benchmarks/sweep_overhead.py DATASET [OVERRIDES...]        e.g.  scale=cpu
    python benchmarks/sweep_overhead.py DATASET --read --wall 612.4
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.data.dataset import Dataset  # noqa: E402
from pipeline.data.scan import scan_shards  # noqa: E402

BODY = ("init", "connect", "build", "gate", "capture", "calibrate", "windows", "account", "record")


def windows_s(dataset: Dataset) -> tuple[float, int]:
    """The rank-0 timed windows of every published execution, in seconds, and how many executions."""
    newest = scan_shards(dataset).newest
    total = 0.0
    for shard in newest.values():
        total += float(np.sum(shard.window_ms[shard.rank == 0])) / 1e3
    return total, len(newest)


def bodies_s(dataset: Dataset) -> tuple[float, dict[str, float]]:
    """The executions' bodies (the sum of their phases) and each phase's sum, from the jobs' logs."""
    parts = dict.fromkeys(BODY, 0.0)
    for log in sorted(dataset.logs_dir.glob("**/*_0_log.out")):
        if log.is_symlink():
            continue
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("phases "):
                said = json.loads(line.split(" ", 2)[2])
                for name in BODY:
                    parts[name] += float(said.get(name, 0.0))
    return sum(parts.values()), parts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path)
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--read", action="store_true", help="read DATASET only; the wall time from --wall")
    parser.add_argument("--wall", type=float, help="the sweep's wall seconds (with --read)")
    args = parser.parse_args()
    if args.read:
        if args.wall is None:
            parser.error("--read needs --wall")
        wall = args.wall
    else:
        command = [sys.executable, "-m", "pipeline.run", "--multirun", *args.overrides]
        began = time.monotonic()
        done = subprocess.run([*command, f"dataset_dir={args.dataset}"], check=False)
        wall = time.monotonic() - began
        if done.returncode != 0:
            print(f"the sweep exited {done.returncode}", file=sys.stderr)
    dataset = Dataset(args.dataset)
    windows, executions = windows_s(dataset)
    bodies, parts = bodies_s(dataset)
    print(f"executions published: {executions}")
    print(f"wall {wall:.1f} s; rank-0 timed windows {windows:.1f} s; wall / windows {wall / windows:.3f}")
    print(f"outside bodies {wall - bodies:.1f} s; inside bodies outside windows {bodies - windows:.1f} s")
    print("  phases (s): " + ", ".join(f"{k} {v:.1f}" for k, v in parts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
