"""The ledger on the local Slurm cluster: writers on several nodes at once lose nothing, and a dataset
copied elsewhere (the original deleted) reports the same status."""

import os
import shutil
import subprocess
import sys

from pipeline.data import ledger
from pipeline.data.dataset import Dataset
from tests.slurm_support import REPO, needs_cluster, python_module, submit, wait_for_state

pytestmark = needs_cluster

MOK = "inference-ep8-f1536-bf16-mok-native"
DIST = "inference-ep8-f1536-bf16-dist-moe-bf16"
WRITER = """
import os, sys
from pipeline.data import ledger
from pipeline.data.dataset import Dataset
task, node = os.environ["SLURM_PROCID"], os.environ["SLURMD_NODENAME"]
for i in range(int(sys.argv[2])):
    ledger.append(Dataset(sys.argv[1]), ledger.Started(f"{node}-{task}", i + 1, "9" * 20))
"""


def test_writers_on_four_nodes_at_once_lose_nothing(tmp_path):
    tasks, n = 8, 100
    command = ["srun", "-N", "4", "-n", str(tasks), sys.executable, "-c", WRITER, str(tmp_path), str(n)]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run(command, check=True, timeout=180, cwd=REPO, env=env, capture_output=True)
    records = ledger.read(Dataset(tmp_path))
    writers = {r.execution_id for r in records}
    assert len(records) == tasks * n and len(writers) == tasks
    assert {w.split("-")[0] for w in writers} == {"n1", "n2", "n3", "n4"}
    for writer in writers:
        assert sorted(r.attempt for r in records if r.execution_id == writer) == list(range(1, n + 1))


def test_a_copied_dataset_reports_the_same_status(tmp_path):
    original, copy = tmp_path / "original", tmp_path / "copy"
    submit(original, "mok-bf16")
    submit(original, "dist-moe-bf16", "device=cuda")  # fails on these CPU nodes
    wait_for_state(original, MOK, "done", timeout=180)
    wait_for_state(original, DIST, "failed", timeout=120)
    before = python_module("pipeline.status", str(original))
    shutil.copytree(original, copy, symlinks=True)
    shutil.rmtree(original)
    after = python_module("pipeline.status", str(copy))
    assert (after.returncode, after.stderr) == (before.returncode, before.stderr) == (1, "")
    assert after.stdout == before.stdout.replace(str(original), str(copy))
    assert "log: " + str(copy / "logs" / DIST / "attempt-1") in after.stdout  # its log, found in the copy
