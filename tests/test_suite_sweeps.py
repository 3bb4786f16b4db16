"""Suites through the real sweep: a suite of one's own, from a folder, swept, published, checked case
by case and resubmitted once its file is gone; seed 003's suite runs and matches its naive
formulation. A tiny scale (``scale=ci``) keeps them to seconds."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.data import ledger
from pipeline.data.dataset import Dataset
from pipeline.data.scan import scan_shards
from pipeline.matrix import Suite
from tests.sweeps import run_sweep

pytestmark = pytest.mark.slow
# Seed 003's layer in small (no shared expert), over two ranks: MoK against Dist-MoE, every token
# of the timed forward against the naive formulation (rank 0's tokens reach rank 1's experts).
TINY = {
    "name": "tiny",
    "publishes": ["pairs", "cases"],
    "check": "case",
    "shape": {"d_model": 8192, "d_ff": 2048, "num_experts": 16, "top_k": 4, "num_shared": 0},
    "workloads": [{"kind": "inference", "ep": 2, "tokens": 2048}],
    "variants": ["mok-bf16", "dist-moe-bf16"],
}
MOK = "inference-ep2-f2048-d8192-e16-k4-s0-bf16-mok-native"


def cli(module: str, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *arguments], capture_output=True, text=True, timeout=600
    )


def rows(path: Path) -> list[dict[str, str]]:
    return list(csv.DictReader(path.open()))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset of the tiny suite, swept from a folder that is gone once the sweep ends."""
    folder = tmp_path_factory.mktemp("mine")
    (folder / "suite").mkdir()
    (folder / "suite" / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    dataset = tmp_path_factory.mktemp("tiny") / "dataset"
    done = run_sweep(dataset, "--config-dir", str(folder), "suite=tiny", "scale=ci")
    assert done.returncode == 0, done.stderr[-3000:]
    shutil.rmtree(folder)
    return dataset


def test_a_suite_of_ones_own_publishes_its_pairs_and_cases(tiny):
    done = cli("pipeline.aggregate", str(tiny))
    assert done.returncode == 0, done.stderr
    (pair,) = rows(tiny / "mok-comparison-pairs.csv")
    assert pair["mok_execution_id"] == MOK
    cases = rows(tiny / "mok-comparison-cases.csv")
    assert [c["ranks"] for c in cases] == ["2", "2"] and all(c["casePassed"] == "true" for c in cases)
    assert all(float(c["caseMaxError"]) <= float(c["caseTolerance"]) == 1e-5 for c in cases)
    assert all(c["solPct"] == "" and float(c["fullScaleSolMS"]) > 0 for c in cases)  # a CPU has no peaks
    meta = json.loads((tiny / "mok-comparison.json").read_text())["meta"]
    assert meta["matrix"] == {"executions": 2, "matched_workloads": 1, "pairs": 1}
    assert "Cases: output and speed of light" in (tiny / "report.html").read_text()
    (intent,) = ledger.intents(ledger.read(Dataset(tiny)))
    assert intent.comparable.suite == Suite.of(TINY)  # the dataset keeps its suite


def test_every_command_takes_the_suite_from_the_dataset(tiny, tmp_path):
    dataset = tmp_path / "copy"
    shutil.copytree(tiny, dataset, symlinks=True)
    for shard in (dataset / "shards" / f"execution={MOK}").iterdir():
        shard.unlink()
    status = cli("pipeline.status", str(dataset))
    assert status.returncode == 1 and f"missing  {MOK}" in status.stdout
    resubmitted = cli("pipeline.resubmit", str(dataset))  # the suite's file is gone: the dataset has it
    assert resubmitted.returncode == 0, resubmitted.stderr[-3000:]
    assert cli("pipeline.status", str(dataset)).returncode == 0
    compared = cli("pipeline.compare", str(tiny), str(dataset))
    assert compared.returncode in (0, 1), compared.stderr
    assert " of 4 times; " in compared.stdout.splitlines()[-1]  # both executions' two phases compared


def test_seed_003_matches_its_naive_formulation(tmp_path):
    dataset = tmp_path / "seed-003"
    done = run_sweep(
        dataset, "suite=seed-003", "workload=inference-ep1-f2048-t1024-d8192-e256-k8-s0", "scale=ci"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (shard,) = scan_shards(Dataset(dataset)).newest.values()
    assert (shard.meta.shape.layer_tokens, shard.meta.shape.num_shared) == ((8,), 0)
    sanity = shard.meta.sanity
    assert sanity is not None and sanity.passed and sanity.errors["case"] <= sanity.tolerance == 1e-5
