"""What a sweep meant is never lost: its intent in the ledger before anything launches, one setting per
dataset, an interrupted sweep stopped whole and brought back, unusable shard files said and skipped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import REPO_ROOT
from pipeline.commands import cli
from pipeline.compose import composed
from pipeline.compose.select import select
from pipeline.data import ledger
from pipeline.data.comparable import Comparable
from pipeline.data.dataset import Dataset
from pipeline.data.schema import METADATA_KEY
from pipeline.launch.jobs import cause
from pipeline.launch.plan import validate
from pipeline.launch.settings import LaunchSettings
from pipeline.matrix import EXECUTION_BY_ID
from pipeline.tools.synthetic_shards import shard_table, write_table
from tests.intents import ONE, intended_dataset
from tests.sweeps import left_running

THREE = [
    "inference-ep8-f1536-bf16-mok-native",
    "inference-ep8-f1536-bf16-dist-moe-bf16",
    "inference-ep8-f1536-mxfp8-mok-native",
]
SWEEP = [
    "--multirun",
    "workload=inference-ep8-f1536",
    "variant=mok-bf16,dist-moe-bf16,mok-mxfp8",
    "scale=ci",
    "hydra/launcher=local",
]


def call(*arguments: str) -> int:
    """A command of the console script, in process, with the status it would exit with."""
    try:
        return cli.main(list(arguments))
    except SystemExit as end:
        return int(end.code or 0)


def test_a_differently_set_run_or_resubmission_is_refused_naming_the_keys(tmp_path, capsys):
    dataset = intended_dataset(tmp_path / "d")
    before = sorted(p.name for p in dataset.root.rglob("*"))
    other = [*ONE[:1], "variant=dist-moe-bf16", "scale=ci", "scale.tokens=32", "seed=1"]
    assert call("run", *other, f"dataset_dir={dataset.root}") == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "scale.tokens=32 (the dataset's: 16), seed=1 (the dataset's: 0)" in line
    assert "run these into a new dataset_dir" in line
    for key, value in (("scale.tokens", "32"), ("seed", "1"), ("scale", "cpu")):
        assert call("resubmit", str(dataset.root), "--set", f"{key}={value}") == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert f"{key}: comparable settings of the dataset" in line and "new dataset_dir" in line
    assert sorted(p.name for p in dataset.root.rglob("*")) == before  # nothing launched or written


def _configs() -> dict[str, dict]:
    """The composed configs of the first two executions at scale=ci, as their shards record them."""
    jobs = select(["workload=inference-ep8-f1536", "variant=mok-bf16,dist-moe-bf16", "scale=ci"])
    composed_jobs = [composed(overrides, cfg) for overrides, cfg in jobs]
    return {validate(job).execution.execution_id: dict(job.config) for job in composed_jobs}


def _shard(dataset: Path, execution_id: str, attempt: int, config: dict, seed: int = 0) -> Path:
    """A synthetic shard that records ``config`` (its seed set to ``seed``)."""
    rng = np.random.default_rng(attempt)
    table = shard_table(EXECUTION_BY_ID[execution_id], attempt, rng, ranks=2, scale="ci")
    meta = json.loads(table.schema.metadata[METADATA_KEY])
    meta["config"] = {**config, "seed": seed}
    return write_table(dataset, table.replace_schema_metadata({METADATA_KEY: json.dumps(meta)}))


def _synthetic_intent(dataset: Dataset, configs: dict[str, dict]) -> None:
    """The intent of a scale=ci sweep of ``configs``' executions, as ``pipeline.run`` records it."""
    settings = LaunchSettings(backend="local", cluster="local", gpus=None, timeout_min=60)
    meant = tuple(ledger.Intention(e, ("scale=ci",)) for e in configs)
    comparable = Comparable.of_config(next(iter(configs.values())))
    ledger.append(dataset, ledger.Intended(meant, settings=settings.to_json(), comparable=comparable))


