"""``pipeline.status`` and ``pipeline.resubmit`` on the local launcher, and their answers to bad input."""

import os
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from pipeline.commands.resubmit import batches, parse_changes
from pipeline.data import ledger
from pipeline.data.dataset import Dataset
from pipeline.launch.settings import SlurmLauncherConf, effective
from pipeline.survey import ExecutionStatus

MOK = "inference-ep8-f1536-bf16-mok-native"
EP8 = "inference-ep8-f1536"
WORKLOADS = f"{EP8},inference-ep16-f1536"
PRESET = {"name": "local-slurm", "ranks_per_node": 1, "gpus": False, "partition": "debug"}
SLURM_SETTINGS = effective(asdict(SlurmLauncherConf()), PRESET, [])
ONE_EXECUTION = ("workload=inference-ep8-f1536", "variant=mok-bf16", "scale=ci")


def cli(module: str, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *arguments], capture_output=True, text=True, timeout=600
    )


# ``python -m MODULE ARGS``, and on its way out whether it imported torch (its last line on stderr)
WITH_IMPORTS = """
import runpy, sys
module = sys.argv[1]
sys.argv = sys.argv[1:]
try:
    runpy.run_module(module, run_name="__main__", alter_sys=True)
finally:
    print("torch imported:", "torch" in sys.modules, file=sys.stderr)
"""


def torch_imported(module: str, *arguments: str) -> tuple[subprocess.CompletedProcess, bool]:
    """The command's result, and whether its own process imported torch (its jobs' always do)."""
    done = subprocess.run(
        [sys.executable, "-c", WITH_IMPORTS, module, *arguments], capture_output=True, text=True, timeout=600
    )
    last = done.stderr.strip().splitlines()[-1]
    assert last in ("torch imported: True", "torch imported: False"), done.stderr[-3000:]
    return done, last.endswith("True")


def status_words(dataset) -> tuple[int, list[str]]:
    done = cli("pipeline.status", str(dataset))
    assert done.returncode in (0, 1), done.stderr
    (line,) = [ln for ln in done.stdout.splitlines() if MOK in ln]
    return done.returncode, line.split()


def run_mok(dataset: Path) -> subprocess.CompletedProcess:
    """The MoK BF16 execution of the smallest inference workload at scale=ci, into ``dataset``."""
    return cli(
        "pipeline.run",
        "workload=inference-ep8-f1536",
        "variant=mok-bf16",
        "scale=ci",
        f"dataset_dir={dataset}",
    )


def test_status_of_a_folder_that_does_not_exist(tmp_path):
    done = cli("pipeline.status", str(tmp_path / "nowhere"))
    assert done.returncode == 2
    assert (
        done.stderr.strip() == f"pipeline.status: dataset directory '{tmp_path / 'nowhere'}' does not exist"
    )


def test_status_of_a_folder_where_nothing_was_launched(tmp_path):
    done = cli("pipeline.status", str(tmp_path))
    assert done.returncode == 2
    assert "holds no ledger records and no shards" in done.stderr


def test_resubmit_names_the_allowed_choices(tmp_path):
    done = cli("pipeline.resubmit", str(tmp_path), "--only", "done")
    assert done.returncode == 2
    assert "invalid choice: 'done' (choose from 'failed', 'missing')" in done.stderr


@pytest.mark.slow
def test_local_execution_done_missing_then_resubmitted(tmp_path):
    """Done, missing once its shard is gone, done again after resubmit; and neither the sweep nor
    resubmit imports torch (planning checks the routing's loads and the device without it: only the
    jobs run the layers)."""
    run, imported = torch_imported("pipeline.run", *ONE_EXECUTION, f"dataset_dir={tmp_path}")
    assert run.returncode == 0, run.stderr[-3000:]
    assert not imported
    code, words = status_words(tmp_path)
    assert (code, words[0], words[3]) == (0, "done", "1")

    Dataset(tmp_path).shard_path(MOK, 1).unlink()
    code, words = status_words(tmp_path)
    assert (code, words[0]) == (1, "missing")

    again = cli("pipeline.resubmit", str(tmp_path), "--only", "failed")
    assert again.stdout.splitlines() == ["0 execution(s) resubmitted"]
    again, imported = torch_imported("pipeline.resubmit", str(tmp_path))
    assert again.returncode == 0, again.stderr[-3000:]
    assert not imported
    code, words = status_words(tmp_path)
    assert (code, words[0], words[3]) == (0, "done", "2")
    assert sorted(p.name for p in Dataset(tmp_path).shard_path(MOK, 2).parent.iterdir()) == [
        "attempt-2.parquet"
    ]


