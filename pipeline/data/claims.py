"""Who writes an execution's next attempt: claims, and whether their owners live.

A sweep owns its executions from before their intent is recorded until it ends: it **claims** an
attempt of each (``claims/<execution_id>/attempt-<n>.json``, created exclusively, so of two writers
racing for one attempt exactly one gets it, and the loser takes the next number or leaves the
execution to the winner) and keeps a **heartbeat** while it lives. A claim whose owner lives and whose
attempt has not ended is the execution's writer: status shows it pending until its job starts, and no
other sweep, resubmission or ``--resume`` takes it. A claim of an owner that is gone is history.

Whether an owner lives: its heartbeat must be there (a sweep removes it as it ends) and, on its own
host, its process must live (pid and start time, against this boot: a stopped process lives).
Elsewhere the heartbeat must be younger than :data:`STALE_S`, or, for a sweep that has gone silent (a
stalled file system, a suspended shell), the heartbeat of one of its local jobs, which rank 0 of each
such job keeps beside its sweep's (``<sweep>.job-<job id>.json``): a sweep whose job still runs still
owns what it claimed. The heartbeat holds the time it was written, not only a modification time, so
a copied dataset does not bring its owners back to life.

A dataset is untrusted input, its claims and heartbeats too: names read from them are plain names
(:func:`~pipeline.data.dataset.safe_name`), only regular files are opened (without following a link,
and without blocking on a FIFO), a heartbeat dated more than :data:`SKEW_S` ahead of this host's
clock is no heartbeat, attempt numbers are bounded (:data:`~pipeline.data.dataset.MAX_ATTEMPT`), and
what is not a claim is named by :func:`unreadable` and otherwise left alone. Nothing read is executed.
"""

from __future__ import annotations

import functools
import json
import math
import os
import socket
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.base.printable import printable
from pipeline.data.atomic import atomic_write
from pipeline.data.codec import RecordError, decode, encode
from pipeline.data.dataset import CLAIMS as CLAIMS_NAME
from pipeline.data.dataset import MAX_ATTEMPT, Dataset, check_attempt, parse_attempt, safe_name

HEARTBEAT_S = 5.0  # how often a live owner rewrites its heartbeat
STALE_S = 30.0  # a heartbeat older than this (six beats missed) is an owner that is gone
SKEW_S = 30.0  # how far another host's clock may run ahead: a heartbeat dated later is no heartbeat
_SMALL = 64 * 1024  # a claim or a heartbeat is a few hundred bytes: a bigger file is none
_JOB = ".job-"  # <sweep>.job-<job id>: the heartbeat of one of a sweep's local jobs


@functools.cache
def boot_id() -> str:
    """This host's boot id (a process's pid and start time name it within one boot)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot (None when it does not exist or
    is a zombie): with the pid and the boot, it names one process for good."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return None if fields[0] == "Z" else int(fields[19])


def _one_line(value: str, what: str, longest: int = 255) -> None:
    if not value or len(value) > longest or printable(value) != value:
        shown = printable(value)[:80]
        raise ValueError(f"{what} '{shown}' is not a plain line of at most {longest} characters")


@dataclass(frozen=True)
class Owner:
    """One writer of a dataset: a sweep's process (or a resubmission's)."""

    sweep: str  # <start ns>-<host>-<pid>: unique, and sortable by when the sweep began
    host: str
    pid: int
    started: int  # the process's start in clock ticks since boot (a reused pid is another process)
    boot: str  # the host's boot id

    def __post_init__(self) -> None:
        safe_name(self.sweep, "sweep")  # it names the heartbeat's file
        _one_line(self.host, "host")
        if not 1 <= self.pid < 2**31 or self.started < 0:
            raise ValueError(f"pid {self.pid} or start {self.started} is no process's")
        if self.boot:
            _one_line(self.boot, "boot id", 64)

    @classmethod
    def this_process(cls) -> Owner:
        host, pid = socket.gethostname(), os.getpid()
        return cls(f"{time.time_ns()}-{host}-{pid}", host, pid, process_start(pid) or 0, boot_id())

    def describe(self) -> str:
        return f"sweep {self.sweep} (pid {self.pid} on {self.host})"


@dataclass(frozen=True)
class Claim:
    """``owner`` writes ``attempt`` of ``execution_id``."""

    execution_id: str
    attempt: int
    owner: Owner
    at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        safe_name(self.execution_id, "execution id")
        check_attempt(self.attempt)


def job_beat_name(sweep: str, job_id: str) -> str:
    """The name of the heartbeat that a local job of ``sweep`` keeps: ``<sweep>.job-<job id>``."""
    return f"{sweep}{_JOB}{job_id}"


def _beat_path(dataset: Dataset, name: str) -> Path:
    return dataset.owners_dir / f"{safe_name(name, 'heartbeat')}.json"


def _small_file(path: Path) -> str | None:
    """The text of ``path`` when it is a small regular file, else None: opened without following a
    link and without blocking (a FIFO put there opens at once and is then refused)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _SMALL:
            return None
        return os.read(fd, _SMALL + 1).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def beat_time(dataset: Dataset, name: str) -> float | None:
    """When the heartbeat ``name`` was written, as it says; None where there is none, or what is there
    is no heartbeat (not a regular file, not JSON, no finite time, a folder that leads out)."""
    if not dataset.inside(dataset.owners_dir):
        return None
    text = _small_file(_beat_path(dataset, name))
    try:
        at = json.loads(text)["at"] if text is not None else None
    except (ValueError, KeyError, TypeError):
        return None
    if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at):
        return None
    return float(at)


