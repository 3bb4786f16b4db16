"""The comparison document against naive recomputation from raw parquet rows (synthetic shards):
ratios, intervals, speedups, a selection flip, the run-to-run bound and determinism of the JSON."""

from __future__ import annotations

import json
import math
import shutil
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipeline.compare import compare, load
from pipeline.compare.cli import main
from pipeline.data.dataset import Dataset
from pipeline.data.schema import METADATA_KEY
from pipeline.matrix import EXECUTIONS
from tests.synthetic_shards import shard_table, write_table

SHAPES = ("inference-ep8-f1536", "training-ep32-f3072")
SUBSET = [e for e in EXECUTIONS if e.workload.name in SHAPES]  # 10 executions, 4 matched workloads
PHASE = {"iterationMS": "combined", "forwardMS": "forward", "backwardMS": "backward"}


def _naive_samples(dataset: Path, execution_id: str, metric: str) -> list[float]:
    """Per-iteration windows of the rank with the largest statistics.median (lowest rank on ties)."""
    (path,) = sorted(Dataset(dataset).shard_dir(execution_id).glob("*.parquet"))
    per_rank: dict[int, list[float]] = defaultdict(list)
    for row in pq.read_table(path).to_pylist():
        if row["phase"] == PHASE[metric]:
            per_rank[row["rank"]].append(row["window_ms"] / row["iterations"])
    slowest = max(sorted(per_rank), key=lambda r: statistics.median(per_rank[r]))
    return per_rank[slowest]


def _naive_interval(base: list[float], new: list[float]) -> tuple[float, float]:
    """95% Hodges-Lehmann interval at five windows a side: 3rd smallest and largest pairwise ratio."""
    ratios = sorted(n / b for n in new for b in base)
    return ratios[2], ratios[-3]


def _scale(dataset: Path, execution_id: str, factor: float) -> None:
    for path in Dataset(dataset).shard_dir(execution_id).glob("*.parquet"):
        table = pq.read_table(path)
        column = table.schema.get_field_index("window_ms")
        table = table.set_column(
            column, table.schema.field(column), pc.multiply(table.column(column), factor)
        )
        pq.write_table(table, path)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """BASE; NEW drawn independently (other random times); FLIP: BASE with the selected pipeline of
    one matched workload made 2x slower than the other candidate."""
    rng = np.random.default_rng()
    base, new = tmp_path_factory.mktemp("base"), tmp_path_factory.mktemp("new")
    for e in SUBSET:
        write_table(base, shard_table(e, 1, rng, ranks=4, device="NVIDIA H200", job_id="1_1"))
        write_table(new, shard_table(e, 1, rng, ranks=4, device="NVIDIA H200", job_id="1_1"))
    flip = tmp_path_factory.mktemp("flip")
    shutil.copytree(base / "shards", flip / "shards")
    return base, new, flip


def test_times_and_intervals_match_naive_recomputation(datasets) -> None:
    base, new, _ = datasets
    document = compare(load(base), load(new), 0.05)
    assert len(document["times"]) == 10 * 2 + 5  # inference has no backward
    for t in document["times"]:
        before = _naive_samples(base, t["execution_id"], t["metric"])
        after = _naive_samples(new, t["execution_id"], t["metric"])
        assert t["base"] == pytest.approx(statistics.median(before), rel=1e-12)
        assert t["ratio"] == pytest.approx(statistics.median(after) / statistics.median(before), rel=1e-12)
        assert (t["low"], t["high"]) == pytest.approx(_naive_interval(before, after), rel=1e-12)
    logs = np.log([t["ratio"] for t in document["times"]])
    sigma = 1.4826 * statistics.median(abs(x - statistics.median(logs)) for x in logs)
    assert document["run_to_run_sigma"] == pytest.approx(sigma, rel=1e-12)
    # independent random draws (base levels 0.5 to 20 ms) scatter by a factor of ~3: so does the bound
    assert document["bounds"]["times"] == pytest.approx(math.exp(3.090232 * sigma), rel=1e-6)
    assert document["bounds"]["times"] > 3


