"""``aggregate --estimate`` end to end: the estimate runs as its own command (``python -m
pipeline.estimate --dataset``) and keeps what the dataset publishes, the aggregation's own process
never imports the estimate, and a second run computes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline import REPO_ROOT
from pipeline.data import estimates
from pipeline.matrix import EXECUTION_BY_ID
from pipeline.report import JSON_NAME
from pipeline.tools.synthetic_shards import shard_table, write_table

EXECUTION = "inference-ep8-f1536-bf16-mok-native"  # the cheapest estimate: seconds of CPU


@pytest.mark.slow
def test_aggregate_estimate_keeps_and_publishes_without_importing_the_estimate(tmp_path: Path) -> None:
    dataset = tmp_path / "d"
    shard = shard_table(EXECUTION_BY_ID[EXECUTION], 1, np.random.default_rng(3), ranks=4, device="cpu")
    write_table(dataset, shard)
    env = {**os.environ, "MOE_BENCH_CACHE": str(tmp_path / "cache")}
    command = [sys.executable, "-X", "importtime", "-m", "pipeline.aggregate", str(dataset), "--estimate"]
    done = subprocess.run(
        [*command, "--no-figures"], capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        f"{dataset}: 1 estimate(s) on gb300: 0 kept before, 1 computed and kept now, 0 failed" in done.stdout
    )
    # -X importtime is the aggregation's own: its import lines name every module it loaded
    loaded = [
        line.rsplit("|", 1)[-1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    ]
    assert "pipeline.report.executions" in loaded
    assert [m for m in loaded if m.startswith("pipeline.estimate") or m == "torch"] == []
    (row,) = json.loads((dataset / JSON_NAME).read_text())["executions"]
    kept = json.loads((tmp_path / "cache" / f"estimates-{estimates.fingerprint()}.json").read_text())
    assert list(kept) == [f"{EXECUTION}|gb300"]  # a dataset of no GPU preset: the report's hardware
    assert (row["estimatedPeakGiB"], row["opsPerIteration"]) == (
        pytest.approx(kept[f"{EXECUTION}|gb300"]["timed_peak_gib"], rel=6e-6),
        kept[f"{EXECUTION}|gb300"]["device_ops"],
    )
    again = subprocess.run(
        [sys.executable, "-m", "pipeline.estimate", "--dataset", str(dataset)],
        capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=300,
    )  # fmt: skip
    assert (again.returncode, again.stdout.strip()) == (
        0,
        f"{dataset}: 1 estimate(s) on gb300: 1 kept before, 0 computed and kept now, 0 failed",
    )
