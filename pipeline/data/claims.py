"""Who writes an execution's next attempt: claims, and whether their owners live.

A sweep owns its executions from before their intent is recorded until it ends: it **claims** an
attempt of each (``claims/<execution_id>/attempt-<n>.json``, created exclusively, so of two writers
racing for one attempt exactly one gets it, and the loser takes the next number or leaves the
execution to the winner) and keeps a **heartbeat** while it lives. A claim whose owner lives and whose
attempt has not ended is the execution's writer: status shows it pending until its job starts, and no
other sweep, resubmission or ``--resume`` takes it. A claim of an owner that is gone is history.

Whether an owner lives: its heartbeat must be there (a sweep removes it as it ends) and, on its own
host, its process must live (pid and start time, against this boot); elsewhere the heartbeat must be
younger than :data:`STALE_S`. The heartbeat holds the time it
was written, not only a modification time, so a copied dataset does not bring its owners back to
life. Everything here is read from files the project writes as JSON; nothing read is executed.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.data.atomic import atomic_write
from pipeline.data.codec import RecordError, decode, encode
from pipeline.data.dataset import Dataset, parse_attempt

HEARTBEAT_S = 5.0  # how often a live owner rewrites its heartbeat
STALE_S = 30.0  # a heartbeat older than this (six beats missed) is an owner that is gone


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (None when it does not exist or
    is a zombie): with the pid and the boot, it names one process for good."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else int(fields[19])


@dataclass(frozen=True)
class Owner:
    """One writer of a dataset: a sweep's process (or a resubmission's)."""

    sweep: str  # <start ns>-<host>-<pid>: unique, and sortable by when the sweep began
    host: str
    pid: int
    started: int  # the process's start in clock ticks since boot (a reused pid is another process)
    boot: str  # the host's boot id

    @classmethod
    def this_process(cls) -> Owner:
        host, pid = socket.gethostname(), os.getpid()
        return cls(f"{time.time_ns()}-{host}-{pid}", host, pid, process_start(pid) or 0, _boot_id())

    def describe(self) -> str:
        return f"sweep {self.sweep} (pid {self.pid} on {self.host})"


@dataclass(frozen=True)
class Claim:
    """``owner`` writes ``attempt`` of ``execution_id``."""

    execution_id: str
    attempt: int
    owner: Owner
    at: float = field(default_factory=time.time)


def _heartbeat_path(dataset: Dataset, owner: Owner) -> Path:
    return dataset.owners_dir / f"{owner.sweep}.json"


def alive(dataset: Dataset, owner: Owner, now: float | None = None) -> bool:
    """Whether ``owner``'s sweep still runs: its heartbeat is there (a sweep that ended removed it)
    and, on its own host, its process lives; elsewhere the heartbeat is fresh."""
    try:
        beat = json.loads(_heartbeat_path(dataset, owner).read_text())["at"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if owner.host == socket.gethostname() and owner.boot == _boot_id():
        return process_start(owner.pid) == owner.started
    return isinstance(beat, int | float) and (time.time() if now is None else now) - beat < STALE_S


class Heartbeat:
    """A live owner's heartbeat in ``dataset``, rewritten every :data:`HEARTBEAT_S` from a daemon
    thread while the context is open, and removed when it closes (the owner is then gone at once)."""

    def __init__(self, dataset: Dataset, owner: Owner) -> None:
        self.path, self.stop = _heartbeat_path(dataset, owner), threading.Event()
        self.thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._write()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=HEARTBEAT_S)
        self.path.unlink(missing_ok=True)

    def _write(self) -> None:
        atomic_write(self.path, json.dumps({"at": time.time()}))

    def _beat(self) -> None:
        while not self.stop.wait(HEARTBEAT_S):
            try:
                self._write()
            except OSError:  # a full or vanished disk: the owner goes stale, which is what it is
                continue


def take(dataset: Dataset, execution_id: str, attempt: int, owner: Owner) -> bool:
    """Claim ``attempt`` of ``execution_id`` for ``owner``: True when it is ours, False when another
    writer holds that attempt already (exclusive creation: exactly one of racing writers wins)."""
    claim = Claim(execution_id, attempt, owner)
    try:
        atomic_write(dataset.claim_path(execution_id, attempt), json.dumps(encode(claim)), exclusive=True)
    except FileExistsError:
        return False
    return True


def release(dataset: Dataset, claim: Claim) -> None:
    """Give back an attempt that was never submitted (a sweep that refused after claiming)."""
    dataset.claim_path(claim.execution_id, claim.attempt).unlink(missing_ok=True)


def newest(dataset: Dataset, execution_id: str) -> Claim | None:
    """The highest-numbered readable claim of ``execution_id``; unreadable claim files are no claim."""
    folder = dataset.claim_dir(execution_id)
    if not folder.is_dir():
        return None
    numbered = sorted(
        ((n, p) for p in folder.iterdir() if (n := parse_attempt(p.name, ".json")) is not None), reverse=True
    )
    for _, path in numbered:
        if (claim := _read(path)) is not None:
            return claim
    return None


def highest_attempt(dataset: Dataset, execution_id: str) -> int:
    """The highest attempt number claimed for ``execution_id`` (0 for none)."""
    folder = dataset.claim_dir(execution_id)
    if not folder.is_dir():
        return 0
    return max((n for p in folder.iterdir() if (n := parse_attempt(p.name, ".json")) is not None), default=0)


def _read(path: Path) -> Claim | None:
    try:
        if not path.is_file() or path.is_symlink():
            return None
        return decode(Claim, json.loads(path.read_text()))
    except (OSError, ValueError, RecordError):
        return None
