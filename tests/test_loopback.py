"""The loopback: a process group of one rank whose layers call the exchange's collectives all the same.
On a GPU (skipped here), NCCL's all-to-alls are captured in the CUDA graphs of the timed steps beside
the project's eager barriers, the replay equals the eager steps, and the loopback computes what one
rank alone computes; on CPUs the same rehearsal runs eagerly over gloo in the device run's dry run
(tests/test_gpu_run.py). A loopback is refused where it cannot be one. The ranks step's line (ranks
sharing one GPU) says what is known of each execution."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from pipeline.bench.shared_gpu import Gated
from pipeline.moe.comm import Group


def test_a_loopback_needs_a_process_group_of_one_rank():
    with pytest.raises(ValueError, match="a loopback needs a process group of one rank; torch.distributed"):
        Group.loopback_of()
    assert Group(None, 1, 0).exchanges is False and Group(None, 1, 0, loopback=True).exchanges is True
    assert Group(None, 2, 1).exchanges is True
    assert Group.resolve(Group(None, 1, 0, loopback=True)).loopback  # a Group is taken as it is


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU for NCCL and CUDA graphs")
def test_nccl_all_to_alls_inside_captured_graphs_replay_the_eager_steps():
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.bench.loopback", "--device", "cuda"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    records = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and len(records) == 2, done.stdout[-3000:] + done.stderr[-3000:]
    for r in records:
        assert r["collective"] == "nccl" and r["graphs"] is True, r
        # dispatch and combine forward, their gradients backward (FP8 dispatch: payloads and scales)
        assert r["collectives_captured"]["alltoall_base_"] >= 4, r
        assert max(r["replay_error"].values()) <= r["tolerance"] and r["loopback_error"] <= r["tolerance"], r
        assert all(ms > 0 for ms in r["window_ms"].values())


def test_a_shared_gpu_line_says_what_is_known_of_its_execution():
    """The ranks step's line (``pipeline.bench.shared_gpu``): an execution that failed before its gate
    has no rows, errors or tolerance in its line, and its peaks are null, not left out; one that ran
    its gate has them all; the device run's summary tells the two apart by ``slice_rows``."""
    common = {"execution_id": "e", "scale": "ci", "ranks": 2, "seconds": 1.5}
    where = {"devices": ("cpu",), "gpus": ()}
    no_peaks = {"peak_gib_per_rank": None, "peak_gib_all_ranks": None}
    error = {"error": "OSError: x", "traceback": "...", "rank_errors": {"0": "OSError: x"}}
    failed = json.loads(Gated(**common, **where, **no_peaks, **error, passed=False).line())
    assert failed == {**common, "devices": ["cpu"], "gpus": [], **no_peaks, **error, "passed": False}
    verdict = {
        "crossed_rows": 250,
        "slice_rows": 384,
        "max_error": 2e-7,
        "errors": {"y": 2e-7},
        "tolerance": 1e-5,
    }
    gated = json.loads(Gated(**common, **where, **no_peaks, **verdict, passed=True).line())
    assert gated == {**common, "devices": ["cpu"], "gpus": [], **no_peaks, **verdict, "passed": True}
