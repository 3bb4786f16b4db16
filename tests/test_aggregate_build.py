"""End-to-end aggregation on generated shards: published values against naive recomputation from the
raw parquet rows, pairing and selection, skipped and missing files, determinism, figures."""

from __future__ import annotations

import base64
import csv
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from pipeline import cost
from pipeline.commands.aggregate import main
from pipeline.data import ledger
from pipeline.data.codec import decode
from pipeline.data.dataset import Dataset
from pipeline.data.meta import ExecutionMeta
from pipeline.matrix import EXECUTIONS, Execution
from pipeline.report import CSV_NAME, JSON_NAME, PAIRS_NAME, aggregate
from pipeline.report.document import PackingEvidence
from pipeline.report.publication import MANIFEST_NAME
from pipeline.tools.synthetic_shards import shard_table, write_table

SHAPES = ("inference-ep8-f1536", "training-ep32-f3072-imb2.0", "packing-ep32-f3072-profile-a")
SUBSET = [e for e in EXECUTIONS if e.workload.name in SHAPES]  # 15 executions, 6 matched workloads
BY_ID = {e.execution_id: e for e in SUBSET}
NEWER = "training-ep32-f3072-imb2.0-bf16-mok-native"  # attempts 1 and 2 complete: 2 wins
TORN = "training-ep32-f3072-imb2.0-mxfp8-dist-moe-fp8-dispatch"  # attempt 2 torn: 1 wins
FUTURE = "packing-ep32-f3072-profile-a-bf16-dist-moe-bf16"  # attempt 3 has schema_version 99: 1 wins
INCOMPLETE = "packing-ep32-f3072-profile-a-mxfp8-dist-moe-bf16-dispatch"  # its only attempt is incomplete
NEVER_RAN = ["inference-ep16-f1536-bf16-mok-native", "inference-ep16-f1536-bf16-dist-moe-bf16"]
GPU_FREE = "inference-ep8-f1536-bf16-mok-native"  # a CPU run: no prediction, no NVLink, no CUDA memory
MULTIPLIER = {"inference": 1, "training": 3, "packing": 30}


def _write(dataset: Path, execution: Execution, attempt: int, rng: np.random.Generator) -> Path:
    if execution.execution_id == GPU_FREE:  # scale=ci: d_model and d_ff shrink, rows keep the nominal d_ff
        shard = shard_table(execution, attempt, rng, ranks=2, scale="ci", device="cpu", account=True)
        return write_table(dataset, shard)
    return write_table(
        dataset, shard_table(execution, attempt, rng, ranks=4, device="NVIDIA H200", account=True)
    )


def _submit(dataset: Path, execution_id: str, attempt: int) -> None:
    log_dir = f"logs/{execution_id}/attempt-{attempt}"
    settings = {"backend": "local", "cluster": "local", "gpus": None, "timeout_min": 60}
    record = ledger.Submitted(execution_id, attempt, f"{attempt}00", [], "local", "local", log_dir, settings)
    ledger.append(Dataset(dataset), record)


def build_dataset(dataset: Path, rng: np.random.Generator) -> None:
    """15 launched executions with duplicate, torn, future-version and incomplete attempts, plus two
    launched executions that never wrote a shard; window times drawn from ``rng``."""
    for e in SUBSET:
        path = _write(dataset, e, 1, rng)
        _submit(dataset, e.execution_id, 1)
        if e.execution_id == INCOMPLETE:
            table = pq.read_table(path)
            pq.write_table(table.slice(0, table.num_rows - 2), path)
    _write(dataset, BY_ID[NEWER], 2, rng)
    torn = _write(dataset, BY_ID[TORN], 2, rng)
    torn.write_bytes(torn.read_bytes()[:-100])
    future = shard_table(BY_ID[FUTURE], 3, rng, ranks=4)
    meta = json.loads(future.schema.metadata[b"execution"]) | {"schema_version": 99}
    write_table(dataset, future.replace_schema_metadata({b"execution": json.dumps(meta).encode()}))
    for execution_id in NEVER_RAN:
        _submit(dataset, execution_id, 1)


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dataset = tmp_path_factory.mktemp("dataset")
    build_dataset(dataset, np.random.default_rng(20261203))
    aggregate(dataset, workers=3)
    return dataset


