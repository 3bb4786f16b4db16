"""Run a command in isolation: its own session, a time limit, and every process it started killed
at that limit. Torch-free, for the device run's runner as for the kernel checks.

A CUDA kernel that hangs cannot be interrupted from inside its process (an mbarrier wait has no
timeout), and one that faults poisons its CUDA context for every later call, so each check runs in a
process of its own and is killed from outside. Killing only the child is not enough: what it started
(a stage's per-kernel children, pytest's workers, a grandchild in a process group or session of its
own, or one whose parent has exited) would live on holding the GPU. So the child leads a new session
and carries a mark of its own in its environment, which everything it starts inherits; at the limit,
or when the child exits, every process of that session, every descendant of those, and every
process carrying the mark gets SIGKILL. Output goes to a file, never a pipe, so a process left
holding it cannot keep the caller waiting past the limit. Given a fork server
(:mod:`cutlass_kernels.forkserver`), a ``python -m`` child is forked from it, torch already imported:
its descendants carry the mark as ever, the child itself (whose environment as the kernel shows it is
the server's) is found as its session's leader.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:  # the server kills with kill_tree: only the annotations are the other way
    from cutlass_kernels.forkserver import Forked, ForkServer

REAP_S = 5.0  # the longest wait for a killed child to be reaped
_MARK = "CUTLASS_KERNELS_ISOLATED_"  # + a fresh hex id per run: nested runs keep every mark


@dataclass(frozen=True)
class Isolated:
    """How an isolated run ended: its exit status (None: killed at its limit), its output (when
    captured) and its wall time."""

    rc: int | None
    output: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.rc is None

    def why(self, limit: float, lines: int = 3) -> str:
        """One line saying how it failed: the timeout, or the exit status and its last output lines."""
        if self.rc is None:
            return f"timed out after {limit:.0f} s (hang?); every process it started was killed"
        tail = " | ".join(self.output.strip().splitlines()[-lines:])
        return f"exit status {self.rc}: {tail}"[:600]


def run_isolated(
    argv: Sequence[str],
    limit: float,
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    log: IO[str] | None = None,
    server: ForkServer | None = None,
) -> Isolated:
    """Run ``argv`` as the leader of a new session for at most ``limit`` seconds, then kill what is
    left of it. Its output (stdout and stderr together) goes to ``log`` where given, else it is
    captured and returned. Forked from ``server`` where it takes the command."""
    mark = f"{_MARK}{uuid.uuid4().hex}"
    child_env = {**(os.environ if env is None else env), mark: "1"}
    start = time.monotonic()
    with tempfile.TemporaryFile("w+") if log is None else _kept(log) as sink:
        proc: subprocess.Popen[bytes] | Forked | None = None
        if server is not None:
            proc = server.spawn(argv, child_env, cwd, sink)
        if proc is None:
            proc = subprocess.Popen(
                list(argv),
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=child_env,
                cwd=cwd,
                start_new_session=True,
            )
        rc: int | None
        try:
            rc = proc.wait(timeout=max(limit, 0.1))
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid, mark)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=REAP_S)  # SIGKILLed: only a process stuck in the kernel outlives this
            rc = None
        except BaseException:  # the caller interrupted (a signal): nothing it started outlives it
            kill_tree(proc.pid, mark)
            raise
        kill_tree(proc.pid, mark)  # what an exited child left running
        output = ""
        if log is None:
            sink.seek(0)
            output = sink.read()
    return Isolated(rc, output, time.monotonic() - start)


class _kept:
    """``log`` as a context manager that leaves it open."""

    def __init__(self, log: IO[str]) -> None:
        self.log = log

    def __enter__(self) -> IO[str]:
        self.log.flush()
        return self.log

    def __exit__(self, *exc: object) -> None:
        self.log.flush()


def kill_tree(sid: int, mark: str | None = None) -> list[int]:
    """SIGKILL every process of session ``sid``, every descendant of those, and every process whose
    environment holds ``mark``, from one snapshot of the process table (taken before any kill, so no
    parent link is lost); the pids killed."""
    table = _processes()
    doomed = {pid for pid, (_, session) in table.items() if session == sid}
    if mark is not None:
        doomed |= {pid for pid in table if pid != os.getpid() and _marked(pid, mark)}
    grew = True
    while grew:
        more = {pid for pid, (parent, _) in table.items() if parent in doomed} - doomed
        doomed |= more
        grew = bool(more)
    killed = []
    for pid in sorted(doomed):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except (ProcessLookupError, PermissionError):
            continue
    return killed


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id) of every process this user can see."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses
        fields = stat[stat.rindex(")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), int(fields[3]))
    return table


def _marked(pid: int, mark: str) -> bool:
    try:
        return f"\0{mark}=".encode() in b"\0" + Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
