"""jobs/check-aggregate.py: passes on what the aggregation publishes, fails on any tampered value."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from pipeline.matrix import EXECUTIONS
from pipeline.report import CSV_NAME, JSON_NAME, PAIRS_NAME, aggregate
from pipeline.tools.synthetic_shards import shard_table, write_table

CHECKER = Path(__file__).resolve().parents[1] / "jobs" / "check-aggregate.py"
SHAPES = ("inference-ep16-f3072", "packing-ep64-f3072-profile-b")
SUBSET = [e for e in EXECUTIONS if e.workload.name in SHAPES]
TORN = SUBSET[-1].execution_id


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dataset = tmp_path_factory.mktemp("checked")
    rng = np.random.default_rng(20261203)
    for e in SUBSET:
        write_table(dataset, shard_table(e, 1, rng, ranks=3))
    torn = write_table(dataset, shard_table(SUBSET[-1], 2, rng, ranks=3))
    torn.write_bytes(torn.read_bytes()[:200])
    aggregate(dataset, figures=False)
    return dataset


def _check(dataset: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECKER), str(dataset)], capture_output=True, text=True)


def _edit_csv(path: Path, change: Callable[[list[dict[str, str]]], None]) -> None:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        columns, rows = reader.fieldnames, list(reader)
    change(rows)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, columns, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def test_checker_accepts_the_published_files(published: Path) -> None:
    run = _check(published)
    assert run.returncode == 0, run.stderr
    assert "checked 10 executions and 6 pairs" in run.stdout


def _scale(column: str, factor: float, index: int = 0) -> Callable[[list[dict[str, str]]], None]:
    def change(rows: list[dict[str, str]]) -> None:
        rows[index][column] = f"{float(rows[index][column]) * factor:.6g}"

    return change


def _flip_selected(rows: list[dict[str, str]]) -> None:
    rows[0]["selected"] = "false" if rows[0]["selected"] == "true" else "true"


@pytest.mark.parametrize(
    "name,change,message",
    [
        (CSV_NAME, _scale("iterationMS", 1.001), "iterationMS published"),
        (CSV_NAME, _scale("forwardMS", 0.999, index=3), "forwardMS published"),
        (CSV_NAME, _scale("backwardMS", 1.01, index=-1), "backwardMS published"),
        (PAIRS_NAME, _scale("speedup", 1.0005), "speedup published"),
        (PAIRS_NAME, _scale("mokIterationMS", 1.01), "mokIterationMS published"),
        (PAIRS_NAME, _flip_selected, "selected="),
    ],
)
def test_checker_rejects_a_tampered_value(
    published: Path, tmp_path: Path, name: str, change: Callable, message: str
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(published, copy)
    _edit_csv(copy / name, change)
    run = _check(copy)
    assert run.returncode == 1 and message in run.stderr and "FAILED: 1 mismatch" in run.stderr, run.stderr


def test_checker_requires_unused_newer_attempts_to_be_reported(published: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(published, copy)
    document = json.loads((copy / JSON_NAME).read_text())
    assert [s["path"] for s in document["meta"]["shards_skipped"]] == [
        f"shards/execution={TORN}/attempt-2.parquet"
    ]
    document["meta"]["shards_skipped"] = []
    (copy / JSON_NAME).write_text(json.dumps(document))
    run = _check(copy)
    assert run.returncode == 1 and f"{TORN}: newer attempt-2.parquet neither used nor reported" in run.stderr
