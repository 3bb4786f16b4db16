"""Each execution has one writer: what a live sweep owns is never run twice, by a resubmission, a
second sweep or ``--resume``; attempts and shards are claimed by exclusive creation, so of writers
racing for one exactly one wins; and a local job dies with the sweep that started it. Real sweeps,
real processes."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.data import claims, ledger
from pipeline.data.atomic import atomic_write
from pipeline.data.dataset import Dataset

FIVE = ("workload=inference-ep8-f1536", "variant=glob(*)", "scale=ci")


def sweep(dataset: Path, *overrides: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "pipeline.run", "--multirun", *overrides, f"dataset_dir={dataset}"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def cli(*arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *arguments], capture_output=True, text=True, timeout=300)


def wait_for(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def started(dataset: Path) -> int:
    return sum(isinstance(r, ledger.Started) for r in ledger.read(Dataset(dataset)))


def shards(dataset: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted((dataset / "shards").glob("execution=*/*.parquet")):
        found.setdefault(Dataset.execution_of_shard(path), []).append(path.name)
    return found


@pytest.mark.slow
def test_resubmit_and_resume_during_a_sweep_take_nothing_it_owns(tmp_path):
    """While a local sweep of five executions runs, ``status`` shows none of them missing, and
    ``resubmit`` and a ``--resume`` sweep take none of them; a second sweep without ``--resume``
    refuses in one line naming the owner. Every execution ends with exactly one attempt shard, and no
    attempt fails on an existing shard."""
    dataset = tmp_path / "dataset"
    first = sweep(dataset, *FIVE)
    wait_for(lambda: (dataset / "ledger").is_dir() and started(dataset) >= 1)
    paused = paused_job(dataset)  # the sweep's job, held still while the others try
    try:
        checks_while_it_runs(dataset)
    finally:
        for pid in paused:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                continue
    out, err = first.communicate(timeout=600)
    assert first.returncode == 0, err[-2000:]
    assert (
        shards(dataset) == {e: ["attempt-1.parquet"] for e in shards(dataset)} and len(shards(dataset)) == 5
    )
    records = ledger.read(Dataset(dataset))
    assert not [r for r in records if isinstance(r, ledger.Failed)]
    ran = sorted(r.execution_id for r in records if isinstance(r, ledger.Started))
    assert ran == sorted(shards(dataset))  # each started once


def job_processes(dataset: Path) -> list[int]:
    """The processes of the jobs writing into ``dataset`` (their command lines name its folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            command = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if entry.name.isdigit() and str(dataset) in command and "submitit" in command:
            found.append(int(entry.name))
    return found


def _stopped(pid: int) -> bool:
    """Whether ``pid`` is a process held by SIGSTOP (not one that ended meanwhile)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
    except (OSError, IndexError):
        return False


def paused_job(dataset: Path) -> list[int]:
    """SIGSTOP the processes of the job the sweep runs now, so that it cannot move on: a job takes
    about a second at scale=ci, so one that ended between the look and the stop (or a moment between
    two jobs) is looked for again, until a stopped job process holds the sweep."""
    paused: list[int] = []

    def holds() -> bool:
        found = job_processes(dataset)
        for pid in found:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                continue
        if any(_stopped(pid) for pid in found):
            paused[:] = found
            return True
        return False

    wait_for(holds, timeout=60)
    return paused


def checks_while_it_runs(dataset: Path) -> None:
    status = cli("pipeline.status", str(dataset), "--json")
    states = {e["execution_id"]: e["state"] for e in json.loads(status.stdout)["executions"]}
    assert len(states) == 5 and "missing" not in states.values() and "failed" not in states.values(), states
    assert "pending" in states.values()  # claimed by the sweep and waiting in its job
    resubmit = cli("pipeline.resubmit", str(dataset))
    assert resubmit.returncode == 0 and "0 execution(s) resubmitted" in resubmit.stdout, resubmit.stdout
    second = cli("pipeline.run", "--multirun", *FIVE, f"dataset_dir={dataset}")
    assert second.returncode == 2, second.stdout
    (line,) = second.stderr.strip().splitlines()
    assert line.startswith("pipeline.run: nothing was launched; ")
    assert "claimed as attempt 1 by sweep" in line or " in job " in line, line
    resumed = cli("pipeline.run", "--multirun", "--resume", *FIVE, f"dataset_dir={dataset}")
    assert resumed.returncode == 0, resumed.stderr
    assert "nothing to run" in resumed.stdout


@pytest.mark.slow
def test_two_sweeps_started_together_run_nothing_twice(tmp_path):
    dataset = tmp_path / "dataset"
    overrides = ("workload=inference-ep8-f1536", "variant=mok-bf16,dist-moe-bf16", "scale=ci")
    both = [sweep(dataset, *overrides), sweep(dataset, *overrides)]
    ends = [p.communicate(timeout=600) for p in both]
    codes = sorted(p.returncode for p in both)
    assert codes in ([0, 2], [2, 2]), ends  # one runs and the other refuses (or both refuse)
    for (_, err), p in zip(ends, both, strict=True):
        if p.returncode == 2:
            assert "nothing was launched; " in err and "Traceback" not in err
    records = ledger.read(Dataset(dataset))
    ran = [r.execution_id for r in records if isinstance(r, ledger.Started)]
    assert len(ran) == len(set(ran))  # nothing ran twice
    assert all(len(names) == 1 for names in shards(dataset).values())
    # each sweep has a Hydra folder of its own (named by its process), and a refused one removes it
    folders = [f.name for f in (dataset / "hydra").iterdir()] if (dataset / "hydra").is_dir() else []
    ran_ok = [p.pid for p in both if p.returncode == 0]
    assert [f.rsplit("-", 1)[1] for f in folders] == [str(pid) for pid in ran_ok]


def _race(path: str, payload: bytes, go, results) -> None:
    go.wait()
    try:
        atomic_write(path, payload, exclusive=True)
        results.put(payload)
    except FileExistsError:
        results.put(b"")


@pytest.mark.slow
def test_of_writers_racing_for_one_name_exactly_one_wins(tmp_path):
    """Eight processes write one shard name at once: one succeeds, the file holds its bytes whole,
    and no temporary file is left."""
    context = multiprocessing.get_context("spawn")
    go, results = context.Event(), context.Queue()
    path = tmp_path / "attempt-1.parquet"
    payloads = [bytes([i]) * 1_000_000 for i in range(8)]
    workers = [context.Process(target=_race, args=(str(path), p, go, results)) for p in payloads]
    for w in workers:
        w.start()
    go.set()
    won = [r for r in (results.get(timeout=60) for _ in workers) if r]
    for w in workers:
        w.join(timeout=60)
    assert len(won) == 1 and path.read_bytes() == won[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["attempt-1.parquet"]


def _claim(root: str, go, results) -> None:
    go.wait()
    results.put(
        claims.take(Dataset(root), "inference-ep8-f1536-bf16-mok-native", 1, claims.Owner.this_process())
    )


def test_an_attempt_is_claimed_once_and_its_owner_lives_as_long_as_its_sweep(tmp_path):
    context = multiprocessing.get_context("spawn")
    go, results = context.Event(), context.Queue()
    workers = [context.Process(target=_claim, args=(str(tmp_path), go, results)) for _ in range(6)]
    for w in workers:
        w.start()
    go.set()
    taken = [results.get(timeout=60) for _ in workers]
    for w in workers:
        w.join(timeout=60)
    assert taken.count(True) == 1
    dataset = Dataset(tmp_path)
    claim = claims.newest(dataset, "inference-ep8-f1536-bf16-mok-native")
    assert claim is not None and claim.attempt == 1
    assert not claims.alive(dataset, claim.owner)  # its process has ended (and it kept no heartbeat)
    me = claims.Owner.this_process()
    assert not claims.alive(dataset, me)  # no heartbeat: no sweep of mine is running
    with claims.Heartbeat(dataset, me.sweep):
        assert claims.alive(dataset, me)
    assert not claims.alive(dataset, me)  # the sweep ended
    # an owner on another host lives while its heartbeat is fresh; a copied heartbeat does not revive it
    other = claims.Owner("1-elsewhere-7", "elsewhere", 7, 1, "boot")
    beat = dataset.owners_dir / f"{other.sweep}.json"
    beat.write_text(json.dumps({"at": time.time()}))
    assert claims.alive(dataset, other)
    assert not claims.alive(dataset, other, now=time.time() + claims.STALE_S + 1)
    beat.write_text(json.dumps({"at": time.time() - claims.STALE_S - 1}))
    os.utime(beat)  # a fresh modification time, as a copy gets
    assert not claims.alive(dataset, other)


@pytest.mark.slow
def test_a_local_job_dies_with_a_sweep_killed_outright(tmp_path):
    """SIGKILL of the sweep (which can neither stop nor record its job): the job's processes are
    gone within seconds, and status then calls the attempt failed, not running."""
    dataset = tmp_path / "dataset"
    first = sweep(dataset, "workload=packing-ep32-f3072-profile-a", "variant=mok-bf16", "scale=ci")
    wait_for(lambda: (dataset / "ledger").is_dir() and started(dataset) >= 1)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=60)

    def job_processes() -> list[int]:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and str(dataset) in (entry / "cmdline").read_bytes().decode(
                    errors="replace"
                ):
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    wait_for(lambda: not job_processes(), timeout=30)
    status = cli("pipeline.status", str(dataset))
    assert "running" not in status.stdout.split()[0] and "ended without a result" in status.stdout