def test_speedup_ratios_and_their_intervals(datasets) -> None:
    base, new, _ = datasets
    document = compare(load(base), load(new), 0.05)
    assert len(document["speedups"]) == 6  # per precision: bf16 one pair, mxfp8 two
    for s in document["speedups"]:
        m = [_naive_samples(d, s["mok_execution_id"], "iterationMS") for d in (base, new)]
        d = [_naive_samples(x, s["dist_execution_id"], "iterationMS") for x in (base, new)]
        assert s["base"] == pytest.approx(statistics.median(m[0]) / statistics.median(d[0]), rel=1e-12)
        assert s["ratio"] == pytest.approx(s["new"] / s["base"], rel=1e-12)
        # union bound of two 97.5% intervals: at five windows, the 2nd smallest / largest pairwise ratio
        mok = sorted(n / b for n in m[1] for b in m[0])
        dist = sorted(n / b for n in d[1] for b in d[0])
        assert (s["low"], s["high"]) == pytest.approx((mok[1] / dist[-2], mok[-2] / dist[1]), rel=1e-12)


def test_a_selection_flip_is_reported_and_judged(datasets) -> None:
    base, _, flip = datasets
    before = compare(load(base), load(base), 0.05)
    (workload,) = [s for s in before["selections"] if s["workload_id"] == "training-ep32-f3072-mxfp8"]
    rows = load(base).rows
    candidates = {rows[i]["pipeline"]: i for i in rows if rows[i]["workload_id"] == workload["workload_id"]}
    chosen, other = (
        candidates[workload["base"]],
        candidates[({"fp8-dispatch", "bf16-dispatch"} - {workload["base"]}).pop()],
    )
    _scale(flip, chosen, 2 * rows[other]["iterationMS"] / rows[chosen]["iterationMS"])
    document = compare(load(base), load(flip), 0.05)
    (entry,) = [s for s in document["selections"] if s["flipped"]]
    assert (entry["workload_id"], entry["base"]) == (workload["workload_id"], workload["base"])
    assert entry["new"] == rows[other]["pipeline"]
    assert entry["ratio"] == pytest.approx(0.5, rel=1e-9) and entry["significant"] is True
    assert document["run_to_run_sigma"] == 0.0  # only the scaled execution's three times moved
    assert {t["execution_id"] for t in document["times"] if t["change"] == "slower"} == {chosen}


def test_json_is_deterministic_and_names_the_method(datasets, capsys) -> None:
    base, new, _ = datasets
    outputs, statuses = [], []
    for _ in range(2):
        statuses.append(main([str(base), str(new), "--json"]))
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    document = json.loads(outputs[0])
    assert statuses == [int(document["counts"]["slower"] > 0)] * 2
    assert "Hodges-Lehmann" in document["method"] and document["confidence"] == 0.95
    assert document["base"]["described"]["device"] == {"NVIDIA H200": 10}


def test_settings_that_differ_are_listed(datasets, tmp_path) -> None:
    base, _, _ = datasets
    shutil.copytree(base / "shards", tmp_path / "shards")
    for path in sorted((tmp_path / "shards").glob("*/*.parquet"))[:3]:
        table = pq.read_table(path)
        meta = json.loads(table.schema.metadata[METADATA_KEY])
        meta["provenance"]["versions"]["cutlass_dsl"] = "9.9.9"
        pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta).encode()}), path)
    document = compare(load(base), load(tmp_path), 0.05)
    assert document["settings_differ"] == [
        {"setting": "cutlass_dsl", "base": ["unknown"], "new": ["9.9.9", "unknown"]}
    ]
    assert document["new"]["described"]["cutlass_dsl"] == {"9.9.9": 3, "unknown": 7}
    assert math.isclose(document["bounds"]["times"], 1.05)


def test_bad_options_are_one_line_and_exit_two(datasets) -> None:
    base = str(datasets[0])
    cases = [
        ([base, base, "--threshold", "abc"], "argument --threshold: invalid float value: 'abc'"),
        (
            [base, base, "--threshold", "nan"],
            "threshold must be a finite number >= 0 (a fraction, 0.05 = 5%), got nan",
        ),
        ([base, base, "--workers", "0"], "workers must be >= 1, got 0"),
        ([base], "the following arguments are required: new"),
    ]
    for arguments, message in cases:
        error = compare_error(arguments)
        assert error.startswith(f"python -m pipeline.compare: error: {message}"), error


def compare_error(arguments: list[str]) -> str:
    """The one line a ``python -m pipeline.compare`` call that must fail with exit 2 writes."""
    run = subprocess.run(
        [sys.executable, "-m", "pipeline.compare", *arguments], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 2 and run.stdout == "" and run.stderr.count("\n") == 1, run
    return run.stderr