@pytest.mark.slow
def test_foreign_wrong_typed_and_empty_files_are_skipped_by_every_command(tmp_path, capsys):
    mok, dist = THREE[0], THREE[1]
    configs = _configs()
    assert sorted(configs) == sorted([mok, dist])
    dataset = Dataset(tmp_path / "d")
    _synthetic_intent(dataset, configs)
    foreign = dataset.shard_path(mok, 1)
    foreign.parent.mkdir(parents=True)
    pq.write_table(pa.table({"foo": [1]}), foreign)  # another table under a shard's name
    _shard(dataset.root, mok, 2, configs[mok])  # a newer valid attempt covers it
    wrong = _shard(dataset.root, dist, 1, configs[dist])
    table = pq.read_table(wrong)
    phase = table.schema.get_field_index("phase")
    table = table.set_column(phase, "phase", pa.array(range(table.num_rows), pa.int64()))
    pq.write_table(table.replace_schema_metadata(pq.read_schema(wrong).metadata), wrong)
    empty = dataset.shard_path(dist, 2)
    empty.write_bytes(b"")
    _shard(dataset.root, dist, 3, configs[dist], seed=1)  # set otherwise than the dataset: skipped too
    names = [
        f"shards/execution={mok}/attempt-1.parquet",
        *(f"shards/execution={dist}/attempt-{a}.parquet" for a in (1, 2, 3)),
    ]

    def said(err: str) -> None:
        for name in names:
            assert f"skipped {name}: " in err, (name, err)
        assert "Traceback" not in err

    assert call("status", str(dataset.root)) == 1  # dist has no valid shard: missing
    out, err = capsys.readouterr()
    said(err)
    assert f"done     {mok}" in out and f"missing  {dist}" in out
    assert call("resubmit", str(dataset.root), "--dry-run") == 0
    out, err = capsys.readouterr()
    said(err)
    assert f"would resubmit {dist}" in out
    assert call("compare", str(dataset.root), str(dataset.root)) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err and all(f"skipped (base) {n}: " in err for n in names)
    assert call("aggregate", str(dataset.root), "--no-figures") == 1  # dist meant, not published
    out, err = capsys.readouterr()
    said(err)
    assert "settings differ from the dataset's: seed=1 (the dataset's: 0)" in err
    assert f"not published: 1 execution(s) without a row: {dist}" in err
    _shard(dataset.root, dist, 4, configs[dist])  # a newer valid attempt: every meant execution has its row
    assert call("aggregate", str(dataset.root), "--no-figures") == 0
    out, err = capsys.readouterr()
    said(err)
    assert "not published" not in err
    published = json.loads((dataset.root / "mok-comparison.json").read_text())
    assert sorted(r["execution_id"] for r in published["executions"]) == sorted([mok, dist])


def test_shards_of_mixed_settings_without_an_intent_are_flagged(tmp_path, capsys):
    """A dataset from before intents (no ledger) that mixes seeds: published, flagged, exit 1."""
    configs = _configs()
    _shard(tmp_path, THREE[0], 1, configs[THREE[0]])
    _shard(tmp_path, THREE[1], 1, configs[THREE[1]], seed=1)
    assert call("aggregate", str(tmp_path)) == 1
    err = capsys.readouterr().err
    assert "settings differ between the published executions: seed: 0 (1), 1 (1)" in err
    page = (tmp_path / "report.html").read_text()
    assert "differ in settings, so their times do not pair: seed: 0 (1), 1 (1)" in page
    for key in ("scale", "seed", "scale.tokens", "max_ranks", "cluster"):  # What ran shows each setting
        assert f"<td>{key}</td>" in page


def _cli(*arguments: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO_ROOT,
    )


