"""The phase account and rows that say what ran, through real sweeps (scale=ci, the local launcher):

- a slow phase planted on the real gloo ranks (``slow-combine``: the combine runs 40 ms longer on each
  rank, :mod:`pipeline.bench.plants`) lands in the published ``phaseCombineMS`` and in no other
  phase's column, against the same execution swept without it;
- a dataset made with ``max_ranks=1`` says ``none: 1 rank`` on every row, has no communication in its
  account, publishes NVLink empty and counts no all-to-all bytes, and its pairs and figures say 1
  rank; a ``device=cuda`` MXFP8 row of Hopper's kernels (no block-scaled MMA: a synthetic shard with
  sm90's metadata) says its products were emulated and is held to the BF16 peak.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pipeline import cost
from pipeline.base.vocabulary import LAYER_PHASES
from pipeline.bench.plants import PLANT_ENV, SLOW_S
from pipeline.matrix import EXECUTION_BY_ID
from pipeline.report import CSV_NAME, JSON_NAME, PAIRS_NAME, aggregate
from pipeline.report.accounts import UNCLAIMED_COLUMN, phase_column
from pipeline.report.figures import phase_figure, speedup_figure, time_figure
from pipeline.tools.synthetic_shards import shard_table, write_table

PLANTED = "inference-ep8-f1536-bf16-mok-native"


def _sweep(dataset: Path, *overrides: str, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pipeline.run",
            "--multirun",
            "scale=ci",
            f"dataset_dir={dataset}",
            *overrides,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _rows(dataset: Path, name: str = CSV_NAME) -> list[dict[str, str]]:
    with (dataset / name).open(newline="") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow
def test_a_slow_combine_lands_in_the_combine_column_and_nowhere_else(tmp_path: Path) -> None:
    plain, planted = tmp_path / "plain", tmp_path / "planted"
    one = ("workload=inference-ep8-f1536", "variant=mok-bf16")
    _sweep(plain, *one)
    plant = ",".join(f"slow-combine:{PLANTED}:{rank}" for rank in (0, 1))  # both ranks: neither waits
    _sweep(planted, *one, env={PLANT_ENV: plant})
    for dataset in (plain, planted):
        aggregate(dataset, figures=False, workers=1)
    (before,), (after,) = _rows(plain), _rows(planted)
    planted_ms = 1e3 * SLOW_S  # inference runs the combine once an iteration
    grew = {c: float(after[c] or 0) - float(before[c] or 0) for c in (*_phase_columns(), UNCLAIMED_COLUMN)}
    # host noise moves any column by a fifth of the plant at the very most (the plain run's combine
    # may hold a few ms of one rank waiting for the other, which the planted run's sleep absorbs)
    noise = planted_ms / 5
    assert grew[phase_column("combine", "MS")] > planted_ms - noise, grew
    assert all(abs(v) < noise for c, v in grew.items() if c != phase_column("combine", "MS")), grew
    # the timed iteration grew by the plant too, and the profiled one agrees with it
    assert float(after["iterationMS"]) - float(before["iterationMS"]) > planted_ms - noise
    assert 0.85 < float(after["profiledOverTimed"]) < 1.15
    for row in (before, after):  # phases and unclaimed add up to the profiled iteration
        parts = sum(float(row[c] or 0) for c in (*_phase_columns(), UNCLAIMED_COLUMN))
        assert parts == pytest.approx(float(row["profiledMS"]), rel=1e-4)


def _phase_columns() -> list[str]:
    return [phase_column(p, "MS") for p in LAYER_PHASES]


@pytest.mark.slow
def test_a_one_rank_dataset_says_so_everywhere(tmp_path: Path) -> None:
    dataset = tmp_path / "one"
    _sweep(dataset, "workload=inference-ep8-f1536", "variant=mok-bf16,dist-moe-bf16", "max_ranks=1")
    aggregate(dataset, workers=1)
    rows = _rows(dataset)
    assert len(rows) == 2
    for row in rows:
        assert (row["ranks"], row["communication"]) == ("1", "none: 1 rank")
        assert row[phase_column("dispatch", "MS")] == row[phase_column("combine", "MS")] == ""  # not zero
        assert row["nvlinkTxGBs"] == row["nvlinkRxGBs"] == ""
        assert float(row["profiledMS"]) > 0
        # the byte model counts no all-to-all staging on one rank: the forward's bytes by hand
        t, d, f, k = (int(row[c]) for c in ("tokens_run", "d_model", "d_ff_run", "top_k"))
        layer = cost.LayerShape(
            "inference", int(row["tokens"]), d, f, 384, k, 8, row["precision"], [1.0], 1, 4, 1
        )
        staged = cost.LayerShape(
            "inference", int(row["tokens"]), d, f, 384, k, 8, row["precision"], [1.0], 1, 4, 2
        )
        dispatch = "mxfp8" if row["pipeline"] == "fp8-dispatch" else "bf16"
        r = int(row["tokens"]) * k
        wire = d + d / 32 if dispatch == "mxfp8" else 4 * d
        assert float(row["hbmModelBytes"]) == pytest.approx(cost.iteration_bytes(layer, dispatch), rel=2e-5)
        assert cost.iteration_bytes(staged, dispatch) - cost.iteration_bytes(
            layer, dispatch
        ) == pytest.approx(4 * r * wire + 2 * r * d * 4)
    (pair,) = _rows(dataset, PAIRS_NAME)
    assert (pair["ranks"], pair["device"], pair["mxfp8Products"]) == ("1", "cpu", "")
    assert pair["nvlinkTxGBsRatio"] == ""
    document = json.loads((dataset / JSON_NAME).read_text())
    executions, pairs = document["executions"], document["pairs"]
    figures = [
        time_figure(8, executions, pairs),
        phase_figure(8, executions),
        speedup_figure(pairs, executions),
    ]
    for fig in figures:
        assert "1 rank" in fig.get_suptitle() and "1 ranks" not in fig.get_suptitle()
    assert all(", 1 rank" in ax.get_title() for ax in figures[0].axes if ax.get_title().startswith("EP8 "))
    ranks_said = next(d for d in document["meta"]["deviations"] if d["what"] == "ranks")
    assert "none: 1 rank" in ranks_said["ran"]
    page = (dataset / "report.html").read_text()
    assert "communication none: 1 rank" in page
    assert "<td>cuda</td><td>none (2)</td>" in page  # known absent on a CPU run, not unknown


def test_an_sm90_mxfp8_row_says_emulated_and_is_held_to_the_bf16_peak(tmp_path: Path) -> None:
    """Hopper's kernels (``cute-sm90``) multiply the BF16 values of MXFP8 operands: the row says so,
    its useful work is held to the BF16 peak, and one rank predicts no all-to-all."""
    rng = np.random.default_rng(90)
    for name in ("inference-ep8-f3072-mxfp8-dist-moe-fp8-dispatch", "inference-ep8-f3072-mxfp8-mok-native"):
        execution = EXECUTION_BY_ID[name]
        shard = shard_table(execution, 1, rng, ranks=1, device="NVIDIA H200", gemm="cute-sm90", account=True)
        write_table(tmp_path, shard)
    aggregate(tmp_path, workers=1)
    h200 = cost.HARDWARE["h200"]
    for row in _rows(tmp_path):
        assert (
            row["mxfp8Products"] == "emulated: BF16 tensor cores" and row["communication"] == "none: 1 rank"
        )
        assert float(row["usefulSOLPct"]) == pytest.approx(
            100 * float(row["usefulTFLOPsPerGPU"]) / h200.peak("bf16_tflops"), rel=2e-5
        )
        layer = cost.LayerShape("inference", 2048, 7168, 3072, 384, 6, 8, "mxfp8", [1.0], 1, 2, 1)
        dispatch = "mxfp8" if row["pipeline"] == "fp8-dispatch" else "bf16"
        light = cost.speed_of_light(layer, "h200", dispatch=dispatch, routed_tflops=h200.peak("bf16_tflops"))
        assert light.all_to_all_ms == 0.0
        assert float(row["speedOfLightMS"]) == pytest.approx(light.roofline_ms, rel=2e-5)
        assert row["nvlinkTxGBs"] == "" and row[phase_column("combine", "SOLPct")] == ""
        assert row[phase_column("fprop", "SOLPct")] != ""  # held to the BF16 peak of what ran
    (pair,) = _rows(tmp_path, PAIRS_NAME)
    assert (pair["ranks"], pair["device"], pair["mxfp8Products"]) == (
        "1",
        "NVIDIA H200",
        "emulated: BF16 tensor cores",
    )
    document = json.loads((tmp_path / JSON_NAME).read_text())
    fig = time_figure(8, document["executions"], document["pairs"])
    assert "MXFP8 emulated: BF16 tensor cores" in fig.get_suptitle()
    assert any("MXFP8 emulated: BF16 tensor cores" in ax.get_title() for ax in fig.axes)
    assert "MXFP8 products emulated: BF16 tensor cores" in (tmp_path / "report.html").read_text()