def fresh(at: float | None, now: float) -> bool:
    """Whether a heartbeat written at ``at`` is fresh at ``now``: younger than :data:`STALE_S`, and not
    dated more than :data:`SKEW_S` ahead (a time from the future is forged or from a broken clock)."""
    return at is not None and -SKEW_S <= now - at < STALE_S


@dataclass(frozen=True)
class Life:
    """Whether an owner lives, and on what word: ``silent_since`` (its own last heartbeat, None if
    none is readable) and ``job`` are set when it lives only by a heartbeat of that job of it."""

    alive: bool
    silent_since: float | None = None
    job: str | None = None

    def describe(self) -> str:
        """``silent since <time>, its job J still alive`` for a silent owner; empty otherwise."""
        if not self.alive or self.job is None:
            return ""
        since = "ever" if self.silent_since is None else _clock(self.silent_since)
        return f"silent since {since}, its job {self.job} still alive"


def _clock(at: float) -> str:
    """``at`` as a UTC time; a time no clock can read (a forged 1e300) as the number it is."""
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))
    except (OverflowError, OSError, ValueError):
        return f"{at:g} (no time)"


def life(dataset: Dataset, owner: Owner, now: float | None = None) -> Life:
    """Whether ``owner``'s sweep still runs: its heartbeat is there (a sweep that ended removed it)
    and, on its own host, its process lives; elsewhere the heartbeat is fresh, or one of its local
    jobs' heartbeats is (a sweep gone silent whose job still runs)."""
    now = time.time() if now is None else now
    own = beat_time(dataset, owner.sweep)
    if owner.host == socket.gethostname() and owner.boot == boot_id():
        return Life(own is not None and process_start(owner.pid) == owner.started)
    if fresh(own, now):
        return Life(True)
    if dataset.inside(dataset.owners_dir) and dataset.owners_dir.is_dir():
        for path in sorted(dataset.owners_dir.glob(f"{owner.sweep}{_JOB}*.json")):
            if fresh(beat_time(dataset, path.stem), now):
                return Life(True, own, path.stem.removeprefix(f"{owner.sweep}{_JOB}"))
    return Life(False)


def alive(dataset: Dataset, owner: Owner, now: float | None = None) -> bool:
    """Whether ``owner``'s sweep still runs (:func:`life`)."""
    return life(dataset, owner, now).alive


def job_alive(dataset: Dataset, sweep: str, job_id: str, now: float | None = None) -> bool:
    """Whether the local job ``job_id`` of ``sweep`` beats: how another host knows it still runs."""
    try:
        name = job_beat_name(sweep, job_id)
        return fresh(beat_time(dataset, name), time.time() if now is None else now)
    except ValueError:  # a sweep or job that names no file
        return False


class Heartbeat:
    """A live writer's heartbeat ``name`` in ``dataset`` (a sweep's own name, or
    :func:`job_beat_name` for one of its jobs), rewritten every :data:`HEARTBEAT_S` from a daemon
    thread while the context is open, and removed when it closes (the writer is then gone at once).
    Opening it refuses (ValueError) where ``claims/.owners`` is no folder inside the dataset."""

    def __init__(self, dataset: Dataset, name: str) -> None:
        self.dataset, self.path = dataset, _beat_path(dataset, name)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)

    def __enter__(self) -> Heartbeat:
        self.dataset.check_folder(self.dataset.owners_dir)
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
    writer holds that attempt already (exclusive creation: exactly one of racing writers wins). A
    ValueError where the execution's claims folder is a file or a link out of the dataset."""
    claim = Claim(execution_id, attempt, owner)
    dataset.check_folder(dataset.claim_dir(execution_id))
    try:
        atomic_write(dataset.claim_path(execution_id, attempt), json.dumps(encode(claim)), exclusive=True)
    except FileExistsError:
        return False
    return True