def _interrupted(dataset: Path, signum: int, *extra: str, group: bool, hang: str) -> tuple[str, str, int]:
    """Run the three-execution sweep and send ``signum`` once the second execution has started (to the
    whole process group, as a terminal's Ctrl-C does, or to the sweep alone, as ``kill`` does); the
    execution ``hang`` is planted to hang, so that it is still running when the signal comes."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "MOE_BENCH_PLANT": f"hang:{hang}:0"}
    sweep = subprocess.Popen(
        [sys.executable, "-m", "pipeline.run", *SWEEP, f"dataset_dir={dataset}", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        start_new_session=True,
    )
    assert sweep.stdout is not None
    seen = []
    for line in sweep.stdout:
        seen.append(line)
        if sum(s.startswith("start ") for s in seen) == 2:
            break
    if group:
        os.killpg(sweep.pid, signum)
    else:
        sweep.send_signal(signum)
    out, err = sweep.communicate(timeout=120)
    return "".join(seen) + out, err, sweep.returncode


def _states(dataset: Path) -> dict[str, str]:
    done = _cli("pipeline.status", str(dataset), "--json")
    return {e["execution_id"]: e["state"] for e in json.loads(done.stdout)["executions"]}


@pytest.mark.slow
def test_an_interrupted_sweep_loses_nothing(tmp_path):
    """Ctrl-C (SIGINT to the process group) after the first of three executions, then ``kill``
    (SIGTERM to the sweep alone) of the resumed sweep after its first: each ends in one line with
    130 / 143 and leaves no process; status says what is missing, resubmit brings it, the published
    dataset holds each execution once, and ``--resume`` of the sweep then runs nothing."""
    dataset = tmp_path / "d"
    out, err, status = _interrupted(dataset, signal.SIGINT, group=True, hang=THREE[1])
    assert status == 130, err
    (line,) = [e for e in err.splitlines() if "interrupted" in e]
    assert line.startswith("pipeline.run: interrupted by SIGINT: stopped ") and "1 done" in line
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert left_running(dataset) == []
    assert _states(dataset) == {THREE[0]: "done", THREE[1]: "missing", THREE[2]: "missing"}

    out, err, status = _interrupted(dataset, signal.SIGTERM, "--resume", group=False, hang=THREE[2])
    assert status == 143, err
    assert f"--resume: {THREE[0]} is done already: skipped" in out
    (line,) = [e for e in err.splitlines() if "interrupted" in e]
    assert line.startswith("pipeline.run: interrupted by SIGTERM: stopped ")
    assert "Traceback" not in err
    assert left_running(dataset) == []
    assert _states(dataset) == {THREE[0]: "done", THREE[1]: "done", THREE[2]: "missing"}

    done = _cli("pipeline.resubmit", str(dataset))
    assert done.returncode == 0, done.stderr
    assert _states(dataset) == dict.fromkeys(THREE, "done")
    done = _cli("pipeline.aggregate", str(dataset), "--no-figures")
    assert done.returncode == 0, done.stderr
    published = json.loads((dataset / "mok-comparison.json").read_text())
    assert sorted(r["execution_id"] for r in published["executions"]) == sorted(THREE)

    submissions = len([r for r in ledger.read(Dataset(dataset)) if isinstance(r, ledger.Submitted)])
    done = _cli("pipeline.run", *SWEEP, f"dataset_dir={dataset}", "--resume")
    assert done.returncode == 0, done.stderr
    assert "nothing to run" in done.stdout
    assert len([r for r in ledger.read(Dataset(dataset)) if isinstance(r, ledger.Submitted)]) == submissions
    assert left_running(dataset) == []


def _fails() -> None:
    raise ValueError("device=cuda but no GPU is visible here")


@pytest.mark.slow
def test_the_failed_line_names_the_cause_submitit_reports(tmp_path):
    """A real local submitit job that raises: its cause is the task's error, not submitit's
    ``FailedJobError`` and the paths of its logs."""
    import submitit

    executor = submitit.LocalExecutor(folder=tmp_path)
    executor.update_parameters(timeout_min=5)
    job = executor.submit(_fails)
    with pytest.raises(Exception) as raised:
        job.results()
    assert cause(raised.value) == "ValueError: device=cuda but no GPU is visible here"
