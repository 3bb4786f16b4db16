"""Device records in git: every document under docs/gpu-runs/ keeps its run's records beside it and
regenerates its tables from them by one command; the kernel-rate table they measured feeds the
expectation, which aggregation publishes beside each measured iteration of that device (a table that
cannot be read is not used, and the document says why)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from jobs.gpu_records import kernel_rates, records
from pipeline import cost
from pipeline.commands.aggregate import main as aggregate_main
from pipeline.matrix import EXECUTION_BY_ID
from pipeline.report import JSON_NAME
from pipeline.tools.synthetic_shards import shard_table, write_table

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "docs" / "gpu-runs"
FIRST = RUNS / "2026-12-04-h200"


@pytest.mark.parametrize("document", sorted(RUNS.glob("*.md")), ids=lambda p: p.stem)
def test_every_run_document_is_its_records_tables(document: Path) -> None:
    assert document.with_suffix("").is_dir(), f"{document.name} has no records folder beside it"
    done = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "gpu_records.py"), str(document), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert document.read_text().count("<!-- records: ") >= 5


def test_the_first_run_s_records_say_they_are_transcribed_and_give_its_rates() -> None:
    found = records(FIRST)
    assert found[0]["name"] == "transcribed" and "were not kept" in found[0]["note"]
    table = kernel_rates(found, "NVIDIA H200", "transcribed")
    # the default kernels at the report's 24 shapes, each of the four ops
    assert len(table["gemms"]) == 24 * 4
    assert (table["dense_tflops"], table["hbm_gb_s"], table["link_gb_s"]) == (804.1, 4418.0, None)
    up = next(
        g
        for g in table["gemms"]
        if (g["op"], g["groups"], g["d_ff"], g["projection"]) == ("wgrad", 12, 3072, "up")
    )
    assert up["tflops"] == 373.0  # D7168-F3072-EP32-up, as the document prints it


def _rates_file(folder: Path) -> Path:
    gemms = [
        {"op": op, "d_model": 7168, "d_ff": 1536, "groups": 48, "projection": p, "tflops": rate}
        for op, rate in (("fprop", 400.0), ("dgrad", 500.0), ("wgrad", 200.0), ("mx", 150.0))
        for p in ("up", "down")
    ]
    table = {"device": "NVIDIA H200", "source": "by hand", "dense_tflops": 800.0, "hbm_gb_s": 4000.0,
             "link_gb_s": None, "gemms": gemms}  # fmt: skip
    path = folder / "rates.json"
    path.write_text(json.dumps(table))
    return path


def test_aggregation_publishes_the_expectation_of_the_device_s_measured_rates(tmp_path: Path) -> None:
    dataset = tmp_path / "d"
    rng = np.random.default_rng(4)
    for name in ("inference-ep8-f1536-bf16-mok-native", "inference-ep8-f1536-mxfp8-mok-native"):
        shard = shard_table(
            EXECUTION_BY_ID[name], 1, rng, ranks=1, device="NVIDIA H200", gemm="cute-sm90", account=True
        )
        write_table(dataset, shard)
    write_table(
        dataset, shard_table(EXECUTION_BY_ID["inference-ep8-f1536-bf16-dist-moe-bf16"], 1, rng, ranks=1)
    )
    assert aggregate_main([str(dataset), "--no-figures", "--rates", str(_rates_file(tmp_path))]) == 0
    document = json.loads((dataset / JSON_NAME).read_text())
    assert document["meta"]["kernel_rates"] == "NVIDIA H200: by hand"
    assert (dataset / "kernel-rates.json").is_file()  # the table travels with the dataset
    rows = {r["execution_id"]: r for r in document["executions"]}
    accounts = {a["execution_id"]: a for a in document["accounts"]}
    for name in ("inference-ep8-f1536-bf16-mok-native", "inference-ep8-f1536-mxfp8-mok-native"):
        row = rows[name]
        # rank 0's rows at the measured rates: the GEMMs' FLOPs at the rates by hand, the rest at HBM
        rows_run = 2048 * 6  # one rank holds rank 0's 48 experts and its T x K rows, load 1
        routed = 6 * rows_run * 7168 * 1536
        rate = {"bf16": (400.0, 400.0), "mxfp8": (150.0, 150.0)}[row["precision"]]
        gemm_ms = 1e3 * (routed * 2 / 3 / (rate[0] * 1e12) + routed / 3 / (rate[1] * 1e12))
        fprop = next(p for p in accounts[name]["phases"] if p["phase"] == "fprop")
        assert fprop["expected_ms"] == pytest.approx(gemm_ms, rel=1e-5)
        expected = sum(p["expected_ms"] for p in accounts[name]["phases"] if p["expected_ms"] is not None)
        assert row["expectedMS"] == pytest.approx(expected, rel=1e-5)
        assert row["measuredOverExpected"] == pytest.approx(row["iterationMS"] / row["expectedMS"], rel=1e-5)
    assert rows["inference-ep8-f1536-bf16-dist-moe-bf16"]["expectedMS"] is None  # a CPU: not that device
    # a kept table that does not read is not used, and the document says why
    (dataset / "kernel-rates.json").write_text('{"device": "NVIDIA H200"}')
    assert aggregate_main([str(dataset), "--no-figures"]) == 0
    document = json.loads((dataset / JSON_NAME).read_text())
    assert document["meta"]["kernel_rates"].startswith("not used: kernel rates 'kernel-rates.json': ")
    assert all(r["expectedMS"] is None for r in document["executions"])


def test_the_cost_the_expectation_feeds_matches_the_run_s_table() -> None:
    """The 2026-12-04 expectation of one execution from the committed records, through the cost."""
    from jobs.gpu_records import expectation

    table = expectation(records(FIRST))
    line = next(row for row in table.splitlines() if row.startswith("| training-ep32-f3072-bf16-mok-native "))
    cells = [c.strip() for c in line.strip("|").split("|")]
    raw = kernel_rates(records(FIRST), "NVIDIA H200", "x")
    rates = cost.KernelRates(**{**raw, "gemms": tuple(cost.GemmRate(**g) for g in raw["gemms"])})
    layer = cost.LayerShape("training", 2048, 7168, 3072, 384, 6, 32, "bf16", [1.0], 1, 2, 1)
    expected = cost.expected_phases(layer, [2048], [2048 * 6], rates)
    assert expected is not None
    assert float(cells[2]) == pytest.approx(sum(expected.values()), abs=0.005)
    assert float(cells[3]) == pytest.approx(16.25 / sum(expected.values()), abs=0.005)


def _cells(text: str) -> list[list[str]]:
    """A rendered table's body rows, as their cells."""
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()[2:]]