def release(dataset: Dataset, claim: Claim) -> None:
    """Give back an attempt that was never submitted (a sweep that refused after claiming)."""
    dataset.claim_path(claim.execution_id, claim.attempt).unlink(missing_ok=True)


def _numbered(dataset: Dataset, execution_id: str) -> list[tuple[int, Path]]:
    """The entries of the execution's claims folder named as claims, highest attempt first (none
    where the folder is not a directory inside the dataset)."""
    folder = dataset.claim_dir(execution_id)
    if not folder.is_dir() or not dataset.inside(folder):
        return []
    found = ((n, p) for p in folder.iterdir() if (n := parse_attempt(p.name, ".json")) is not None)
    return sorted(found, reverse=True)


def newest(dataset: Dataset, execution_id: str) -> Claim | None:
    """The highest-numbered readable claim of ``execution_id``; unreadable claim files are no claim."""
    for _, path in _numbered(dataset, execution_id):
        if isinstance(claim := _read(path, execution_id), Claim):
            return claim
    return None


def highest_attempt(dataset: Dataset, execution_id: str) -> int:
    """The highest attempt number taken in ``execution_id``'s claims (0 for none): every file named as
    a claim counts, readable or not, since its name is taken."""
    return max((n for n, _ in _numbered(dataset, execution_id)), default=0)


def _read(path: Path, execution_id: str) -> Claim | str:
    """The claim in ``path`` (a file of ``execution_id``'s folder), or why it is none."""
    text = _small_file(path)
    if text is None:
        return "not a regular file of a claim's size"
    try:
        claim = decode(Claim, json.loads(text))
    except (ValueError, RecordError) as err:
        return f"not a claim ({printable(err)[:120]})"
    if (claim.execution_id, claim.attempt) != (execution_id, parse_attempt(path.name, ".json")):
        return f"names attempt {claim.attempt} of {claim.execution_id}, not its own"
    return claim


def unreadable(dataset: Dataset) -> list[tuple[str, str]]:
    """Every entry of ``claims/`` that is not what the layout keeps there (a folder of plain-named
    claims per execution, heartbeats in ``.owners``), by its dataset-relative path, with why: each is
    named by ``status`` and otherwise left alone, none is followed out of the dataset."""
    root = dataset.claims_dir
    if not os.path.lexists(root):
        return []
    if (why := _not_a_folder(dataset, root)) is not None:
        return [(CLAIMS_NAME, f"{why}: no claim is read")]
    found: list[tuple[str, str]] = []
    for entry in sorted(root.iterdir()):
        where = f"{CLAIMS_NAME}/{entry.name}"
        if entry.name == dataset.owners_dir.name:
            if (why := _not_a_folder(dataset, entry)) is not None:
                found.append((where, f"{why}: no heartbeat is read"))
                continue
            found += [
                (f"{where}/{path.name}", "not a regular file: no heartbeat")
                for path in sorted(entry.iterdir())
                if not stat.S_ISREG(path.lstat().st_mode)
            ]
            continue
        try:
            safe_name(entry.name, "execution id")
        except ValueError:
            found.append((where, "not an execution's name: no claim is read"))
            continue
        if (why := _not_a_folder(dataset, entry)) is not None:
            found.append((where, f"{why}: no claim is read"))
            continue
        for path in sorted(entry.iterdir()):
            if parse_attempt(path.name, ".json") is None:
                if not path.name.startswith("."):  # hidden: a claim being written
                    found.append(
                        (f"{where}/{path.name}", f"not named attempt-<n>.json, n at most {MAX_ATTEMPT:,}")
                    )
                continue
            if isinstance(why_not := _read(path, entry.name), str):
                found.append((f"{where}/{path.name}", why_not))
    return found


def _not_a_folder(dataset: Dataset, path: Path) -> str | None:
    """Why ``path`` is not a folder inside the dataset, or None when it is one."""
    if not dataset.inside(path):
        return "a link out of the dataset"
    return None if path.is_dir() else "not a folder"
