"""The %SOL columns of the published dataset, recomputed from the peaks table of ``conf/cluster/*.yaml``
(read here with yaml alone) on a dataset of real shards: CSV, JSON and report.html agree, and a device
no preset is (a CPU, another variant of a GPU) has them empty."""

from __future__ import annotations

import csv
import html
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from pipeline.matrix import EXECUTIONS
from pipeline.report import CSV_NAME, JSON_NAME, aggregate
from pipeline.report.page import REPORT_NAME
from pipeline.tools.synthetic_shards import shard_table, write_table

CLUSTERS = Path(__file__).resolve().parents[1] / "conf" / "cluster"
SHAPES = ("inference-ep8-f1536", "training-ep32-f3072-imb2.0")
CHOSEN = [e for e in EXECUTIONS if e.workload.name in SHAPES]  # 10 executions, BF16 and MXFP8 of each
DEVICES = ("NVIDIA H200", "NVIDIA GB300", "cpu", "NVIDIA H200 NVL")
SOL = ("usefulSOLPct", "hbmModelSOLPct", "nvlinkTxSOLPct", "nvlinkRxSOLPct")


def peaks_of(device: str) -> dict[str, float] | None:
    """The peaks of the preset whose device words the name has (and none of its other variants')."""
    words = set(device.upper().replace("-", " ").split())
    for path in sorted(CLUSTERS.glob("*.yaml")):
        gpus = yaml.safe_load(path.read_text()).get("gpus")
        if not gpus:
            continue
        mine = {w.upper() for w in gpus["device_words"]}
        others = {w.upper() for w in gpus.get("other_variants", [])}
        if words & mine and not words & others:
            return {k: float(v["value"]) for k, v in gpus["peaks"].items()}
    return None


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dataset = tmp_path_factory.mktemp("sol")
    rng = np.random.default_rng(20261204)
    for i, execution in enumerate(CHOSEN):
        write_table(dataset, shard_table(execution, 1, rng, ranks=4, device=DEVICES[i % len(DEVICES)]))
    aggregate(dataset, workers=2)
    return dataset


def _close(got: float, want: float) -> bool:
    """Published at six significant digits, from rates published at six: within 2e-5 relative."""
    return math.isclose(got, want, rel_tol=2e-5)


def test_sol_columns_are_the_rates_over_the_presets_peaks(published: Path) -> None:
    with (published / CSV_NAME).open(newline="") as f:
        reader = csv.DictReader(f)
        header = list(reader.fieldnames or [])
        cells = {r["execution_id"]: r for r in reader}
    at = header.index("measuredOverExpected")
    assert header[at + 1 : at + 5] == list(SOL)
    rows = json.loads((published / JSON_NAME).read_text())["executions"]
    assert len(rows) == len(CHOSEN) == len(cells)
    seen = set()
    for row in rows:
        peaks, cell = peaks_of(row["device"]), cells[row["execution_id"]]
        if peaks is None:
            assert [row[c] for c in SOL] == [None] * 4 and [cell[c] for c in SOL] == [""] * 4, row["device"]
            continue
        # held to the peak of what ran: these shards' MXFP8 products are native block-scaled
        assert row["mxfp8Products"] == (None if row["precision"] == "bf16" else "native block-scaled")
        tensor = peaks["fp8_tflops" if row["precision"] == "mxfp8" else "bf16_tflops"]
        want = {
            "usefulSOLPct": 100 * row["usefulTFLOPsPerGPU"] / tensor,
            "hbmModelSOLPct": 100 * row["hbmModelTBs"] / peaks["hbm_tb_s"],
            "nvlinkTxSOLPct": 100 * row["nvlinkTxGBs"] / peaks["nvlink_gb_s"],
            "nvlinkRxSOLPct": 100 * row["nvlinkRxGBs"] / peaks["nvlink_gb_s"],
        }
        for column, value in want.items():
            assert _close(row[column], value) and _close(float(cell[column]), value), (
                row["execution_id"],
                column,
            )
        seen.add((row["device"], row["precision"]))
    # both GPUs, both precisions: the FP8 and the BF16 peak of each were used
    assert seen == {(d, p) for d in ("NVIDIA H200", "NVIDIA GB300") for p in ("bf16", "mxfp8")}


def test_the_page_shows_the_sol_columns_and_the_peaks_with_their_sources(published: Path) -> None:
    page = (published / REPORT_NAME).read_text()
    for header in ("useful %SOL", "HBM model %SOL", "NVLink tx %SOL", "NVLink rx %SOL"):
        assert f"<th>{header}</th>" in page
    for name in ("h200", "gb300"):
        gpus = yaml.safe_load((CLUSTERS / f"{name}.yaml").read_text())["gpus"]
        for figure, peak in {**gpus["peaks"], **gpus["links"]}.items():  # the links behind the all-to-all too
            assert f"<td>{figure}</td>" in page and html.escape(peak["source"]) in page, (name, figure)
    assert "<td>50 GB/s per direction</td>" in page and "<td>72 GPUs</td>" in page