def test_the_second_window_s_tables_read_the_records_the_device_run_writes() -> None:
    """Records shaped as jobs/gpu_run writes them (its plain dry run renders its own in
    tests/test_gpu_run.py): a pair with and without an interval, a packing peak beside its estimate,
    a loopback case whose graphs replayed, two ranks' gate and a grouped job's cost."""
    from jobs.gpu_records import costs, loopback, packing, pairs, ranks

    pair = {"stage": "pipeline", "name": "pair", "workload_id": "inference-ep8-f1536-bf16", "ranks": 1,
            "device": "NVIDIA H200", "mok_execution_id": "m", "dist_execution_id": "d", "mokIterationMS": 1.5,
            "distIterationMS": 1.2, "speedup": 1.25, "speedupLow": 1.1, "speedupHigh": 1.4}  # fmt: skip
    lone = {**pair, "workload_id": "w2", "speedupLow": None, "speedupHigh": None}
    assert _cells(pairs([pair, lone, {"stage": "pipeline", "name": "phases"}])) == [
        ["inference-ep8-f1536-bf16", "m", "d", "1 x NVIDIA H200", "1.50", "1.20", "1.250 [1.100, 1.400]"],
        ["w2", "m", "d", "1 x NVIDIA H200", "1.50", "1.20", "1.250 [no interval]"],
    ]
    peak = {"stage": "packing", "name": "peak", "execution": "p", "peak_allocated_gib": 70.0,
            "estimated_peak_gib": 71.44183, "estimate_preset": "h200",
            "measured_over_estimate": 70.0 / 71.44183}  # fmt: skip
    assert _cells(packing([peak])) == [["p", "70.00", "71.44 (h200)", "0.980", ""]]
    case = {"stage": "loopback", "name": "mok", "collective": "nccl", "graphs": True, "loopback_error": 0.0,
            "collectives_eager": {"alltoall_base_": 45}, "replay_error": {"y": 1e-7, "dx": 3e-7, "dw1": None},
            "tolerance": 1e-5, "status": "pass", "reason": None}  # fmt: skip
    assert _cells(loopback([case])) == [["mok", "nccl", "true", "45", "0", "3e-07", "1e-05", "pass", ""]]
    shared = {"stage": "ranks", "name": "e", "ranks": 8, "crossed_rows": 300, "slice_rows": 384,
              "max_error": 2.5e-7, "tolerance": 1e-5, "peak_gib_per_rank": 3.25,
              "status": "pass"}  # fmt: skip
    assert _cells(ranks([shared])) == [["e", "8", "300 of 384", "2.5e-07", "1e-05", "3.25", "pass"]]
    cost = {"stage": "pipeline", "name": "cost", "executions": 2, "multirun_s": 9.0, "windows_s": 6.0,
            "over_windows": 1.5, "compiles": 0, "loads": 6}  # fmt: skip
    assert _cells(costs([cost])) == [["pipeline", "2", "9.00", "6.00", "1.50", "0", "6"]]