@pytest.mark.slow
def test_local_failure_shows_the_error_and_the_log(tmp_path):
    planted = {**os.environ, "MOE_BENCH_PLANT": f"error:{MOK}:1"}  # pipeline.bench.plants
    run = subprocess.run(
        [sys.executable, "-m", "pipeline.run", *ONE_EXECUTION, f"dataset_dir={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=600,
        env=planted,
    )
    assert run.returncode == 1
    code, words = status_words(tmp_path)
    assert (code, words[0]) == (1, "failed")
    line = " ".join(words)
    assert "PlantedError: planted error on rank 1 (rank 1)" in line
    log = words[-1]
    assert log.startswith(str(tmp_path / "logs" / MOK / "attempt-1")) and log.endswith("_0_log.err")


@pytest.mark.slow
def test_a_file_where_a_folder_belongs_refuses_the_run_before_anything_is_launched(tmp_path):
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / f"execution={MOK}").write_text("in the way\n")
    run = run_mok(tmp_path)
    assert run.returncode == 2
    (line,) = run.stderr.splitlines()
    assert line == (
        f"pipeline.run: nothing was launched; shards/execution={MOK} in {tmp_path} is a file, where the "
        "layout keeps a folder: nothing is written there; remove it"
    )
    assert not (tmp_path / "ledger").exists() and not (tmp_path / "logs").exists()


def test_resubmission_groups_executions_by_their_recorded_settings(tmp_path):
    def failed(workload: str, variant: str, execution_id: str, timeout: int) -> ExecutionStatus:
        overrides = [f"workload={workload}", f"variant={variant}", "scale=ci", "cluster=local-slurm"]
        overrides.append("dataset_dir=/moved/away")
        log_dir = f"logs/{execution_id}/attempt-1"
        settings = replace(SLURM_SETTINGS, timeout_min=timeout).to_json()
        record = ledger.Submitted(
            execution_id, 1, "7_0", overrides, "slurm", "local-slurm", log_dir, settings
        )
        return ExecutionStatus(execution_id, "failed", 1, "7_0", "", None, record)

    ep16 = "inference-ep16-f1536-bf16-mok-native"
    chosen = [
        failed(EP8, "mok-bf16", MOK, 7),
        failed("inference-ep16-f1536", "mok-bf16", ep16, 7),
        failed(EP8, "dist-moe-bf16", "inference-ep8-f1536-bf16-dist-moe-bf16", 9),
    ]
    got = batches(tmp_path, chosen, {"account": "proj"})
    assert [[p.execution.execution_id for p in b.planned] for b in got] == [
        [MOK, ep16],
        ["inference-ep8-f1536-bf16-dist-moe-bf16"],
    ]
    assert [(b.settings.timeout_min, b.settings.wait, b.settings.account) for b in got] == [
        (7, False, "proj"),
        (9, False, "proj"),
    ]
    assert all(p.dataset.root == tmp_path and p.attempt == 1 for b in got for p in b.planned)
    assert got[0].planned[0].overrides == [
        f"workload={EP8}",
        "variant=mok-bf16",
        "scale=ci",
        "cluster=local-slurm",
        f"dataset_dir={tmp_path}",
    ]
    with pytest.raises(ValueError, match="launcher key.*acount.*allowed: timeout_min, .*, account"):
        batches(tmp_path, chosen, {"acount": "proj"})


def test_resubmit_reads_launcher_changes_both_ways():
    assert parse_changes(["timeout_min=10", "hydra.launcher.exclude=n1,n2", "setup=[a, b]"]) == {
        "timeout_min": 10,
        "exclude": "n1,n2",
        "setup": ["a", "b"],
    }
    with pytest.raises(ValueError, match="is not KEY=VALUE"):
        parse_changes(["timeout_min"])
