"""A dataset is untrusted input: reading it never runs what it holds, and no path or name read from it
leads outside it. A real sweep's dataset is tampered with as a hostile copy would be (a crafted
pickle wherever submitit keeps one and where a record points, records naming paths and ids that lead
out, a truncated record) and every command that only reads it is run on it."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.data import ledger
from pipeline.data.dataset import Dataset
from tests.sweeps import run_sweep

SWEEP = ("workload=inference-ep8-f1536", "variant=mok-bf16,dist-moe-bf16", "scale=ci")
MOK = "inference-ep8-f1536-bf16-mok-native"


class Payload:
    """Unpickling this runs ``os.system``: it leaves a marker file where it ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def cli(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *arguments], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    """A real two-execution sweep, done."""
    dataset = tmp_path_factory.mktemp("swept") / "dataset"
    done = run_sweep(dataset, *SWEEP)
    assert done.returncode == 0, done.stderr[-2000:]
    return dataset


@pytest.fixture
def hostile(swept: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the sweep with one shard removed, a crafted pickle at every ``*.pkl`` of it and where
    submitit would keep a result, and a ledger record whose log folder leads out of it to another
    crafted pickle: the dataset and the marker that any unpickling would create."""
    dataset, marker = tmp_path / "copy", tmp_path / "code-ran"
    subprocess.run(["cp", "-a", str(swept), str(dataset)], check=True)
    for shard in (dataset / "shards" / f"execution={MOK}").glob("*.parquet"):
        shard.unlink()
    crafted = pickle.dumps(("success", Payload(marker)))
    pickles = list(dataset.rglob("*.pkl"))
    assert pickles  # submitit's own files of the sweep
    for path in pickles:
        path.write_bytes(crafted)
    submitted = [r for r in ledger.read(Dataset(dataset)) if isinstance(r, ledger.Submitted)]
    for r in submitted:
        folder = Dataset(dataset).log_dir(r.execution_id, r.attempt)
        (folder / f"{r.job_id}_0_result.pkl").write_bytes(crafted)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / f"{submitted[0].job_id}_0_result.pkl").write_bytes(crafted)
    record = {**submitted[0].to_json(), "attempt": 2, "log_dir": "../../../outside"}
    (dataset / "ledger" / "99999999999999999999-evil-000000.json").write_text(json.dumps(record))
    return dataset, marker


@pytest.mark.slow
def test_reading_a_hostile_copy_runs_none_of_its_code(hostile: tuple[Path, Path]):
    dataset, marker = hostile
    status = cli("pipeline.status", str(dataset))
    assert status.returncode == 1, status.stderr  # the removed execution counts as failed or missing
    assert MOK in status.stdout and "Traceback" not in status.stderr
    dry = cli("pipeline.resubmit", str(dataset), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"would resubmit {MOK}" in dry.stdout
    assert not marker.exists(), "a command that only reads the dataset ran code from it"


def test_paths_from_a_dataset_stay_inside_it(tmp_path: Path):
    root = tmp_path / "dataset"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / "link").symlink_to(tmp_path)
    dataset = Dataset(root)
    assert dataset.locate("logs/x") == root / "logs" / "x"
    for recorded, why in (
        ("../../etc", "leaves the dataset"),
        ("logs/../../x", "leaves the dataset"),
        ("/etc/passwd", "leaves the dataset"),
        ("logs/link/secret", "links out of the dataset"),
    ):
        with pytest.raises(ValueError, match=why):
            dataset.locate(recorded)
    for name in ("../x", "a/b", ".hidden", "x" * 300, "", "a\nb"):
        with pytest.raises(ValueError, match="is not a plain name"):
            dataset.log_dir(name, 1)


@pytest.mark.slow
def test_a_record_naming_a_path_as_an_execution_or_a_job_is_no_record(swept: Path, tmp_path: Path):
    """Ids become paths (log folders, claims) and scheduler arguments: a record whose execution id
    or job id is not a plain one is unreadable, named, and the rest of the ledger still counts; so is
    a truncated record."""
    dataset = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(swept), str(dataset)], check=True)
    submitted = next(r for r in ledger.read(Dataset(dataset)) if isinstance(r, ledger.Submitted))
    bad = {
        "00000000000000000001-a-000000.json": {**submitted.to_json(), "execution_id": "../../x"},
        "00000000000000000002-b-000000.json": {**submitted.to_json(), "job_id": "--help"},
    }
    for name, record in bad.items():
        (dataset / "ledger" / name).write_text(json.dumps(record))
    (dataset / "ledger" / "00000000000000000003-c-000000.json").write_text('{"event": "fin')
    os.mkfifo(dataset / "ledger" / "00000000000000000004-d-000000.json")
    records, unreadable = ledger.survey(Dataset(dataset))
    assert len(records) == len(ledger.read(Dataset(swept)))
    reasons = dict(unreadable)
    assert "is not a plain name" in reasons["ledger/00000000000000000001-a-000000.json"]
    assert "is not a scheduler's" in reasons["ledger/00000000000000000002-b-000000.json"]
    assert "not a ledger record" in reasons["ledger/00000000000000000003-c-000000.json"]
    assert reasons["ledger/00000000000000000004-d-000000.json"] == "not a regular file"
    status = cli("pipeline.status", str(dataset))
    assert status.returncode == 0, status.stderr
    assert "2 done" in status.stdout
    for name in (*bad, "00000000000000000003-c-000000.json", "00000000000000000004-d-000000.json"):
        assert f"skipped ledger/{name}: " in status.stderr
