"""What the published files say about themselves: the matrix's choices the report does not state, and
every way what ran differs from what the report measured, from what each shard recorded."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipeline.bench import contention
from pipeline.data.meta import Contention, ExecutionMeta
from pipeline.data.reader import read_shard
from pipeline.data.schema import METADATA_KEY
from pipeline.matrix import EXECUTION_BY_ID, EXECUTIONS
from pipeline.matrix.assumptions import ASSUMPTIONS
from pipeline.moe import ExpertWeights, MoEConfig, build_layer
from pipeline.report.deviations import deviations
from pipeline.tools.synthetic_shards import shard_table, write_table

SPIN = "import time\nend = time.time() + 3\nwhile time.time() < end: pass"
MX = EXECUTION_BY_ID["training-ep32-f3072-imb2.0-mxfp8-dist-moe-fp8-dispatch"]
PACKING = EXECUTION_BY_ID["packing-ep64-f3072-profile-a-bf16-mok-native"]


def _with(table: pa.Table, **changes: object) -> pa.Table:
    meta = ExecutionMeta.from_json(json.loads(table.schema.metadata[METADATA_KEY]))
    return table.replace_schema_metadata(
        {METADATA_KEY: json.dumps(replace(meta, **changes).to_json()).encode()}
    )


def test_the_six_shapes_the_report_does_not_name_are_thirty_executions():
    by = {a.what: set(a.executions) for a in ASSUMPTIONS}
    six = by["imbalanced inference and training"] | by["balanced packing"]
    assert len(six) == 30 and {EXECUTION_BY_ID[e].workload.name for e in six} == {
        *(f"inference-ep{ep}-f3072-imb2.0" for ep in (8, 16)),
        *(f"training-ep{ep}-f3072-imb2.0" for ep in (32, 64)),
        *(f"packing-ep{ep}-f3072-profile-balanced" for ep in (32, 64)),
    }
    assert len(by["Dist-MoE MXFP8 pipelines"]) == 44  # 22 shapes x fp8-dispatch, bf16-dispatch
    assert by["routing outside the timed iteration"] == {e.execution_id for e in EXECUTIONS}


def test_a_full_scale_run_on_the_reports_gpus_deviates_in_nothing(tmp_path: Path):
    rng = np.random.default_rng(0)
    shards = [
        read_shard(write_table(tmp_path, shard_table(e, 1, rng, device="NVIDIA GB300")))
        for e in (MX, PACKING)
    ]
    assert deviations(shards) == []


def test_every_deviation_names_its_executions(tmp_path: Path):
    rng = np.random.default_rng(1)
    cpu = shard_table(MX, 1, rng, ranks=2, scale="ci")  # float32, gloo, torch GEMMs, 2 of 32 ranks
    crowded = _with(
        shard_table(PACKING, 1, rng, ranks=64, device="NVIDIA GB300"),
        contention=Contention(4, 8, cpu_wait_share=0.6, oversubscribed=True),
    )
    found = {d.what: d for d in deviations([read_shard(write_table(tmp_path, t)) for t in (cpu, crowded)])}
    assert set(found) == {
        "scale", "dtype", "collective", "grouped GEMM", "MXFP8 products", "ranks", "tracked rank's tokens",
        "timing windows", "CUDA graphs", "host contention",
    }  # fmt: skip
    assert found["host contention"].executions == (PACKING.execution_id,)
    for what in set(found) - {"host contention"}:
        assert found[what].executions == (MX.execution_id,), what
    assert (
        found["dtype"].ran == "float32 (1)"
        and found["ranks"].ran == "2 of EP ranks (gloo all-to-all, 2 ranks on one node) (1)"
    )
    assert found["tracked rank's tokens"].ran.startswith("rank 0 fed up to ")  # imbalance 2.0 on 2 of 32


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.slow
def test_the_sampler_sees_a_crowded_host():
    """Busy processes beyond the cores make a busy thread wait for a core for more than a third of its
    runnable time, more than it waited without them (whatever else the host runs)."""
    cores = contention.cores()
    with contention.sampled() as quiet:
        _spin(0.5)
    busy = [
        subprocess.Popen(
            [sys.executable, "-c", "import time\nend = time.time() + 3\nwhile time.time() < end: pass"]
        )
        for _ in range(3 * cores)
    ]
    try:
        time.sleep(0.5)
        with contention.sampled() as crowded:
            _spin(1.0)
    finally:
        for p in busy:
            p.kill()
            p.wait()
    calm, denied = quiet.wait_share(), crowded.wait_share()
    assert calm is not None and denied is not None
    assert denied > contention.OVERSUBSCRIBED and denied > calm
    record = contention.contention([calm, denied], 2)
    assert record.oversubscribed and record.cpu_wait_share == denied and record.cores == cores
    with contention.sampled() as idle:  # a block that never ran on a CPU says nothing
        pass
    assert (
        contention.Sampler(idle.start).wait_share() is None
        and contention.Sampler(None, (1, 1)).wait_share() is None
    )


@pytest.mark.parametrize("precision", ["bf16", "mxfp8"])
def test_the_emulation_only_weight_copies_are_counted(precision):

    cfg = MoEConfig(
        64,
        32,
        8,
        2,
        implementation="mok",
        pipeline="native",
        precision=precision,
        dtype=__import__("torch").float32,
    )
    layer = build_layer(cfg, ExpertWeights.random(cfg, 0))
    expected = 0 if precision == "bf16" else 4 * (layer.w1.numel() + layer.w2.numel())
    assert layer.mx_value_bytes() == expected
