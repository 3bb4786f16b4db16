"""Aggregate shards that the execution stage really wrote (scale=ci, two gloo ranks), then check the
published files with the standalone checker: the shard contract holds between the two stages."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.report import CSV_NAME, JSON_NAME, PAIRS_NAME

CHECKER = Path(__file__).resolve().parents[1] / "jobs" / "check-aggregate.py"
MOK = "packing-ep32-f3072-profile-a-bf16-mok-native"
DIST = "packing-ep32-f3072-profile-a-bf16-dist-moe-bf16"
MOK_B = "packing-ep32-f3072-profile-b-bf16-mok-native"
DIST_B = "packing-ep32-f3072-profile-b-bf16-dist-moe-bf16"
T, K, D, F, ELEMENT = 16, 6, 64, 64, 4  # scale=ci: float32


def _python(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *arguments], capture_output=True, text=True, timeout=600)


def _hbm_bytes_by_hand(row: dict[str, str]) -> float:
    """The byte model of docs/dataset.md for the cluster-average GPU (T x K routed rows per layer),
    written out from the published columns of one row."""
    t, d, f, k = (int(row[c]) for c in ("tokens", "d_model", "d_ff_run", "top_k"))
    e = {"float32": 4, "bfloat16": 2}[row["dtype"]]
    r, sets, shared = t * k, int(row["experts"]) / int(row["ep"]), int(row["shared_experts"])
    mx = row["precision"] == "mxfp8"

    def operand(n: int) -> float:
        return n + n / 32 if mx else e * n  # E4M3 + an E8M0 per 32, or the layer dtype

    wire = d + d / 32 if row["pipeline"] == "fp8-dispatch" else e * d
    forward = (
        t * d * e + r * wire  # gather
        + 4 * r * wire  # all-to-all send + receive, regroup
        + (r * (d * e + operand(d)) if mx and row["pipeline"] != "fp8-dispatch" else 0)
        + r * operand(d) + sets * 2 * f * operand(d) + r * 2 * f * e  # GEMM-1, 2F wide
        + r * 3 * f * e  # SwiGLU
        + (r * (f * e + operand(f)) if mx else 0)
        + r * operand(f) + sets * d * operand(f) + r * d * e  # GEMM-2
        + 3 * r * d * e + t * d * 4  # combine
        + shared * (2 * t * d * e + 3 * d * f * e + 6 * t * f * e)  # x in, W1, W2, y out; 2F + 3F + F
    )  # fmt: skip
    return int(row["workMultiple"]) * forward


def _rates_from_published_columns(row: dict[str, str]) -> None:
    """useful TFLOP/s and the HBM model recomputed from the published CSV columns alone."""
    t, d, f, k = (int(row[c]) for c in ("tokens", "d_model", "d_ff_run", "top_k"))
    seconds = float(row["iterationMS"]) / 1e3
    useful = 6 * t * (k + 1) * d * f * int(row["workMultiple"]) / seconds / 1e12
    assert float(row["usefulTFLOPsPerGPU"]) == pytest.approx(useful, rel=2e-5)
    assert float(row["hbmModelBytes"]) == pytest.approx(_hbm_bytes_by_hand(row), rel=2e-5)
    hbm = _hbm_bytes_by_hand(row) / seconds / 1e12
    assert float(row["hbmModelTBs"]) == pytest.approx(hbm, rel=2e-5)


@pytest.mark.slow
def test_real_shards_aggregate_and_pass_the_check(tmp_path: Path) -> None:
    sweep = _python(
        "-m",
        "pipeline.run",
        "--multirun",
        "workload=packing-ep32-f3072-profile-a,packing-ep32-f3072-profile-b",
        "variant=mok-bf16,dist-moe-bf16",
        "scale=ci",
        f"dataset_dir={tmp_path}",
    )
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    published = _python("-m", "pipeline.aggregate", str(tmp_path))
    assert published.returncode == 0 and "skipped" not in published.stderr, published.stderr
    assert "4 executions, 2 matched workloads, 2 pairs" in published.stdout
    check = _python(str(CHECKER), str(tmp_path))
    assert check.returncode == 0, check.stderr

    meta = json.loads((tmp_path / JSON_NAME).read_text())["meta"]
    assert meta["missing"]["launched_without_shard"] == [] and meta["launched"]["source"] == "ledger"
    assert len(meta["missing"]["matrix"]) == 106  # the matrix lacks all but the four that ran
    # the matrix's own choices, whatever ran; the ways these four ran differ from the report
    assumed = {a["what"]: a["executions"] for a in meta["assumptions"]}
    assert [len(assumed[w]) for w in ("imbalanced inference and training", "balanced packing")] == [20, 10]
    assert all(e in assumed["routing outside the timed iteration"] for e in (MOK, DIST, MOK_B, DIST_B))
    deviations = {d["what"]: d for d in meta["deviations"]}
    for what, ran in (
        ("dtype", "float32 (4)"),
        ("collective", "gloo (4)"),
        ("grouped GEMM", "torch (4)"),
        ("ranks", "2 of EP ranks (gloo all-to-all, 2 ranks on one node) (4)"),
        ("CUDA graphs", "eager steps (4)"),
    ):
        assert deviations[what]["ran"] == ran and sorted(deviations[what]["executions"]) == sorted(
            [DIST, DIST_B, MOK, MOK_B]
        ), deviations[what]
    assert "MXFP8 products" not in deviations  # no MXFP8 execution ran
    assert deviations["tracked rank's tokens"]["ran"].startswith("rank 0 fed up to ")
    with (tmp_path / CSV_NAME).open() as f:
        rows = {r["execution_id"]: r for r in csv.DictReader(f)}
    assert sorted(rows) == sorted([DIST, DIST_B, MOK, MOK_B])
    for row in rows.values():
        assert row["device"] == "cpu" and row["ranks"] == "2" and row["d_ff"] == "3072"
        assert float(row["usefulTFLOPsPerGPU"]) > 0 and float(row["hbmModelTBs"]) > 0
        assert row["speedOfLightMS"] == row["nvlinkTxGBs"] == row["peakAllocatedGiB"] == ""
        assert row["communication"] == "gloo all-to-all, 2 ranks on one node" and row["mxfp8Products"] == ""
        # the account of the real execution: its phases and unclaimed time add up to its profiled iteration
        parts = sum(float(row[c] or 0) for c in row if c.startswith("phase") and c.endswith("MS"))
        assert parts == pytest.approx(float(row["profiledMS"]), rel=1e-4)
        assert float(row["phaseFpropMS"]) > 0 and float(row["phaseDispatchMS"]) > 0
        ran = (row["scale"], row["tokens"], row["d_model"], row["d_ff_run"], row["dtype"], row["cudaGraphs"])
        assert ran == ("ci", "16", "64", "64", "float32", "false")
        assert (row["collective"], row["gemm"]) == ("gloo", "torch")
        assert 0 <= float(row["cpuWaitShare"]) < 1 and row["oversubscribed"] in ("true", "false")
        # the dispatched rows saved for backward: routed rows x D x 4 bytes over the ten layers, > 0
        assert float(row["emulationCopiesGiB"]) > 0
        assert (row["workMultiple"], row["imbalance"]) == (
            "30",
            "2.31" if "profile-a" in row["workload_id"] else "2.39",
        )
        _rates_from_published_columns(row)
    with (tmp_path / PAIRS_NAME).open() as f:
        pairs = list(csv.DictReader(f))
    assert [(p["dist_execution_id"], p["mok_execution_id"], p["selected"]) for p in pairs] == [
        (DIST, MOK, "true"),
        (DIST_B, MOK_B, "true"),
    ]

    states = {s["execution_id"]: s for s in json.loads((tmp_path / JSON_NAME).read_text())["saved_state"]}
    recomputing = [layer["layer"] for layer in states[MOK]["layers"] if layer["recomputed_rows"] > 0]
    assert recomputing == [0, 2]  # profile A: two layers exceed MoK's per-layer budget
    assert states[DIST]["capacity_flags"] == 0 and states[MOK]["capacity_flags"] is None
    assert states[MOK]["layers_recomputing"] == 2 and states[DIST]["layers_recomputing"] == 0
    assert states[MOK_B]["layers_recomputing"] == 3 and states[DIST_B]["layers_recomputing"] == 0
    assert states[DIST_B]["capacity_flags"] == 0
    # The policies' device buffers, as the shards recorded them, against the report's formulas.
    balanced = T * K
    for mok, dist in ((MOK, DIST), (MOK_B, DIST_B)):
        budget = 1 << math.ceil(math.log2(2.5 * balanced))  # pow2(2.5 x T x K) = 256 rows
        assert {layer["budget_rows"] for layer in states[mok]["layers"]} == {budget}
        assert [layer["factor"] for layer in states[mok]["layers"]] == [pytest.approx(2.66667, rel=1e-5)] * 10
        assert states[mok]["policy"]["buffers"] == [
            {"name": f"saved-activations[{i}]", "rows": budget, "row_bytes": 2 * F * ELEMENT,
             "bytes": budget * 2 * F * ELEMENT}
            for i in range(10)
        ]  # fmt: skip
        share = math.floor(2.5 * balanced)  # one slot of 2.5 x T x K rows per layer, pooled over ten
        assert {layer["budget_rows"] for layer in states[dist]["layers"]} == {share}
        assert states[dist]["policy"]["buffers"] == [
            {"name": "activation-slot", "rows": 10 * share, "row_bytes": 2 * F * ELEMENT,
             "bytes": 10 * share * 2 * F * ELEMENT},
            {"name": "receive-scratch", "rows": 8 * balanced, "row_bytes": D * ELEMENT,
             "bytes": 8 * balanced * D * ELEMENT},
        ]  # fmt: skip
        assert (
            states[dist]["policy"]["host_scratch_bytes"] == 0 == states[mok]["policy"]["host_scratch_bytes"]
        )
        assert (states[dist]["policy"]["scratch_factor"], states[dist]["policy"]["pooled"]) == (8.0, True)
    assert (tmp_path / "mok-comparison-saved-state.png").stat().st_size > 10_000
