"""Who may write, on real processes: a sweep stalled while its job runs on keeps what its job runs,
seen from another host (a separate UTS and PID namespace: its own host name, none of this host's
processes), and loses only what it never started, which it then leaves to the writer that took it
over; a job's controller killed by the id ``status`` prints takes its ranks with it before the next
job starts, and a rank killed in the middle of a group ends its execution at once, naming the rank.
Real local sweeps at ``scale=ci``, with an execution held at its gate while the test acts
(``MOE_BENCH_PLANT=hold:...``, :mod:`pipeline.bench.plants`)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from pipeline.data import claims, ledger
from pipeline.data.dataset import Dataset
from pipeline.launch import groups as grouping
from tests.plans import LOCAL, planned_sweep
from tests.sweeps import left_running

FOUR = (
    "workload=inference-ep8-f1536",
    "variant=mok-bf16,dist-moe-bf16,mok-mxfp8,dist-moe-bf16-dispatch",
    "scale=ci",
)
PAIRS = "hydra.launcher.group_size=2"  # two jobs of two executions each


def sweep(dataset: Path, hold: Path, *held: str) -> subprocess.Popen:
    """The four executions, two jobs of two, with rank 0 of each execution of ``held`` waiting at its
    gate while the file ``hold`` exists."""
    plant = ",".join(f"hold:{e}:0" for e in held)
    env = {**os.environ, "MOE_BENCH_PLANT": plant, "MOE_BENCH_HOLD": str(hold)}
    command = [sys.executable, "-m", "pipeline.run", "--multirun", *FOUR, PAIRS, f"dataset_dir={dataset}"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def records(dataset: Path, kind: type) -> list:
    if not (dataset / "ledger").is_dir():
        return []
    return [r for r in ledger.read(Dataset(dataset)) if isinstance(r, kind)]


def wait_for(condition, timeout: float = 120.0, poll: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(poll)


def on_another_host(*arguments: str) -> subprocess.CompletedProcess:
    """``python -m ARGUMENTS`` as another host runs it: a host name of its own (UTS namespace) and
    process ids of its own (PID namespace, /proc mounted anew), so it sees none of this host's
    processes; the dataset is shared, as on shared storage."""
    command = ["unshare", "--uts", "--pid", "--fork", "--mount-proc", "sh", "-c"]
    command += ['hostname another-host && exec "$@"', "sh", sys.executable, "-m", *arguments]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOE_BENCH_")}
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)


def beats(dataset: Path) -> list[Path]:
    """The heartbeat files (not one being written: its temporary name starts with a dot)."""
    return [p for p in (dataset / "claims" / ".owners").iterdir() if not p.name.startswith(".")]


def shards(dataset: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted((dataset / "shards").glob("execution=*/*.parquet")):
        found.setdefault(Dataset.execution_of_shard(path), []).append(path.name)
    return found


def job_processes(folder: Path) -> list[int]:
    """Live processes whose command line names a job's folder (its controller and ranks)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            line = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            state = (entry / "status").read_text()
        except OSError:
            continue
        if entry.name.isdigit() and str(folder) in line and "\nState:\tZ" not in state:
            found.append(int(entry.name))
    return found


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="another host's namespaces need root (unshare)")


@pytest.mark.slow
@needs_root
def test_a_stalled_sweep_keeps_what_its_job_runs_and_leaves_what_it_never_started(tmp_path):
    """The sweep stops (SIGSTOP, as an NFS stall or a suspended shell would) while its first job runs;
    its heartbeat is then as old as 31 s of silence leave it. Another host's status shows the job's
    executions running and pending, the owner silent but its job alive, and its resubmit takes
    nothing. Once the job has ended, the other host's resubmit takes the second job's executions,
    which the silent sweep claimed but never submitted; the sweep, continued, leaves them to it.
    Every execution ends with exactly one shard, and no two jobs ever ran at once."""
    dataset, hold = tmp_path / "dataset", tmp_path / "hold"
    hold.write_text("")
    ids = ["inference-ep8-f1536-bf16-mok-native", "inference-ep8-f1536-bf16-dist-moe-bf16"]
    ids += ["inference-ep8-f1536-mxfp8-mok-native", "inference-ep8-f1536-mxfp8-dist-moe-bf16-dispatch"]
    running = sweep(dataset, hold, *ids)
    try:
        wait_for(lambda: bool(records(dataset, ledger.Started)))
        os.kill(running.pid, signal.SIGSTOP)
        (beat,) = [p for p in beats(dataset) if ".job-" not in p.name]
        beat.write_text(json.dumps({"at": time.time() - claims.STALE_S - 1}))

        status = on_another_host("pipeline.status", str(dataset), "--json")
        states = {e["execution_id"]: e for e in json.loads(status.stdout)["executions"]}
        assert sorted(e["state"] for e in states.values()) == ["pending"] * 3 + ["running"], status.stdout
        for e in states.values():
            assert re.search(r"silent since \S+, its job \d+ still alive", e["detail"]), e
        resubmit = on_another_host("pipeline.resubmit", str(dataset))
        assert resubmit.returncode == 0, resubmit.stderr
        assert resubmit.stdout.splitlines()[-1] == "0 execution(s) resubmitted", resubmit.stdout
        (first_job,) = {r.job_id for r in records(dataset, ledger.Submitted)}

        hold.unlink()  # the first job finishes while its sweep is still stopped
        wait_for(lambda: len(records(dataset, ledger.Finished)) == 2)
        wait_for(lambda: not any(".job-" in p.name for p in beats(dataset)))
        taken = on_another_host("pipeline.resubmit", str(dataset))
        assert taken.returncode == 0, taken.stdout[-2000:] + taken.stderr[-2000:]
        assert taken.stdout.splitlines()[-1] == "2 execution(s) resubmitted", taken.stdout
    finally:
        os.kill(running.pid, signal.SIGCONT)
        hold.unlink(missing_ok=True)
    out, err = running.communicate(timeout=300)
    assert running.returncode == 0, err[-2000:]
    left = [line for line in out.splitlines() if line.startswith("left    ")]
    assert len(left) == 2 and all("while this sweep was silent; left to it" in line for line in left), out
    assert out.splitlines()[-1] == "4 executions: 2 done, 0 failed, 2 left to other writers"

    assert sorted(shards(dataset).values()) == [["attempt-1.parquet"]] * 2 + [["attempt-2.parquet"]] * 2
    said = ledger.read(Dataset(dataset))
    started = [r.execution_id for r in said if isinstance(r, ledger.Started)]
    assert sorted(started) == sorted(ids)  # each ran once
    jobs = [r.job_id for r in said if isinstance(r, ledger.Submitted)]
    assert len(set(jobs)) == 2  # the silent sweep's one job and the other host's
    # measured alone: the other host's job went out after the first job's last record
    last_of_first = max(i for i, r in enumerate(said) if getattr(r, "job_id", None) == first_job)
    first_of_second = min(
        i for i, r in enumerate(said) if isinstance(r, ledger.Submitted) and r.job_id != first_job
    )
    assert last_of_first < first_of_second
    assert not left_running(dataset)


