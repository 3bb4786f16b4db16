"""jobs/check-phases.py: inference forward within the tolerance of combined, forward below combined
where there is a backward; exit 1 naming each inconsistent execution."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "jobs" / "check-phases.py"
COLUMNS = ["execution_id", "kind", "forwardMS", "iterationMS", "iterationsPerWindow"]


def _run(
    tmp_path: Path, rows: list[list[object]], columns: list[str] = COLUMNS
) -> subprocess.CompletedProcess:
    with (tmp_path / "mok-comparison.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerows(rows)
    return subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)


def test_consistent_phases_pass(tmp_path: Path) -> None:
    done = _run(tmp_path, [["inf", "inference", 10.0, 10.9, 10], ["tr", "training", 3.0, 9.0, 12]])
    assert done.returncode == 0, done.stdout
    assert "2 executions, 0 inconsistent; inference |forward/combined - 1| max 0.083" in done.stdout


def test_inconsistent_phases_are_named(tmp_path: Path) -> None:
    done = _run(tmp_path, [["inf", "inference", 10.0, 11.2, 10], ["pk", "packing", 9.0, 9.0, 2]])
    assert done.returncode == 1
    assert "FAIL inf: forward 10 ms vs combined 11.2 ms" in done.stdout
    assert "FAIL pk: forward 9 ms >= combined 9 ms" in done.stdout


def test_missing_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2 and "mok-comparison.csv does not exist" in done.stderr


def test_a_ci_dataset_is_noted_as_outside_the_bound(tmp_path: Path) -> None:
    rows: list[list[object]] = [
        ["inf", "inference", 10.0, 10.9, 10, "ci"],
        ["tr", "training", 3.0, 9.0, 12, "cpu"],
    ]
    done = _run(tmp_path, rows, [*COLUMNS, "scale"])
    assert done.returncode == 0
    assert "executions at scale ci: the bound is meant for scale=cpu and full" in done.stderr
    rows[0][-1] = "full"
    done = _run(tmp_path, rows, [*COLUMNS, "scale"])
    assert done.returncode == 0 and done.stderr == ""
