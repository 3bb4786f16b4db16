"""Faults on the local Slurm cluster: a cancelled job, a dead node, an exception and a requeue each
end in an honest state, and resubmission (or the requeue itself) completes the execution with exactly
one shard per attempt."""

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.bench.plants import HOLD_ENV, PLANT_ENV
from tests.slurm_support import (
    CLUSTER_SCRIPT,
    needs_cluster,
    output,
    python_module,
    records,
    sacct_state,
    shards,
    started,
    submit,
    wait_for,
    wait_for_state,
)

pytestmark = needs_cluster

MOK = "inference-ep8-f1536-bf16-mok-native"
STATE_DIR = Path(os.environ.get("MOE_SLURM_DIR", "/var/tmp/moe-slurm"))


def job_of(dataset: Path, attempt: int) -> str:
    return next(r["job_id"] for r in records(dataset, "submitted", MOK) if r["attempt"] == attempt)


@pytest.fixture
def held(tmp_path_factory, monkeypatch) -> Iterator[Path]:
    """While this file exists, rank 0 of the execution waits (asleep, costing no CPU) as its gate
    begins (:mod:`pipeline.bench.plants`): the test acts on a running attempt on any host, however
    fast, and the attempt that runs once it is removed takes the scale's own short time. Removed at
    the end whatever happened, so that no held job keeps the cluster's nodes from the next test."""
    hold = tmp_path_factory.mktemp("held") / "hold"  # beside the dataset, not in it
    hold.touch()
    monkeypatch.setenv(PLANT_ENV, f"hold:{MOK}:0")
    monkeypatch.setenv(HOLD_ENV, str(hold))
    yield hold
    hold.unlink(missing_ok=True)


def submit_and_wait_until_running(dataset: Path) -> str:
    submit(dataset, "mok-bf16")
    wait_for("the execution to start", lambda: started(dataset, MOK, 1))
    return job_of(dataset, 1)


def crash_node(node: str, job_id: str) -> None:
    """What a node crash does to a job: its slurmd and every process of the job on it die at once.
    Only this job's processes: another cluster on the host (MOE_SLURM_DIR) may name its nodes alike."""
    victims = {int((STATE_DIR / "run" / f"slurmd-{node}.pid").read_text())}
    array, _, task = job_id.partition("_")
    ours = {f"SLURMD_NODENAME={node}".encode()}
    ours |= (
        {f"SLURM_ARRAY_JOB_ID={array}".encode(), f"SLURM_ARRAY_TASK_ID={task}".encode()}
        if task
        else {f"SLURM_JOB_ID={job_id}".encode()}
    )
    for proc in Path("/proc").iterdir():
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ours <= set(environ):
            victims |= {int(proc.name), parent}  # a task and its slurmstepd
    for pid in victims:
        os.kill(pid, signal.SIGKILL)


def resubmit_and_finish(dataset: Path) -> None:
    done = python_module("pipeline.resubmit", str(dataset), "--only", "failed")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "1 execution(s) resubmitted"
    wait_for_state(dataset, MOK, "done", timeout=180)
    assert shards(dataset, MOK) == ["attempt-2.parquet"]


def test_cancelled_job_is_failed_and_resubmit_completes_it(tmp_path, held):
    job_id = submit_and_wait_until_running(tmp_path)
    subprocess.run(["scancel", job_id], check=True)
    line = wait_for_state(tmp_path, MOK, "failed")
    assert "CANCELLED" in " ".join(line)
    assert sacct_state(job_id).startswith("CANCELLED")
    held.unlink()
    resubmit_and_finish(tmp_path)


def test_job_on_a_dead_node_fails_and_resubmit_completes_it_once_the_node_is_back(tmp_path, held):
    job_id = submit_and_wait_until_running(tmp_path)
    nodes = output("scontrol", "show", "hostnames", output("squeue", "-h", "-j", job_id, "-o", "%N")).split()
    assert len(nodes) == 2, nodes
    crash_node(nodes[-1], job_id)  # not the first node, where the batch script runs
    held.unlink()  # rank 0 goes on into the gate's collectives, with a dead peer
    line = " ".join(wait_for_state(tmp_path, MOK, "failed", timeout=120))
    assert "NODE_FAIL" in line or "FAILED" in line, line
    subprocess.run(["bash", str(CLUSTER_SCRIPT), "up"], check=True, capture_output=True, timeout=120)
    resubmit_and_finish(tmp_path)


def test_exception_in_an_execution_is_failed_in_sacct(tmp_path, monkeypatch):
    # An error planted on rank 0 as the gate begins (pipeline.bench.plants): it raises inside the job.
    monkeypatch.setenv("MOE_BENCH_PLANT", f"error:{MOK}:0")
    submit(tmp_path, "mok-bf16")
    line = wait_for_state(tmp_path, MOK, "failed")
    assert "PlantedError: planted error on rank 0" in " ".join(line)
    wait_for("sacct to record the failure", lambda: sacct_state(job_of(tmp_path, 1)).startswith("FAILED|1:0"))


def test_requeue_on_preemption_is_a_new_attempt_with_exactly_one_shard(tmp_path, held):
    job_id = submit_and_wait_until_running(tmp_path)
    # What Slurm sends before preemption or the time limit; submitit checkpoints and requeues.
    subprocess.run(["scancel", "--signal=USR2", job_id], check=True)
    wait_for("the requeued attempt in the ledger", lambda: len(records(tmp_path, "submitted", MOK)) == 2)
    held.unlink()
    assert job_of(tmp_path, 2) == job_id
    # Slurm holds a requeued job for two minutes; let it start now.
    wait_for(
        "the job to be pending again", lambda: output("squeue", "-h", "-j", job_id, "-o", "%T") == "PENDING"
    )
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True)
    wait_for_state(tmp_path, MOK, "done", timeout=180)
    assert shards(tmp_path, MOK) == ["attempt-2.parquet"]
    # attempt 1 recorded as ended by the requeue itself, before Slurm could kill its processes
    failed = records(tmp_path, "failed", MOK)
    assert [r["attempt"] for r in failed] == [1]
    assert failed[0]["reason"] == "requeued by Slurm's signal (preemption or time limit) as attempt 2"
