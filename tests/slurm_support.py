"""Helpers of the tests that run on the local Slurm cluster (``jobs/local-slurm.sh up``)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeline.commands import status
from pipeline.data import ledger
from pipeline.data.dataset import Dataset

REPO = Path(__file__).resolve().parents[1]
CLUSTER_SCRIPT = REPO / "jobs" / "local-slurm.sh"
WORKLOAD = "workload=inference-ep8-f1536"


def _cluster_problem() -> str | None:
    """Why the local cluster cannot be used, or None when it is up."""
    try:
        command = ["bash", str(CLUSTER_SCRIPT), "status"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"jobs/local-slurm.sh status failed: {err}"
    if done.returncode != 0:
        return "the local Slurm cluster is not up (run: jobs/local-slurm.sh up)"
    return None


_PROBLEM = _cluster_problem()
needs_cluster = [
    pytest.mark.slurm,
    pytest.mark.skipif(_PROBLEM is not None, reason=_PROBLEM or ""),
]


def python_module(module: str, *arguments: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *arguments], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def submit(dataset: Path, variants: str, *overrides: str) -> None:
    """Fire-and-forget sweep of the ci workload on the local cluster."""
    done = python_module(
        "pipeline.run",
        "--multirun",
        WORKLOAD,
        f"variant={variants}",
        "scale=ci",
        f"dataset_dir={dataset}",
        "hydra/launcher=slurm",
        "cluster=local-slurm",
        "hydra.launcher.wait=false",
        *overrides,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


def states(dataset: Path) -> tuple[int, dict[str, list[str]]]:
    """(exit status, execution id -> the words of its status line) of ``pipeline.status``, run in this
    process: the waits below poll it, and a fresh interpreter a poll would cost its imports each time
    (the command's own process is tested in tests/test_cli.py and tests/test_status_local.py)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = status.main([str(dataset)])
    assert code in (0, 1), err.getvalue()
    lines = out.getvalue().splitlines()[:-1]
    return code, {line.split()[1]: line.split() for line in lines}


def wait_for(what: str | Callable[[], str], check: Callable[[], bool], timeout: float = 120.0) -> None:
    """Poll ``check`` until it holds; ``what`` (or what it returns) names the wait in the failure."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {said}")
        time.sleep(0.2)


def wait_for_state(dataset: Path, execution_id: str, state: str, timeout: float = 120.0) -> list[str]:
    """Wait until ``pipeline.status`` reports the state; return the words of that status line."""
    seen: list[str] = []

    def reached() -> bool:
        nonlocal seen
        seen = states(dataset)[1].get(execution_id, [])
        return bool(seen) and seen[0] == state

    wait_for(lambda: f"{execution_id} to be {state} (last: {' '.join(seen)})", reached, timeout)
    return seen


def records(dataset: Path, event: str, execution_id: str) -> list[dict]:
    """The ledger's records of one event of one execution, as their JSON objects."""
    return [
        r.to_json()
        for r in ledger.read(Dataset(dataset))
        if r.event == event and r.execution_id == execution_id
    ]


def started(dataset: Path, execution_id: str, attempt: int) -> bool:
    return any(r["attempt"] == attempt for r in records(dataset, "started", execution_id))


def output(*command: str) -> str:
    """Standard output of a command that must succeed, stripped."""
    return subprocess.run(command, capture_output=True, text=True, check=True, timeout=60).stdout.strip()


def sacct_state(job_id: str) -> str:
    """``State|ExitCode|NodeList`` of the job's newest run in accounting ("" until it is recorded)."""
    out = output("sacct", "-X", "-n", "-P", "-o", "State,ExitCode,NodeList", "-j", job_id)
    return out.splitlines()[-1] if out else ""


def sacct_ended(job_id: str) -> bool:
    """Whether accounting holds the job's end (its state and node list final): the ledger's records
    come from inside the job, a moment before Slurm records that, and a job that fails within seconds
    can show a final state while its node list still names fewer nodes than it was allocated."""
    state, *_, nodes = (sacct_state(job_id) or "|").split("|")
    if state in ("", "PENDING", "RUNNING", "COMPLETING") or nodes in ("", "None assigned"):
        return False
    out = output("sacct", "-X", "-n", "-P", "-o", "NNodes", "-j", job_id)
    allocated = int(out.splitlines()[-1]) if out else 0
    return len(output("scontrol", "show", "hostnames", nodes).split()) == allocated


def shards(dataset: Path, execution_id: str) -> list[str]:
    return sorted(p.name for p in (dataset / "shards" / f"execution={execution_id}").glob("*.parquet"))
