"""The atomic shard writer: exact round trip, no overwrite, and no final file from a killed writer."""

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from pipeline.data.dataset import Dataset
from pipeline.data.schema import METADATA_KEY, SCHEMA, SCHEMA_VERSION
from pipeline.data.writer import write_shard

EXECUTION = "training-ep32-f3072-imb2.0-mxfp8-dist-moe-fp8-dispatch"


def rows(n: int, seed: int = 0) -> list[dict]:
    import random

    rng = random.Random(seed)
    return [
        {
            "execution_id": EXECUTION,
            "workload_id": "training-ep32-f3072-imb2.0-mxfp8",
            "kind": "training",
            "profile": "none",
            "precision": "mxfp8",
            "implementation": "dist-moe",
            "pipeline": "fp8-dispatch",
            "ep": 32,
            "ranks": 2,
            "d_ff": 3072,
            "rank": i % 2,
            "window": i % 5,
            "iterations": 30,
            "phase": ("forward", "backward", "combined")[i % 3],
            "window_ms": rng.uniform(0.1, 100.0),
            "attempt": 1,
            "job_id": "123",
            "device": "cpu",
        }
        for i in range(n)
    ]


def test_round_trip_rows_and_metadata(tmp_path):
    data = rows(30, seed=7)
    shape = {"nominal_tokens": 128, "layer_tokens": [128]}
    path = write_shard(Dataset(tmp_path), EXECUTION, 1, data, {"shape": shape})
    assert path == Dataset(tmp_path).shard_path(EXECUTION, 1)
    table = pq.read_table(path)
    assert table.schema.remove_metadata() == SCHEMA
    assert table.to_pylist() == data
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    assert meta == {
        "shape": shape,
        "schema_version": SCHEMA_VERSION,
        "execution_id": EXECUTION,
        "attempt": 1,
    }
    assert os.listdir(path.parent) == [path.name]  # no temporary file left behind


def test_never_overwrites_an_attempt(tmp_path):
    write_shard(Dataset(tmp_path), EXECUTION, 1, rows(3), {})
    before = Dataset(tmp_path).shard_path(EXECUTION, 1).read_bytes()
    with pytest.raises(FileExistsError, match="attempt-1.parquet"):
        write_shard(Dataset(tmp_path), EXECUTION, 1, rows(6, seed=1), {})
    assert Dataset(tmp_path).shard_path(EXECUTION, 1).read_bytes() == before


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: r.pop("window_ms"), "window_ms"),
        (lambda r: r.update(execution_id="other"), "other"),
        (lambda r: r.update(rank="zero"), "zero"),
    ],
)
def test_bad_rows_are_refused_and_nothing_is_written(tmp_path, change, message):
    data = rows(4)
    change(data[2])
    with pytest.raises((ValueError, TypeError), match=message):
        write_shard(Dataset(tmp_path), EXECUTION, 1, data, {})
    assert not Dataset(tmp_path).shard_path(EXECUTION, 1).parent.exists() or not any(
        Dataset(tmp_path).shard_path(EXECUTION, 1).parent.iterdir()
    )


WRITER = """
import sys
sys.path.insert(0, {tests!r})
from test_writer_shard import EXECUTION, rows
from pipeline.data.dataset import Dataset
from pipeline.data.writer import write_shard
data = rows({n})
print("ready", flush=True)
write_shard(Dataset({dataset!r}), EXECUTION, 1, data, {{}})
print("done", flush=True)
"""


def test_a_writer_killed_mid_write_leaves_no_final_file(tmp_path):
    folder = Dataset(tmp_path).shard_path(EXECUTION, 1).parent
    code = WRITER.format(tests=os.path.dirname(__file__), n=400_000, dataset=str(tmp_path))
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
    assert not Dataset(tmp_path).shard_path(EXECUTION, 1).exists()
    assert all(n.startswith(".") and n.endswith(".tmp") for n in names)
