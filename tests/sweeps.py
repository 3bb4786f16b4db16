"""Real sweeps for the tests: ``python -m pipeline.run --multirun`` with the local launcher."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# two workloads x five variants: every phase, both precisions, and a packing profile that overflows
CI_SWEEP = ("workload=inference-ep8-f1536,packing-ep32-f3072-profile-a", "variant=glob(*)", "scale=ci")


def run_sweep(dataset: Path, *overrides: str, timeout: int = 1200) -> subprocess.CompletedProcess:
    """``python -m pipeline.run --multirun`` of ``overrides`` into ``dataset`` with the local launcher."""
    command = [sys.executable, "-m", "pipeline.run", "--multirun", *overrides, f"dataset_dir={dataset}"]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def left_running(dataset: Path) -> list[str]:
    """Command lines of live processes that name the dataset (the sweep, its job, the job's ranks): what
    an interrupted sweep must not leave behind."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (entry / "status").read_text()
        except OSError:
            continue
        if str(dataset) in line and "\nState:\tZ" not in state:
            found.append(line)
    return found