def _evidence(document: dict) -> list[PackingEvidence]:
    """The document's saved-state evidence as the figures take it."""
    return [decode(PackingEvidence, s) for s in document["saved_state"]]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _slowest_combined_windows(shard: Path) -> list[float]:
    """Per-iteration times of the combined windows of the rank with the largest median, from raw rows."""
    per_rank: dict[int, list[float]] = defaultdict(list)
    for row in pq.read_table(shard).to_pylist():
        if row["phase"] == "combined":
            per_rank[row["rank"]].append(row["window_ms"] / row["iterations"])
    return max(per_rank.values(), key=statistics.median)


def _naive_times(shard: Path) -> dict[str, float]:
    """Per phase: max over ranks of statistics.median of window_ms / iterations, from raw rows."""
    per_rank: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in pq.read_table(shard).to_pylist():
        per_rank[row["phase"]][row["rank"]].append(row["window_ms"] / row["iterations"])
    return {phase: max(statistics.median(v) for v in ranks.values()) for phase, ranks in per_rank.items()}


def _close(cell: str, value: float | None, rel_tol: float = 6e-6) -> bool:
    """A 6-significant-digit cell against an exact value: rounding is <= 5e-6 relative."""
    return cell == "" if value is None else math.isclose(float(cell), value, rel_tol=rel_tol)


