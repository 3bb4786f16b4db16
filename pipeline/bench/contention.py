"""How crowded the host was while an execution was timed: runnable processes per core, sampled over
the timing windows.

On a CPU the ranks of one execution each keep a core busy (gloo spins while it waits); anything else
runnable on the same cores stretches their windows by time-slicing, which the windows cannot tell
apart from the work. Linux counts the runnable processes of the whole machine (``procs_running`` in
``/proc/stat``, the sampler's own process included); over the cores this process may run on, that is
1.0 when the ranks have the machine to themselves, and an execution whose median over its timing is
above ``OVERSUBSCRIBED`` ran on an oversubscribed host. Elsewhere (no ``/proc/stat``) nothing is known.
"""

from __future__ import annotations

import os
import statistics
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pipeline.data.meta import Contention

PROC_STAT = Path("/proc/stat")
SAMPLE_S = 0.05
# Runnable processes per core above which an execution counts as oversubscribed: more than half a
# core's worth of other work beside one busy rank per core.
OVERSUBSCRIBED = 1.5


def runnable() -> int | None:
    """Runnable processes on this machine now, or None where the kernel does not say."""
    try:
        text = PROC_STAT.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("procs_running "):
            return int(line.split()[1])
    return None


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass
class Sampler:
    """Samples :func:`runnable` every ``SAMPLE_S`` in a thread while it is open."""

    samples: list[int] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            count = runnable()
            if count is not None:
                self.samples.append(count)

    def per_core(self) -> float | None:
        """The median of the samples over this process's cores, or None without samples."""
        return statistics.median(self.samples) / cores() if self.samples else None


@contextmanager
def sampled() -> Iterator[Sampler]:
    """Sample runnable processes while the block runs."""
    sampler = Sampler()
    thread = threading.Thread(target=sampler._run, name="contention", daemon=True)
    thread.start()
    try:
        yield sampler
    finally:
        sampler._stop.set()
        thread.join()


def contention(per_rank: list[float | None], ranks_per_host: int) -> Contention:
    """The execution's record: the most crowded rank's host, and whether that was oversubscribed."""
    known = [r for r in per_rank if r is not None]
    worst = max(known) if known else None
    return Contention(
        cores=cores(),
        ranks_per_host=ranks_per_host,
        runnable_per_core=worst,
        oversubscribed=None if worst is None else worst > OVERSUBSCRIBED,
    )
