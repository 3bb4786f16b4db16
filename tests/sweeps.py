"""Real sweeps for the tests: ``python -m pipeline.run --multirun`` with the local launcher."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

# two workloads x five variants: every phase, both precisions, and a packing profile that overflows
CI_SWEEP = ("workload=inference-ep8-f1536,packing-ep32-f3072-profile-a", "variant=glob(*)", "scale=ci")


def run_sweep(dataset: Path, *overrides: str, timeout: int = 1200) -> subprocess.CompletedProcess:
    """``python -m pipeline.run --multirun`` of ``overrides`` into ``dataset`` with the local launcher."""
    command = [sys.executable, "-m", "pipeline.run", "--multirun", *overrides, f"dataset_dir={dataset}"]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)
