"""The validated shard reader: good shards read back exactly; every kind of bad shard is rejected
with a reason naming what is wrong."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipeline.base.vocabulary import PHASES
from pipeline.data.dataset import Dataset
from pipeline.data.meta import ExecutionMeta
from pipeline.data.reader import ShardError, read_shard
from pipeline.data.schema import METADATA_KEY, SCHEMA, Identity, RankWindows, ShardIdentity
from pipeline.data.writer import write_shard
from pipeline.matrix import EXECUTIONS
from pipeline.tools.synthetic_shards import shard_table, synthetic_topology, write_table

VERSION, READS = ExecutionMeta.VERSION, ", ".join(map(str, ExecutionMeta.READABLE))

BY_ID = {e.execution_id: e for e in EXECUTIONS}
TRAINING = BY_ID["training-ep32-f3072-imb2.0-mxfp8-dist-moe-fp8-dispatch"]
INFERENCE = BY_ID["inference-ep8-f1536-bf16-mok-native"]
PACKING_DIST = "packing-ep32-f3072-profile-b-bf16-dist-moe-bf16"
PACKING_MOK = "packing-ep32-f3072-profile-b-bf16-mok-native"


def _table(rng: np.random.Generator, attempt: int = 1) -> pa.Table:
    return shard_table(TRAINING, attempt, rng, ranks=4)


def _meta(table: pa.Table) -> dict:
    return json.loads(table.schema.metadata[METADATA_KEY])


def _with_meta(table: pa.Table, change: Callable[[dict], None]) -> pa.Table:
    meta = _meta(table)
    change(meta)
    return table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()})


def _with_column(table: pa.Table, name: str, values: pa.Array) -> pa.Table:
    return table.set_column(table.schema.get_field_index(name), table.schema.field(name), values)


def test_good_shard_reads_back_exactly(tmp_path: Path, rng: np.random.Generator) -> None:
    table = _table(rng, attempt=3)
    shard = read_shard(write_table(tmp_path, table))
    assert shard.execution_id == TRAINING.execution_id and shard.attempt == 3
    assert shard.identity.ranks == 4 and shard.identity.device == "cpu"
    assert shard.meta.to_json() == _meta(table)
    np.testing.assert_array_equal(shard.window_ms, table.column("window_ms").to_numpy())
    np.testing.assert_array_equal(shard.phase, table.column("phase").to_numpy(zero_copy_only=False))
    np.testing.assert_array_equal(shard.rank, table.column("rank").to_numpy())


def test_inference_needs_no_backward_rows(tmp_path: Path, rng: np.random.Generator) -> None:
    table = shard_table(INFERENCE, 1, rng, ranks=2)
    assert set(table.column("phase").to_pylist()) == {"forward", "combined"}
    assert read_shard(write_table(tmp_path, table)).execution_id == INFERENCE.execution_id


def _drop_last_row(t: pa.Table) -> pa.Table:
    return t.slice(0, t.num_rows - 1)


def _duplicate_window(t: pa.Table) -> pa.Table:
    window = t.column("window").to_numpy().copy()
    window[1] = window[0]  # same rank, phase: one window twice, another missing
    return _with_column(t, "window", pa.array(window, pa.int32()))


def _drop_backward(t: pa.Table) -> pa.Table:
    return t.filter(pc.not_equal(t.column("phase"), "backward"))


def _unknown_phase(t: pa.Table) -> pa.Table:
    return _with_column(t, "phase", pa.array(["warmup"] + t.column("phase").to_pylist()[1:]))


def _rank_out_of_range(t: pa.Table) -> pa.Table:
    return _with_column(t, "rank", pa.array(np.full(t.num_rows, 7), pa.int32()))


def _varying_device(t: pa.Table) -> pa.Table:
    return _with_column(t, "device", pa.array(["NVIDIA H200"] + ["cpu"] * (t.num_rows - 1)))


def _float32_times(t: pa.Table) -> pa.Table:
    meta = t.schema.metadata
    fields = [pa.field("window_ms", pa.float32(), False) if f.name == "window_ms" else f for f in SCHEMA]
    return t.cast(pa.schema(fields)).replace_schema_metadata(meta)


def _zero_time(t: pa.Table) -> pa.Table:
    ms = t.column("window_ms").to_numpy().copy()
    ms[3] = 0.0
    return _with_column(t, "window_ms", pa.array(ms))


def _nan_time(t: pa.Table) -> pa.Table:
    ms = t.column("window_ms").to_numpy().copy()
    ms[0] = np.nan
    return _with_column(t, "window_ms", pa.array(ms))


def _set(*keys: str, value: object) -> Callable[[pa.Table], pa.Table]:
    def change(meta: dict) -> None:
        for key in keys[:-1]:
            meta = meta[key]
        meta[keys[-1]] = value

    return lambda t: _with_meta(t, change)


def _eight_ranks(t: pa.Table) -> pa.Table:
    """Metadata of 8 ranks, its topology too, over rows of 4."""

    def change(meta: dict) -> None:
        meta["shape"]["ranks"] = 8
        meta["topology"] = synthetic_topology(8, on_gpu=False).to_json()

    return _with_meta(t, change)


@pytest.mark.parametrize(
    "corrupt,reason",
    [
        (_drop_last_row, "incomplete: 59 rows cover 59 of 60"),
        (_duplicate_window, "incomplete: 60 rows cover 59 of 60"),
        (_drop_backward, r"incomplete: no rows for phase\(s\) \['backward'\]"),
        (_unknown_phase, r"unknown phase\(s\) \['warmup'\]; allowed: forward, backward, combined"),
        (_rank_out_of_range, "rank or window outside the declared 4 ranks x 5 windows"),
        (_varying_device, r"column\(s\) \['device'\] vary between rows"),
        (_float32_times, f"columns differ from schema version {VERSION}"),
        (_zero_time, "window_ms must be positive and finite"),
        (_nan_time, "window_ms must be positive and finite"),
        (_set("schema_version", value=2), r"metadata shape.warmup is missing \(read from schema_version 2\)"),
        (
            _set("schema_version", value=VERSION + 1),
            f"unknown schema_version {VERSION + 1}; this reader reads {READS}",
        ),
        (_set("schema_version", value=None), "unknown schema_version None"),
        (_set("timing", "plan", "windows", value=6), "incomplete: 60 rows cover 60 of 72"),
        (
            _set("timing", "plan", "windows", value=2.5),
            "metadata timing.plan.windows must be an integer, got 2.5",
        ),
        (_set("shape", "nominal_tokens", value=0), "metadata shape: nominal_tokens must be >= 1, got 0"),
        (_set("shape", "layer_tokens", value=None), "metadata shape.layer_tokens must be a list, got None"),
        (_set("shape", "layer_tokens", value=[16, 16]), "must name the same layers .>= 1., got \\[16, 16\\]"),
        (_set("shape", "layer_tokens", value=[0]), "metadata shape: layer_tokens must be >= 1"),
        (
            _set("shape", "layer_loads", value=[]),
            "layer_tokens, tracked_rows and layer_loads must name the same",
        ),
        (
            _set("shape", "dtype", value="float16"),
            "metadata shape: dtype 'float16'; allowed: bfloat16, float32",
        ),
        (_eight_ranks, "metadata shape.ranks=8 but rows say 4"),
        (_set("shape", "ranks", value=8), "metadata topology has 4 ranks' bindings, shape.ranks 8"),
        (_set("job_id", value="other"), "metadata job_id='other' but rows say"),
        (
            _set("nvlink", "tx_bytes_per_s", value=-1.0),
            r"metadata nvlink: tx_bytes_per_s must be >= 0, got -1.0",
        ),
        (_set("memory", value=None), "metadata memory must be an object, got None"),
        (_set("saved_state", value=[{"layer": 0}]), r"metadata saved_state\[0\].factor is missing"),
        (_set("policy", value=None), f"metadata policy is null, but schema_version {VERSION} records it"),
        (_set("sanity", "passed", value=1), "metadata sanity.passed must be a boolean, got 1"),
        (_set("attempt", value=True), "metadata attempt must be an integer, got True"),
    ],
)
def test_bad_shard_is_rejected_with_reason(
    tmp_path: Path, corrupt: Callable, reason: str, rng: np.random.Generator
) -> None:
    path = write_table(tmp_path, corrupt(_table(rng)))
    with pytest.raises(ShardError, match=reason) as caught:
        read_shard(path)
    assert caught.value.path == path and str(path) in str(caught.value)


@pytest.mark.parametrize("keep", [0.0, 0.5, 0.99])
def test_torn_file_is_rejected(tmp_path: Path, keep: float, rng: np.random.Generator) -> None:
    path = write_table(tmp_path, _table(rng))
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ShardError, match="unreadable parquet"):
        read_shard(path)


def test_file_name_must_match_the_shard(tmp_path: Path, rng: np.random.Generator) -> None:
    table = _table(rng, attempt=1)
    wrong_attempt = Dataset(tmp_path).shard_path(TRAINING.execution_id, 2)
    wrong_attempt.parent.mkdir(parents=True)
    pq.write_table(table, wrong_attempt)
    with pytest.raises(ShardError, match="file name says attempt=2 but the shard says 1"):
        read_shard(wrong_attempt)
    odd_name = wrong_attempt.with_name("attempt-one.parquet")
    pq.write_table(table, odd_name)
    with pytest.raises(ShardError, match=r"file name must be attempt-<n>\.parquet"):
        read_shard(odd_name)


@pytest.mark.parametrize("statistics", [True, False])
def test_identity_is_checked_with_or_without_column_statistics(
    tmp_path: Path, statistics: bool, rng: np.random.Generator
) -> None:
    """Writers may omit parquet statistics: the reader then decodes the columns instead."""
    table = _table(rng)
    path = Dataset(tmp_path).shard_path(TRAINING.execution_id, 1)
    path.parent.mkdir(parents=True)
    pq.write_table(table, path, write_statistics=statistics, row_group_size=7)
    assert read_shard(path).identity.job_id == table.column("job_id")[0].as_py()
    pq.write_table(_varying_device(table), path, write_statistics=statistics, row_group_size=7)
    with pytest.raises(ShardError, match=r"column\(s\) \['device'\] vary between rows"):
        read_shard(path)


def test_null_values_are_rejected(tmp_path: Path, rng: np.random.Generator) -> None:
    table = _table(rng)
    nullable = pa.schema([f.with_nullable(True) for f in SCHEMA], metadata=table.schema.metadata)
    for column in ("device", "window_ms"):
        values = table.column(column).to_pylist()
        with_null = table.cast(nullable)
        with_null = with_null.set_column(
            SCHEMA.get_field_index(column), nullable.field(column), pa.array([None, *values[1:]])
        )
        path = write_table(tmp_path, with_null)
        with pytest.raises(ShardError, match=rf"null values in column\(s\) \['{column}'\]"):
            read_shard(path)


def test_shard_without_metadata_is_rejected(tmp_path: Path, rng: np.random.Generator) -> None:
    path = Dataset(tmp_path).shard_path(TRAINING.execution_id, 1)
    path.parent.mkdir(parents=True)
    pq.write_table(_table(rng).replace_schema_metadata(None), path)
    with pytest.raises(ShardError, match="no 'execution' metadata"):
        read_shard(path)


def test_reads_what_the_execution_writer_writes(tmp_path: Path, rng: np.random.Generator) -> None:
    """The execution stage's atomic writer and this reader agree on the format."""
    meta = ExecutionMeta.from_json(_meta(_table(rng, attempt=2)))
    windows = meta.timing.plan.windows
    ranks = [
        RankWindows(
            r, meta.job_id, "cpu", {p: list(rng.uniform(1, 2, meta.timing.plan.windows)) for p in PHASES}
        )
        for r in range(meta.shape.ranks)
    ]
    identity = Identity.of(TRAINING, meta.shape.ranks, meta.timing.plan.iterations, 2)
    shard = read_shard(write_shard(Dataset(tmp_path), identity, ranks, meta))
    assert shard.meta == meta and shard.identity == ShardIdentity(
        **asdict(identity), job_id=meta.job_id, device="cpu"
    )
    for r in ranks:
        for phase, windows in r.times.items():
            np.testing.assert_array_equal(
                shard.window_ms[(shard.rank == r.rank) & (shard.phase == phase)], windows
            )
