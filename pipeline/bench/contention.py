"""How much CPU the timing thread was denied while an execution was timed: the share of its runnable
time it spent waiting for a core.

On a CPU each rank's thread keeps a core busy; anything else runnable on its cores time-slices with
it, which the windows cannot tell apart from the work. The kernel keeps scheduler statistics per
thread (``/proc/thread-self/schedstat``: nanoseconds on a CPU, then nanoseconds runnable on a run
queue without one). Over the timing windows, wait / (run + wait) of the thread that runs and times
the steps is the fraction of its runnable time lost to other threads: on a quiet two-core host with
two gloo ranks 0.1 to 0.2 (the ranks' own gloo threads), with three busy processes per core beside
them above 0.6. Above ``OVERSUBSCRIBED`` (the windows' CPU work stretched by more than 1.5x) the
execution ran on an oversubscribed host. (A count of the machine's runnable processes,
``procs_running``, flags a quiet host too: the gloo threads and the counting thread are runnable
beside the ranks.) Elsewhere (no schedstat) nothing is known.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pipeline.data.meta import Contention

SCHEDSTAT = Path("/proc/thread-self/schedstat")
# The share of runnable time spent waiting above which an execution counts as oversubscribed: the
# windows' CPU work stretched by more than 1.5x.
OVERSUBSCRIBED = 1 / 3


def scheduled() -> tuple[int, int] | None:
    """The calling thread's (ns on a CPU, ns waiting for one) so far, or None where unknown."""
    try:
        run, wait = SCHEDSTAT.read_text().split()[:2]
    except (OSError, ValueError):
        return None
    return int(run), int(wait)


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@dataclass
class Sampler:
    """The calling thread's scheduler statistics when the block began and when it ended."""

    start: tuple[int, int] | None
    end: tuple[int, int] | None = None

    def wait_share(self) -> float | None:
        """wait / (run + wait) over the block, or None without statistics or time on a run queue."""
        if self.start is None or self.end is None:
            return None
        run, wait = self.end[0] - self.start[0], self.end[1] - self.start[1]
        return wait / (run + wait) if run + wait > 0 else None


@contextmanager
def sampled() -> Iterator[Sampler]:
    """Read the calling thread's scheduler statistics before and after the block."""
    sampler = Sampler(scheduled())
    try:
        yield sampler
    finally:
        sampler.end = scheduled()


def contention(per_rank: list[float | None], ranks_per_host: int) -> Contention:
    """The execution's record: the most denied rank's wait share, and whether that was oversubscribed."""
    known = [r for r in per_rank if r is not None]
    worst = max(known) if known else None
    return Contention(
        cores=cores(),
        ranks_per_host=ranks_per_host,
        cpu_wait_share=worst,
        oversubscribed=None if worst is None else worst > OVERSUBSCRIBED,
    )
