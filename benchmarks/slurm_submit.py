"""Benchmark: submit the whole 110-execution matrix to the local Slurm cluster without waiting.

Times ``python -m pipeline.run --multirun scale=<scale> hydra/launcher=slurm cluster=local-slurm
hydra.launcher.wait=false``
end to end (interpreter start, Hydra, validation of every execution, job arrays, ledger), checks that
the ledger holds one submission per execution, then cancels the submitted jobs. Target: under 10 s.
Needs ``jobs/local-slurm.sh up``.

    python benchmarks/slurm_submit.py [--scale ci] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline.data import ledger
from pipeline.data.dataset import Dataset
from pipeline.matrix import EXECUTIONS

REPO = Path(__file__).resolve().parents[1]


def submit_once(scale: str) -> float:
    """Seconds one fire-and-forget submission of the matrix takes; its jobs are cancelled after."""
    with tempfile.TemporaryDirectory(prefix="slurm-submit-") as folder:
        command = [sys.executable, "-m", "pipeline.run", "--multirun", f"scale={scale}"]
        command += [
            f"dataset_dir={folder}",
            "hydra/launcher=slurm",
            "cluster=local-slurm",
            "hydra.launcher.wait=false",
        ]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO)
        seconds = time.perf_counter() - start
        submitted = [r for r in ledger.read(Dataset(folder)) if isinstance(r, ledger.Submitted)]
        arrays = sorted({r.job_id.split("_")[0] for r in submitted})
        if arrays:
            subprocess.run(["scancel", *arrays], check=True)
        if done.returncode != 0:
            raise SystemExit(f"submission failed:\n{done.stderr[-3000:]}")
        if len(submitted) != len(EXECUTIONS):
            raise SystemExit(f"{len(submitted)} executions submitted, expected {len(EXECUTIONS)}")
        print(f"{seconds:.2f} s: {len(submitted)} executions in {len(arrays)} job array(s)", flush=True)
        return seconds


def main() -> None:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument("--scale", default="ci", help="scale preset (default: ci)")
    parser.add_argument("--repeat", type=int, default=3, help="submissions to time (default: 3)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat must be >= 1, got {args.repeat}")
    up = subprocess.run(["bash", str(REPO / "jobs" / "local-slurm.sh"), "status"], capture_output=True)
    if up.returncode != 0:
        raise SystemExit("the local Slurm cluster is not up; run: jobs/local-slurm.sh up")
    times = [submit_once(args.scale) for _ in range(args.repeat)]
    print(f"median {statistics.median(times):.2f} s, max {max(times):.2f} s over {len(times)} submissions")


if __name__ == "__main__":
    main()
