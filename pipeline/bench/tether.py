"""A local job dies with the sweep that started it.

On the local backend the sweep process answers for its jobs (:mod:`pipeline.launch.local`): on
SIGINT or SIGTERM it kills the running job and records it. A sweep killed with SIGKILL can do
neither, and its job (submitit's controller and the ranks under it) would run on without anyone to
collect it, still writing into the dataset. So every rank of a local job watches the sweep, its
controller's parent, named by pid and start time (a reused pid is another process), and when the
sweep is gone kills the controller and then itself. A Slurm job has the scheduler to answer for it
and is not tethered.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from pipeline.data.claims import process_start

POLL_S = 0.5


def tether() -> threading.Thread | None:
    """Watch this rank's sweep from a daemon thread; None when there is nothing to watch (the sweep
    is gone already, or this process was not started by a local job's controller)."""
    controller = os.getppid()
    sweep = _parent(controller)
    started = None if sweep is None else process_start(sweep)
    if sweep is None or started is None or sweep <= 1:
        return None
    thread = threading.Thread(target=_watch, args=(controller, sweep, started), name="tether", daemon=True)
    thread.start()
    return thread


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _watch(controller: int, sweep: int, started: int) -> None:
    while process_start(sweep) == started:
        threading.Event().wait(POLL_S)
    for pid in (controller, os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
