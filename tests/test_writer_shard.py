"""The atomic shard writer: exact round trip, no overwrite, and no final file from a killed writer."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import replace

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline.data.dataset import Dataset
from pipeline.data.meta import ExecutionMeta
from pipeline.data.schema import METADATA_KEY, SCHEMA, Identity, RankWindows
from pipeline.data.writer import write_shard
from pipeline.matrix import EXECUTION_BY_ID
from pipeline.matrix.scale import TimingPlan, shape_for
from pipeline.tools.synthetic_shards import scale_preset, shard_metadata

EXECUTION = EXECUTION_BY_ID["training-ep32-f3072-imb2.0-mxfp8-dist-moe-fp8-dispatch"]
PHASES = ("forward", "backward", "combined")


def attempt(
    windows: int, attempt: int = 1, seed: int = 0
) -> tuple[Identity, list[RankWindows], ExecutionMeta]:
    """A 2-rank attempt with ``windows`` random windows per phase: its identity, rows and metadata."""
    rng = random.Random(seed)
    preset = scale_preset("cpu", 2)
    shape = shape_for(EXECUTION.workload, preset)
    plan = TimingPlan(1, windows, 30)
    meta = shard_metadata(EXECUTION, attempt, "123", shape, plan, "cpu", np.random.default_rng(seed))
    ranks = [
        RankWindows(r, "123", "cpu", {p: [rng.uniform(0.1, 100.0) for _ in range(windows)] for p in PHASES})
        for r in range(2)
    ]
    return Identity.of(EXECUTION, 2, 30, attempt), ranks, meta


def test_round_trip_rows_and_metadata(tmp_path):
    identity, ranks, meta = attempt(5, seed=7)
    path = write_shard(Dataset(tmp_path), identity, ranks, meta)
    assert path == Dataset(tmp_path).shard_path(EXECUTION.execution_id, 1)
    table = pq.read_table(path)
    assert table.schema.remove_metadata() == SCHEMA
    got = table.to_pylist()
    assert len(got) == 2 * 3 * 5
    for row in got:
        assert row["window_ms"] == ranks[row["rank"]].times[row["phase"]][row["window"]]
        assert (row["execution_id"], row["iterations"], row["attempt"], row["job_id"]) == (
            EXECUTION.execution_id, 30, 1, "123"
        )  # fmt: skip
    assert ExecutionMeta.from_json(json.loads(table.schema.metadata[METADATA_KEY])) == meta
    assert os.listdir(path.parent) == [path.name]  # no temporary file left behind


def test_never_overwrites_an_attempt(tmp_path):
    write_shard(Dataset(tmp_path), *attempt(3))
    before = Dataset(tmp_path).shard_path(EXECUTION.execution_id, 1).read_bytes()
    with pytest.raises(FileExistsError, match="attempt-1.parquet"):
        write_shard(Dataset(tmp_path), *attempt(6, seed=1))
    assert Dataset(tmp_path).shard_path(EXECUTION.execution_id, 1).read_bytes() == before


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda i, r, m: (replace(i, attempt=2), r, m), "rows say attempt=2, metadata 1"),
        (lambda i, r, m: (replace(i, execution_id="other"), r, m), "rows say execution_id='other'"),
        (lambda i, r, m: (i, [], m), "no rows to write"),
    ],
)
def test_bad_attempts_are_refused_and_nothing_is_written(tmp_path, change, message):
    with pytest.raises(ValueError, match=message):
        write_shard(Dataset(tmp_path), *change(*attempt(4)))
    assert not Dataset(tmp_path).shards_dir.exists()


WRITER = """
import sys
sys.path.insert(0, {root!r})
from tests.test_writer_shard import attempt
from pipeline.data.dataset import Dataset
from pipeline.data.writer import write_shard
data = attempt({n})
print("ready", flush=True)
write_shard(Dataset({dataset!r}), *data)
print("done", flush=True)
"""


@pytest.mark.slow
def test_a_writer_killed_mid_write_leaves_no_final_file(tmp_path):
    folder = Dataset(tmp_path).shard_dir(EXECUTION.execution_id)
    root = os.path.dirname(os.path.dirname(__file__))
    code = WRITER.format(root=root, n=70_000, dataset=str(tmp_path))
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    deadline = time.monotonic() + 60
    while not (folder.exists() and any(p.name.endswith(".tmp") for p in folder.iterdir())):
        assert proc.poll() is None, "the writer finished before it could be killed; write more rows"
        assert time.monotonic() < deadline
        time.sleep(0.0005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    names = os.listdir(folder)
    assert not Dataset(tmp_path).shard_path(EXECUTION.execution_id, 1).exists()
    assert all(n.startswith(".") and n.endswith(".tmp") for n in names)