def test_execution_rows_match_naive_recomputation(published: Path) -> None:
    rows = _rows(published / CSV_NAME)
    assert [r["execution_id"] for r in rows] == sorted(set(BY_ID) - {INCOMPLETE})
    fed_more_tokens = 0
    for row in rows:
        shard = (
            published / "shards" / f"execution={row['execution_id']}" / f"attempt-{row['attempt']}.parquet"
        )
        meta = json.loads(pq.read_schema(shard).metadata[b"execution"])
        shape, e = meta["shape"], BY_ID[row["execution_id"]]
        times = _naive_times(shard)
        ms = times["combined"]
        assert _close(row["iterationMS"], ms) and _close(row["forwardMS"], times["forward"])
        assert _close(row["backwardMS"], times.get("backward"))
        assert (row["backwardMS"] == "") == (e.workload.kind == "inference")
        tokens = shape["nominal_tokens"]  # T per GPU of the EP-wide cluster, not the T'_l of fewer ranks
        fed_more_tokens += any(tokens < t for t in shape["layer_tokens"])
        flops = 6 * tokens * (shape["top_k"] + 1) * shape["d_model"] * shape["d_ff"]
        assert _close(row["usefulTFLOPsPerGPU"], flops * MULTIPLIER[e.workload.kind] / (ms / 1e3) / 1e12)
        layer = cost.LayerShape(
            kind=e.workload.kind,
            tokens=tokens,
            d_model=shape["d_model"],
            d_ff=shape["d_ff"],
            num_experts=shape["num_experts"],
            top_k=shape["top_k"],
            ep=e.workload.ep,
            precision=e.variant.precision,
            layer_loads=list(e.workload.layer_loads),
        )
        dispatch = "mxfp8" if e.variant.pipeline == "fp8-dispatch" else "bf16"
        average_gpu = cost.LayerShape(
            **{**layer.__dict__, "element_bytes": {"float32": 4, "bfloat16": 2}[shape["dtype"]]}
        )
        hbm_bytes = cost.iteration_bytes(average_gpu, dispatch)
        assert _close(row["hbmModelBytes"], hbm_bytes)
        assert _close(row["hbmModelTBs"], hbm_bytes / (ms / 1e3) / 1e12)
        tx, rx = meta["nvlink"]["tx_bytes_per_s"], meta["nvlink"]["rx_bytes_per_s"]
        assert _close(row["nvlinkTxGBs"], tx and tx / 1e9) and _close(row["nvlinkRxGBs"], rx and rx / 1e9)
        peak = meta["memory"]["peak_allocated_bytes"]
        assert _close(row["peakAllocatedGiB"], peak and peak / 2**30)
        if row["execution_id"] == GPU_FREE:
            assert (shape["d_model"], shape["d_ff"]) == (64, e.workload.d_ff // 48)
            assert row["device"] == "cpu" and row["speedOfLightMS"] == row["layerSOLPct"] == ""
            assert row["communication"] == "gloo all-to-all, 2 ranks on one node"
        else:
            # these shards' kernels (cute-sm100) multiply MXFP8 natively: the FP8 peak; rows cross between
            # the 4 launched ranks only
            launched = cost.LayerShape(**{**average_gpu.__dict__, "ranks": int(row["ranks"])})
            peak = cost.HARDWARE["h200"].peak(
                "fp8_tflops" if e.variant.precision == "mxfp8" else "bf16_tflops"
            )
            light = cost.speed_of_light_ms(launched, "h200", dispatch=dispatch, routed_tflops=peak)
            assert _close(row["speedOfLightMS"], light) and _close(row["layerSOLPct"], 100 * light / ms)
            assert row["communication"] == "nccl all-to-all, 4 ranks on one node, one NVLink domain"
            assert row["mxfp8Products"] == ("native block-scaled" if e.variant.precision == "mxfp8" else "")
        # What ran, beside the nominal identity columns.
        spread = _slowest_combined_windows(shard)
        assert _close(row["windowMinMS"], min(spread)) and _close(row["windowMaxMS"], max(spread))
        assert float(row["windowMinMS"]) <= float(row["iterationMS"]) <= float(row["windowMaxMS"])
        ci = row["execution_id"] == GPU_FREE
        ran = (row["scale"], row["tokens"], row["d_model"], row["d_ff_run"], row["experts"], row["top_k"])
        assert (
            ran == ("ci", "16", "64", str(e.workload.d_ff // 48), "384", "6")
            if ci
            else ("full", "2048", "7168", str(e.workload.d_ff), "384", "6")
        )
        assert row["experts_run"] == str(384 // e.workload.ep * int(row["ranks"]))
        assert row["tokens_run"] == str(max(shape["layer_tokens"]))
        assert _close(row["imbalance"], statistics.mean(e.workload.layer_loads))
        assert (row["windows"], row["iterationsPerWindow"]) == ("5", "2" if ci else "30")
        assert row["workMultiple"] == str(MULTIPLIER[e.workload.kind])
        assert (row["dtype"], row["clock"]) == (
            ("float32", "barrier + perf_counter") if ci else ("bfloat16", "barrier + cuda events")
        )
        assert row["cudaGraphs"] == ("false" if ci else "true")
        assert (row["cudaGraphsReason"] != "") == ci
        assert (row["seed"], row["git_sha"]) == ("0", "0" * 40)
        ranks = "2" if ci else "4"
        identity = (e.workload_id, e.workload.kind, str(e.workload.ep), ranks, str(e.workload.d_ff))
        assert (row["workload_id"], row["kind"], row["ep"], row["ranks"], row["d_ff"]) == identity
        assert (row["implementation"], row["pipeline"], row["precision"]) == (
            e.variant.implementation,
            e.variant.pipeline,
            e.variant.precision,
        )
    assert fed_more_tokens >= 5  # imbalanced and packing cases on 4 of 32 ranks: T' > T


def test_newest_complete_attempt_wins(published: Path) -> None:
    attempts = {r["execution_id"]: r["attempt"] for r in _rows(published / CSV_NAME)}
    assert attempts[NEWER] == "2"  # newer complete attempt
    assert attempts[TORN] == "1" and attempts[FUTURE] == "1"  # newer attempts unusable
    assert set(attempts.values()) == {"1", "2"}


def test_pairs_speedup_and_selection(published: Path) -> None:
    executions = {r["execution_id"]: r for r in _rows(published / CSV_NAME)}
    pairs = _rows(published / PAIRS_NAME)
    assert "hbmModelTBsRatio" not in pairs[0]  # it would be the speedup times a ratio of byte counts
    dist = [i for i, r in executions.items() if r["implementation"] == "dist-moe"]
    assert [p["dist_execution_id"] for p in pairs] == sorted(dist)
    by_workload: dict[str, list[dict[str, str]]] = defaultdict(list)
    for pair in pairs:
        d, m = executions[pair["dist_execution_id"]], executions[pair["mok_execution_id"]]
        assert m["implementation"] == "mok" and m["workload_id"] == d["workload_id"] == pair["workload_id"]
        assert pair["distIterationMS"] == d["iterationMS"] and pair["mokIterationMS"] == m["iterationMS"]
        # recomputed from two rounded cells, then compared with a rounded cell: three roundings
        assert _close(pair["speedup"], float(m["iterationMS"]) / float(d["iterationMS"]), rel_tol=2e-5)
        for metric in ("forwardMS", "backwardMS", "usefulTFLOPsPerGPU", "nvlinkTxGBs", "peakAllocatedGiB"):
            expected = float(d[metric]) / float(m[metric]) if d[metric] and m[metric] else None
            assert math.isclose(float(pair[f"{metric}Ratio"]), expected, rel_tol=2e-5) if expected else True
        by_workload[pair["workload_id"]].append(pair)
    assert len(by_workload) == 6
    for candidates in by_workload.values():
        chosen = [p for p in candidates if p["selected"] == "true"]
        fastest = min(candidates, key=lambda p: float(p["distIterationMS"]))
        assert chosen == [fastest]


def test_each_row_publishes_its_slowest_rank_s_phase_account(published: Path) -> None:
    """The account of the rank whose timed median is published, from the raw metadata: its phases and
    unclaimed time add up to its profiled iteration, which the row sets beside the timed one."""
    document = json.loads((published / JSON_NAME).read_text())
    accounts = {a["execution_id"]: a for a in document["accounts"]}
    for row in _rows(published / CSV_NAME):
        shard = (
            published / "shards" / f"execution={row['execution_id']}" / f"attempt-{row['attempt']}.parquet"
        )
        per_rank: dict[int, list[float]] = defaultdict(list)
        for raw in pq.read_table(shard).to_pylist():
            if raw["phase"] == "combined":
                per_rank[raw["rank"]].append(raw["window_ms"] / raw["iterations"])
        slowest = max(sorted(per_rank), key=lambda r: statistics.median(per_rank[r]))
        recorded = json.loads(pq.read_schema(shard).metadata[b"execution"])["account"]["ranks"]
        (mine,) = [a for a in recorded if a["rank"] == slowest]
        assert _close(row["profiledMS"], mine["profiled_ms"])
        assert _close(row["profiledOverTimed"], mine["profiled_ms"] / statistics.median(per_rank[slowest]))
        for phase, ms in mine["phases"].items():
            assert _close(row[f"phase{phase.capitalize()}MS"], ms), phase
        parts = sum(float(row[c] or 0) for c in row if c.startswith("phase") and c.endswith("MS"))
        assert math.isclose(parts, float(row["profiledMS"]), rel_tol=1e-4)
        account = accounts[row["execution_id"]]
        assert account["rank"] == slowest and [p["phase"] for p in account["phases"]][:3] == [
            "fprop",
            "dgrad",
            "wgrad",
        ]
        # on the H200 rows, each phase's %SOL is its work at the peaks over its time
        if row["device"] == "NVIDIA H200":
            fprop = next(p for p in account["phases"] if p["phase"] == "fprop")
            peak = cost.HARDWARE["h200"].peak("fp8_tflops" if row["precision"] == "mxfp8" else "bf16_tflops")
            at_peaks = max(fprop["flops"] / (peak * 1e12), fprop["bytes"] / (4.8e12))
            assert math.isclose(fprop["sol_pct"], 100 * 1e3 * at_peaks / fprop["ms"], rel_tol=1e-4)


def test_skipped_files_and_missing_executions_are_reported(published: Path) -> None:
    meta = json.loads((published / JSON_NAME).read_text())["meta"]
    skipped = {s["path"]: s["reason"] for s in meta["shards_skipped"]}
    assert set(skipped) == {
        f"shards/execution={TORN}/attempt-2.parquet",
        f"shards/execution={FUTURE}/attempt-3.parquet",
        f"shards/execution={INCOMPLETE}/attempt-1.parquet",
    }
    assert "unreadable parquet" in skipped[f"shards/execution={TORN}/attempt-2.parquet"]
    assert "unknown schema_version 99" in skipped[f"shards/execution={FUTURE}/attempt-3.parquet"]
    assert "incomplete" in skipped[f"shards/execution={INCOMPLETE}/attempt-1.parquet"]
    assert meta["missing"]["launched_without_shard"] == sorted([INCOMPLETE, *NEVER_RAN])
    present = {r["execution_id"] for r in json.loads((published / JSON_NAME).read_text())["executions"]}
    assert len(present) == 14
    assert meta["missing"]["matrix"] == sorted({e.execution_id for e in EXECUTIONS} - present)
    assert len(meta["missing"]["matrix"]) == 110 - 14
    assert meta["matrix"] == {"executions": 110, "matched_workloads": 44, "pairs": 66}
    assert len(meta["shards_read"]) == 14 + 1  # complete first attempts, and the second attempt of NEWER
    assert meta["launched"] == {
        "source": "ledger",
        "not_in_matrix": [],
        "executions": 17,
        "matched_workloads": 7,
        "pairs": 10,
    }
    assert meta["counts"] == {"executions": 14, "matched_workloads": 6, "pairs": 8}
    assert meta["schema_version"] == ExecutionMeta.VERSION


def test_without_a_ledger_the_whole_matrix_is_expected(tmp_path: Path, rng: np.random.Generator) -> None:
    present = SUBSET[:5]
    for e in present:
        _write(tmp_path, e, 1, rng)
    meta = aggregate(tmp_path, figures=False).document.to_json()["meta"]
    assert meta["launched"]["source"] == "matrix"
    lacking = sorted({e.execution_id for e in EXECUTIONS} - {e.execution_id for e in present})
    assert meta["missing"] == {"matrix": lacking, "launched_without_shard": lacking}
    assert (meta["launched"]["executions"], meta["launched"]["pairs"]) == (110, 66)


def test_saved_state_evidence_per_packing_layer(published: Path) -> None:
    document = json.loads((published / JSON_NAME).read_text())
    states = {s["execution_id"]: s for s in document["saved_state"]}
    packing = [i for i in BY_ID if i.startswith("packing") and i != INCOMPLETE]
    assert sorted(states) == sorted(packing)
    for execution_id, state in states.items():
        shard = published / "shards" / f"execution={execution_id}" / "attempt-1.parquet"
        recorded = json.loads(pq.read_schema(shard).metadata[b"execution"])["saved_state"]
        assert len(state["layers"]) == len(recorded) == 10
        for published_layer, layer in zip(state["layers"], recorded, strict=True):
            assert published_layer == pytest.approx(layer, rel=6e-6)  # six significant digits
        assert state["balanced_rows"] == 2048 * 6
        # profile A exceeds MoK's per-layer budget in two layers; Dist-MoE's shared slot never overflows
        mok = state["implementation"] == "mok"
        assert state["layers_recomputing"] == (2 if mok else 0)
        assert state["capacity_flags"] == (None if mok else 0)
        assert state["policy"]["layers"] == 10 and state["policy"]["host_scratch_bytes"] == 0


def test_regeneration_is_byte_identical(published: Path, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere"
    shutil.copytree(published / "shards", moved / "shards")
    shutil.copytree(Dataset(published).ledger_dir, Dataset(moved).ledger_dir)
    again = aggregate(moved, tmp_path / "out", workers=1)
    names = sorted(p.name for p in again.files)
    # CSVs, JSON; the speedups, EP8 and EP32 time and phase figures, the saved-state figure; page; manifest
    assert len(names) == 3 + 1 + 2 + 2 + 1 + 1 + 1
    assert "report.html" in names
    for name in names:
        assert (tmp_path / "out" / name).read_bytes() == (published / name).read_bytes(), name


def test_figures_are_pngs_of_sensible_size(published: Path) -> None:
    import matplotlib.image

    for name in ("mok-comparison-ep8.png", "mok-comparison-ep32.png", "mok-comparison-saved-state.png"):
        image = matplotlib.image.imread(published / name)
        height, width = image.shape[:2]
        assert 300 < height < 3000 and 500 < width < 4000, (name, image.shape)
        assert image[..., :3].std() > 0.05  # not blank


def test_report_page_is_self_contained_and_shows_the_dataset(published: Path) -> None:
    page = (published / "report.html").read_text()
    assert re.search(r"https?://", page) is None and "<script" not in page
    sources = re.findall(r'<img [^>]*src="([^"]*)"', page)
    figures = (
        "mok-comparison-speedups.png",  # the answer first
        "mok-comparison-ep8.png",
        "mok-comparison-ep32.png",
        "mok-comparison-phases-ep8.png",
        "mok-comparison-phases-ep32.png",
        "mok-comparison-saved-state.png",
    )
    assert sources == [
        f"data:image/png;base64,{base64.b64encode((published / f).read_bytes()).decode()}" for f in figures
    ]
    assert str(published) not in page  # nothing depends on where the dataset lives
    # the page opens with the answer: the conditions, the counts per EP and precision, each speedup
    headings = re.findall(r"<h2>([^<]*)</h2>", page)
    assert headings[:3] == ["The answer", "What ran", "Deviations from the report"]
    answer = page[page.index("<h2>The answer</h2>") : page.index("<h2>What ran</h2>")]
    assert "Conditions: device " in answer and "communication " in answer
    chosen = [p for p in _rows(published / PAIRS_NAME) if p["selected"] == "true"]
    assert f"Of {len(chosen)} matched workloads, Dist-MoE is faster in " in answer
    for pair in chosen:
        assert f"<td>{pair['workload_id']}</td>" in answer
    grid = page[page.index("Completeness of the matrix") : page.index("Iteration time per EP")]
    assert grid.count(">missing<") == 3 and grid.count(">done<") == 14
    for path in (
        f"shards/execution={TORN}/attempt-2.parquet",
        f"shards/execution={FUTURE}/attempt-3.parquet",
    ):
        assert f"<td>{path}</td>" in grid
    for pair in _rows(published / PAIRS_NAME):
        assert f"<td>{pair['workload_id']}</td><td>{pair['pipeline']}</td>" in page
    assert "NVIDIA H200 (13)" in page and "cpu (1)" in page  # what ran, per execution


def test_time_figures_have_one_time_axis_per_ep(published: Path) -> None:
    """The report's rule: both precision panels share a time axis within one EP, every kind's row
    included; the axis reaches above the tallest column, so no column is cut."""
    from pipeline.report.figures import time_figure

    document = json.loads((published / JSON_NAME).read_text())
    rows, pairs = document["executions"], document["pairs"]
    for ep in sorted({r["ep"] for r in rows}):
        fig = time_figure(ep, rows, pairs)
        FigureCanvasAgg(fig).draw()  # limits as rendered, after autoscaling
        panels = [ax for ax in fig.axes if ax.get_title().startswith(f"EP{ep} ")]
        kinds = {r["kind"] for r in rows if r["ep"] == ep}
        assert len(panels) == 2 * len(kinds)
        limits = {ax.get_ylim() for ax in panels}
        assert len(limits) == 1, limits
        ((low, high),) = limits
        chosen = {p["dist_execution_id"] for p in pairs if p["selected"]}
        drawn = [
            r for r in rows if r["ep"] == ep and (r["implementation"] == "mok" or r["execution_id"] in chosen)
        ]
        tallest = max(r["iterationMS"] for r in drawn)
        heights = [bar.get_height() for ax in panels for bar in ax.patches]
        assert sorted(heights) == pytest.approx(sorted(r["iterationMS"] for r in drawn))
        assert low == 0 and high > tallest


def test_paired_table_title_matches_every_column(published: Path) -> None:
    """Every value column of the table is Dist-MoE / MoK, as its title says (the speedup, MoK /
    Dist-MoE, is above the columns), and the columns are as wide as their text."""
    from pipeline.report.figures import TABLE_TITLE, time_figure

    assert TABLE_TITLE == "paired values: Dist-MoE / MoK"
    document = json.loads((published / JSON_NAME).read_text())
    rows, pairs = document["executions"], document["pairs"]
    by_id = {r["execution_id"]: r for r in rows}
    fig = time_figure(32, rows, pairs)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    (table_axes,) = [ax for ax in fig.axes if ax.get_title() == TABLE_TITLE]
    (table,) = table_axes.tables
    cells = table.get_celld()
    columns = 1 + max(c for _, c in cells)
    header = [cells[0, c].get_text().get_text() for c in range(columns)]
    assert header == ["workload", "Dist-MoE pipeline", "iteration ms", "useful TFLOP/s per GPU"]
    selected = [p for p in pairs if p["selected"] and "-ep32-" in p["workload_id"]]
    body = [[cells[r, c].get_text().get_text() for c in range(columns)] for r in range(1, len(selected) + 1)]
    for pair in selected:
        dist, mok = by_id[pair["dist_execution_id"]], by_id[pair["mok_execution_id"]]
        want = [
            f"{dist['iterationMS']:.3g} / {mok['iterationMS']:.3g}",
            f"{dist['usefulTFLOPsPerGPU']:.3g} / {mok['usefulTFLOPsPerGPU']:.3g}",
        ]
        assert [line[2:] for line in body if line[1] == pair["pipeline"] and line[2:] == want], pair
    renderer = canvas.get_renderer()
    for (row, col), cell in cells.items():
        text = cell.get_text().get_window_extent(renderer)
        box = cell.get_window_extent(renderer)
        assert box.x0 <= text.x0 and text.x1 <= box.x1, (row, col, cell.get_text().get_text())


def test_saved_state_texts_cover_no_bar_and_no_other_text(published: Path) -> None:
    from pipeline.report.figures import saved_state_figure

    document = json.loads((published / JSON_NAME).read_text())
    fig = saved_state_figure(_evidence(document), document["pairs"], document["executions"])
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    for ax in fig.axes:
        texts = [t.get_window_extent(renderer) for t in ax.texts]
        bars = [b.get_window_extent(renderer) for b in ax.patches if b.get_height() > 0]
        assert len(texts) == 2 and not texts[0].overlaps(texts[1]), ax.get_title()
        for text in texts:
            assert not any(text.overlaps(bar) for bar in bars), ax.get_title()


def test_cli_reports_skipped_paths_on_stderr(published: Path, tmp_path: Path, capsys) -> None:
    # launched executions without a published row: not published (exit 1), the files written all the same
    assert main([str(published), "--out", str(tmp_path), "--no-figures"]) == 1
    err = capsys.readouterr().err
    assert f"skipped shards/execution={TORN}/attempt-2.parquet: unreadable parquet" in err
    assert f"skipped shards/execution={FUTURE}/attempt-3.parquet: unknown schema_version 99" in err
    left = " ".join(sorted([INCOMPLETE, *NEVER_RAN]))
    assert f"not published: 3 execution(s) without a row: {left}" in err
    assert "missing 3 execution(s)" not in err  # one line says it
    published = sorted([CSV_NAME, PAIRS_NAME, JSON_NAME, MANIFEST_NAME])
    assert sorted(p.name for p in tmp_path.iterdir()) == published


def test_a_shard_that_contradicts_its_execution_id_is_skipped_not_published(tmp_path: Path) -> None:
    """A precision its id does not name (before, the metrics failed on it; now the reader refuses
    it first): skipped with the reason, and the execution is missing from the publication."""
    e = SUBSET[0]
    table = shard_table(e, 1, np.random.default_rng(5), ranks=4)
    column = table.schema.get_field_index("precision")
    table = table.set_column(column, table.schema.field(column), pa.array(["fp4"] * table.num_rows))
    write_table(tmp_path, table)
    result = aggregate(tmp_path, figures=False)
    assert [(s.path, s.reason) for s in result.skipped] == [
        (
            f"shards/execution={e.execution_id}/attempt-1.parquet",
            f"the shard contradicts its execution id {e.execution_id!r}: "
            "precision='fp4' (the id says 'bf16')",
        )
    ]
    assert e.execution_id in result.missing and result.document.executions == ()


def test_estimate_columns_come_from_the_kept_table_and_are_never_computed_unasked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rng: np.random.Generator
) -> None:
    """Aggregation publishes the kept full-scale estimates and leaves the others empty: computing one
    costs seconds of CPU, so only ``--estimate`` (or ``pipeline.estimate``) does. The estimate's writer
    keeps; the report's reader (pipeline.data.estimates) finds."""
    from pipeline.data import estimates
    from pipeline.tools.estimate import table
    from pipeline.tools.estimate.jobs import Job
    from pipeline.tools.estimate.presets import Preset

    monkeypatch.setenv("MOE_BENCH_CACHE", str(tmp_path / "cache"))
    kept, unkept = SUBSET[0], SUBSET[1]
    for e in (kept, unkept):
        write_table(tmp_path / "d", shard_table(e, 1, rng, ranks=4))
    arrived = table.keeping([Job(kept.execution_id, Preset.named("gb300"))])
    result = {"timed_peak_gib": 12.5, "device_ops": 321}
    arrived({"execution_id": kept.execution_id, "cluster": "gb300", **result})
    rows = {r["execution_id"]: r for r in aggregate(tmp_path / "d", figures=False).document.executions}
    assert (rows[kept.execution_id]["estimatedPeakGiB"], rows[kept.execution_id]["opsPerIteration"]) == (
        12.5,
        321,
    )
    assert rows[unkept.execution_id]["estimatedPeakGiB"] is None
    assert rows[unkept.execution_id]["opsPerIteration"] is None
    kept_table = json.loads((tmp_path / "cache" / f"estimates-{estimates.fingerprint()}.json").read_text())
    assert list(kept_table) == [f"{kept.execution_id}|gb300"]  # nothing computed, nothing added
    assert not list((tmp_path / "cache").glob("fake_cuda-*"))  # the shim was never built


def test_estimate_without_a_compiler_publishes_the_kept_ones_and_says_why(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    rng: np.random.Generator,
) -> None:
    """``--estimate`` runs the estimate's own command in a process of its own: its line says why it could
    not, and aggregation's what that leaves."""
    monkeypatch.setenv("MOE_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    write_table(tmp_path / "d", shard_table(SUBSET[0], 1, rng, ranks=4))
    assert main([str(tmp_path / "d"), "--estimate", "--no-figures"]) == 0
    err = capfd.readouterr().err.splitlines()
    assert "error: fake CUDA tensors need a C++ compiler (g++ or $CXX) to build their shim once" in err
    (line,) = [line for line in err if "--estimate" in line]
    assert line == (
        f"pipeline.aggregate: --estimate: python -m pipeline.estimate --dataset {tmp_path / 'd'} ended with "
        "status 1; publishing the kept estimates only"
    )
    (row,) = json.loads((tmp_path / "d" / JSON_NAME).read_text())["executions"]
    assert row["estimatedPeakGiB"] is None


def test_module_entry_point_and_bad_arguments(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "pipeline.aggregate", str(tmp_path / "absent")], capture_output=True, text=True
    )
    assert run.returncode == 2 and "does not exist" in run.stderr
    with pytest.raises(ValueError, match="workers must be >= 1, got 0"):
        aggregate(tmp_path, workers=0)


def test_figures_read_at_a_glance(published: Path) -> None:
    """A row of panels per kind, precisions side by side, device and scale in the title, the paired
    table (Dist-MoE / MoK), MoK's budget value printed, and no legend entry without marks."""
    from pipeline.report.figures import TABLE_TITLE, saved_state_figure, time_figure

    document = json.loads((published / JSON_NAME).read_text())
    rows, pairs = document["executions"], document["pairs"]
    fig = time_figure(32, rows, pairs)
    panels = [ax for ax in fig.axes if ax.get_title().startswith("EP32")]
    assert [ax.get_title() for ax in panels] == [
        "EP32 training BF16, 4 ranks",
        "EP32 training MXFP8, 4 ranks",
        "EP32 packing BF16, 4 ranks",
        "EP32 packing MXFP8, 4 ranks",
    ]
    assert "device NVIDIA H200, scale=full, 4 ranks" in fig.get_suptitle()
    # a panel is labelled by the dtype that ran where it is not the report's BF16 (the CPU scales)
    cpu = [{**r, "dtype": "float32"} if r["ep"] == 32 and r["kind"] == "packing" else r for r in rows]
    titles = [ax.get_title() for ax in time_figure(32, cpu, pairs).axes if ax.get_title().startswith("EP32")]
    assert titles[2:] == [
        "EP32 packing BF16, 4 ranks, ran float32",
        "EP32 packing MXFP8, 4 ranks, ran float32",
    ]
    (table_axes,) = [ax for ax in fig.axes if ax.get_title() == TABLE_TITLE]
    (table,) = table_axes.tables
    texts = [cell.get_text().get_text() for cell in table.get_celld().values()]
    assert "iteration ms" in texts and any(" / " in t for t in texts)
    pair = next(p for p in pairs if p["selected"] and p["workload_id"].startswith("training-ep32"))
    assert f"{pair['distIterationMS']:.3g} / {pair['mokIterationMS']:.3g}" in texts
    labels = [h.get_label() for legend in fig.legends for h in legend.legend_handles]
    assert labels == ["MoK", "Dist-MoE, selected pipeline"]

    states = fig_states = saved_state_figure(_evidence(document), pairs, rows)
    texts = [t.get_text() for ax in states.axes for t in ax.texts]
    assert any("MoK budget 2.67 x T x K" in t for t in texts)
    labels = [h.get_label() for legend in fig_states.legends for h in legend.legend_handles]
    assert "Dist-MoE recomputed" not in labels  # Dist-MoE recomputes nothing: no entry without marks
    assert "MoK recomputed" in labels and "MoK budget per layer: 2.67 x T x K" in labels
