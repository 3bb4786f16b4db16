"""Join the execution's ``torch.distributed`` group from submitit's job environment.

One process per rank: NCCL with one GPU each when the execution runs on CUDA, gloo on CPUs. Rank 0
opens the group's store on a port the system picks (so two jobs on one host never ask for the same
one) and writes its address into the attempt's log folder, which every task of a submitit job shares
(on any node); the other ranks read it there and connect.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import submitit
import torch
import torch.distributed as dist

from pipeline.base.vocabulary import DEVICES
from pipeline.data.atomic import atomic_write

POLL_S = 0.05  # how often a rank looks for rank 0's address


@dataclass(frozen=True)
class Context:
    """Where this process sits in its execution."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    job_id: str
    hostname: str
    collective: str  # the process group's backend: nccl on GPUs, gloo on CPUs
    store: dist.Store | None = None  # the job's store: the group's rendezvous, and its ranks' agreement
    timeout_s: float = 0.0


def resolve_device(preference: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``."""
    if preference not in DEVICES:
        raise ValueError(f"device {preference!r}; allowed: {', '.join(DEVICES)}")
    if preference == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but no CUDA device is visible; allowed here: cpu, auto")
    if preference == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return preference


def cpu_threads(ranks_per_node: int) -> int:
    """A CPU rank's threads: its share of the node's cores, and no more than the CPUs Slurm gave its
    task (SLURM_CPUS_PER_TASK): nodes of one host may advertise more CPUs than it has, and threads
    beyond a rank's cores would time-slice with the other ranks' and dominate the timings."""
    share = max(1, (os.cpu_count() or 1) // ranks_per_node)
    given = os.environ.get("SLURM_CPUS_PER_TASK", "")
    return min(share, int(given)) if given.isdigit() and int(given) > 0 else share


def init(device: str, timeout_s: float, folder: Path, attempt: int) -> Context:
    """Initialize the default process group of this job's tasks and pick this rank's device;
    ``folder`` (the attempt's log folder) is where rank 0 leaves the group's address, named by the
    job and the ``attempt`` (a requeued job keeps its id and its folder, not its attempt)."""
    env = submitit.JobEnvironment()
    kind = resolve_device(device)
    if kind == "cuda":
        torch.cuda.set_device(env.local_rank)
        target = torch.device("cuda", env.local_rank)
    else:
        target = torch.device("cpu")
        torch.set_num_threads(cpu_threads(env.num_tasks // env.num_nodes))
    collective = "nccl" if kind == "cuda" else "gloo"
    store = _store(env, folder / f".rendezvous-{env.job_id}-{attempt}", timeout_s)
    _join(collective, store, 0, env.global_rank, env.num_tasks, timeout_s)
    return Context(
        rank=env.global_rank,
        world_size=env.num_tasks,
        local_rank=env.local_rank,
        device=target,
        job_id=env.job_id,
        hostname=env.hostnames[env.node],  # the scheduler's node name: nodes may share a machine
        collective=collective,
        store=store,
        timeout_s=timeout_s,
    )


def _join(collective: str, store: dist.Store, round_: int, rank: int, ranks: int, timeout_s: float) -> None:
    """Join the default process group of round ``round_`` (a prefix of the job's store: a group
    rebuilt after a failure never meets the keys of the one before)."""
    dist.init_process_group(
        backend=collective,
        store=dist.PrefixStore(f"group-{round_}", store),
        rank=rank,
        world_size=ranks,
        timeout=timedelta(seconds=timeout_s),
    )


def abort() -> None:
    """Break the default process group at once (an error on this rank): the other ranks' pending and
    next collectives on it fail instead of waiting for this one (gloo closes its connections; NCCL
    aborts its communicators)."""
    if not dist.is_initialized():
        return
    aborting = getattr(dist.distributed_c10d, "_abort_process_group", None)
    try:
        if aborting is not None and dist.get_backend() == "nccl":
            aborting()
        else:
            dist.destroy_process_group()
    except Exception:  # broken already: nothing is left to break
        return


def rejoin(ctx: Context, round_: int) -> None:
    """Every rank, after a failure the ranks agreed on: a fresh default process group (round
    ``round_``), the broken one left behind."""
    with contextlib.suppress(Exception):
        if dist.is_initialized():
            dist.destroy_process_group()
    assert ctx.store is not None
    _join(ctx.collective, ctx.store, round_, ctx.rank, ctx.world_size, ctx.timeout_s)


def _store(env: submitit.JobEnvironment, address: Path, timeout_s: float) -> dist.TCPStore:
    """The group's store: rank 0 serves it on a free port and writes ``host:port`` to ``address``;
    every other rank waits for that file (up to ``timeout_s``) and connects."""
    timeout = timedelta(seconds=timeout_s)
    if env.global_rank == 0:
        host = "127.0.0.1" if env.num_nodes == 1 else env.hostnames[0]
        store = dist.TCPStore(host, 0, env.num_tasks, True, timeout=timeout, wait_for_workers=False)
        atomic_write(address, f"{host}:{store.port}")
        return store
    deadline = time.monotonic() + timeout_s
    while not address.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"rank 0 of job {env.job_id} left no address in {address} within {timeout_s:g} s"
            )
        time.sleep(POLL_S)
    host, port = address.read_text().rsplit(":", 1)
    return dist.TCPStore(host, int(port), env.num_tasks, False, timeout=timeout)


def close() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