@pytest.mark.slow
def test_a_killed_controller_takes_its_ranks_and_a_killed_rank_ends_its_execution_at_once(tmp_path):
    """``kill -9`` of the job id ``status`` prints, while the first job's first execution runs: its
    ranks are gone before the next job goes out, the execution is failed with the cause and the
    other member of the job missing, each with one record; then SIGKILL of rank 1 in the second
    job's second execution: it fails within seconds (its deadline is 60 s), the reason naming
    rank 1. The sweep's own summary counts as status does."""
    (first_job, second_job) = grouping.groups(
        planned_sweep(tmp_path / "planned", list(FOUR)), replace(LOCAL, group_size=2)
    )
    m1, m2 = (p.execution_id for p in first_job.members)
    m3, m4 = (p.execution_id for p in second_job.members)
    dataset, hold = tmp_path / "dataset", tmp_path / "hold"
    hold.write_text("")
    running = sweep(dataset, hold, m1, m4)
    try:
        wait_for(lambda: any(r.execution_id == m1 for r in records(dataset, ledger.Started)))
        status = subprocess.run(
            [sys.executable, "-m", "pipeline.status", str(dataset), "--json"], capture_output=True, text=True
        )
        (job,) = [e["job_id"] for e in json.loads(status.stdout)["executions"] if e["state"] == "running"]
        folder = Dataset(dataset).log_dir(m1, 1).resolve()
        assert int(job) in job_processes(folder) and len(job_processes(folder)) == 3  # controller, 2 ranks
        os.kill(int(job), signal.SIGKILL)
        wait_for(lambda: len({r.job_id for r in records(dataset, ledger.Submitted)}) == 2, poll=0.02)
        assert not job_processes(folder)  # none of the killed job's ranks runs beside the next job

        wait_for(lambda: any(r.execution_id == m4 for r in records(dataset, ledger.Started)))
        second = Dataset(dataset).log_dir(m4, 1).resolve()
        (rank1,) = [
            pid
            for pid in job_processes(second)
            if b"SUBMITIT_LOCAL_GLOBALID=1" in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        ]
        os.kill(rank1, signal.SIGKILL)
        killed = time.monotonic()
        wait_for(lambda: any(r.execution_id == m4 for r in records(dataset, ledger.Failed)), timeout=60)
        assert time.monotonic() - killed < 15
    finally:
        hold.unlink(missing_ok=True)
    out, err = running.communicate(timeout=300)
    assert running.returncode == 1, err[-2000:]
    lines = out.splitlines()
    assert any(
        line.startswith(f"FAILED  {m1}  job {job}'s controller was killed by SIGKILL") for line in lines
    )
    assert any(line.startswith(f"MISSING {m2}  not started: job {job} ended first") for line in lines)
    assert any(line.startswith(f"done    {m3}  ") for line in lines)
    assert any(line.startswith(f"FAILED  {m4}  rank 1 (pid {rank1} on ") for line in lines), out
    assert lines[-1] == "4 executions: 1 done, 2 failed, 1 missing"
    status = subprocess.run(
        [sys.executable, "-m", "pipeline.status", str(dataset)], capture_output=True, text=True
    )
    assert (
        status.stdout.splitlines()[-1] == "1 done, 0 running, 0 pending, 2 failed, 1 missing of 4 executions"
    )
    said = ledger.read(Dataset(dataset))
    ends = [(r.execution_id, r.attempt) for r in said if isinstance(r, ledger.TERMINAL)]
    assert sorted(ends) == sorted([(m1, 1), (m3, 1), (m4, 1)])  # one verdict each; none for m2
    (reason,) = [r.reason for r in said if isinstance(r, ledger.Failed) and r.execution_id == m4]
    assert reason.startswith(f"rank 1 (pid {rank1} on ") and reason.endswith("died while it ran")
    assert shards(dataset) == {m3: ["attempt-1.parquet"]}
    assert not left_running(dataset)
