"""A local job's processes live and die together: with the sweep that started it, with its
controller, and with each other.

On the local backend the sweep process answers for its jobs (:mod:`pipeline.launch.local`): on
SIGINT or SIGTERM it kills the running job and records it. A sweep killed with SIGKILL can do
neither, and its job (submitit's controller and the ranks under it) would run on without anyone to
collect it, still writing into the dataset; a controller killed with SIGKILL (the job id ``status``
prints is its pid) would leave its ranks running as orphans beside the sweep's next job. So every
rank of a local job watches the sweep, its controller's parent, and the controller, each named by pid
and start time (a reused pid is another process): when the sweep is gone it kills the controller and
then itself, when the controller is gone it kills itself. A Slurm job has the scheduler to answer for
it and is not tethered.

And the ranks of one job watch each other (:class:`Peers`, on any backend, those on one host): a rank
that dies (killed, out of memory) leaves the others waiting in a collective until the execution's
deadline, so each rank's watchdog (:mod:`pipeline.bench.group`) asks every poll whether its peers
still live, and a dead one ends the execution at once, naming the rank.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

import torch.distributed as dist

from pipeline.data.claims import boot_id, process_start

POLL_S = 0.5


def tether() -> threading.Thread | None:
    """Watch this rank's sweep and controller from a daemon thread; None when there is nothing to
    watch (the sweep is gone already, or this process was not started by a local job's controller)."""
    controller = os.getppid()
    sweep = _parent(controller)
    started = None if sweep is None else process_start(sweep)
    own = process_start(controller)
    if sweep is None or started is None or own is None or sweep <= 1:
        return None
    thread = threading.Thread(
        target=_watch, args=(controller, own, sweep, started), name="tether", daemon=True
    )
    thread.start()
    return thread


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _watch(controller: int, own: int, sweep: int, started: int) -> None:
    while process_start(sweep) == started and process_start(controller) == own:
        threading.Event().wait(POLL_S)
    ending = [controller, os.getpid()] if process_start(controller) == own else [os.getpid()]
    for pid in ending:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


@dataclass(frozen=True)
class Peer:
    """One rank of a job: where its process runs, and which process it is."""

    rank: int
    host: str
    boot: str
    pid: int
    started: int

    def here(self) -> bool:
        """Whether this host can see the rank's process (the same host, the same boot)."""
        return (self.host, self.boot) == (socket.gethostname(), boot_id())

    def gone(self) -> bool:
        """Whether the rank's process, on this host, no longer lives."""
        return self.here() and process_start(self.pid) != self.started


@dataclass(frozen=True)
class Peers:
    """The ranks of this rank's job, as each said through the job's store when the job began, and
    this rank's parent then (a local job's controller)."""

    rank: int
    ranks: tuple[Peer, ...]
    parent: tuple[int, int | None]  # pid and start of this rank's parent

    @classmethod
    def exchange(cls, store: dist.Store, rank: int, world_size: int) -> Peers:
        """Every rank's process, through the store (every rank calls this once, in its main thread)."""
        me = Peer(rank, socket.gethostname(), boot_id(), os.getpid(), process_start(os.getpid()) or 0)
        store.set(f"peer/{rank}", json.dumps([me.host, me.boot, me.pid, me.started]))
        keys = [f"peer/{r}" for r in range(world_size)]
        store.wait(keys)
        said = [json.loads(store.get(k)) for k in keys]
        parent = os.getppid()
        return cls(rank, tuple(Peer(r, *s) for r, s in enumerate(said)), (parent, process_start(parent)))

    def dead(self) -> Peer | None:
        """The first other rank of this host whose process is gone, or None (ranks on other hosts
        are not seen: a scheduler ends their step). None too once this rank's parent is gone: the
        whole job is ending (its controller was killed; :func:`tether` ends this rank), and no rank
        died on its own."""
        dead = next((p for p in self.ranks if p.rank != self.rank and p.gone()), None)
        # looked at after the peer: a rank its tether ended died after the controller that ended it
        return dead if dead is None or process_start(self.parent[0]) == self.parent[1] else None

    def says(self, dead: Peer) -> bool:
        """Whether this rank speaks for the job when ``dead`` died: the lowest rank not known gone."""
        living = [p.rank for p in self.ranks if p.rank == self.rank or not p.gone()]
        return min(living) == self.rank and dead.rank not in living
