"""Join the execution's ``torch.distributed`` group from submitit's job environment.

One process per rank: NCCL with one GPU each when the execution runs on CUDA, gloo on CPUs. Rank 0
opens the group's store on a port the system picks (so two jobs on one host never ask for the same
one) and writes its address into the attempt's log folder, which every task of a submitit job shares
(on any node); the other ranks read it there and connect.

Each rank binds its GPU from what its task sees (:mod:`pipeline.bench.binding`: all of the node's
GPUs, its own one, or a site's list) before anything else, and says through the store which GPU that
is and its NCCL environment; two ranks on one GPU are refused there, in one line, before the process
group exists. NCCL's group is then created for that device (``device_id``), so its communicator is
built at once rather than at the first collective, and the ranks' :class:`~pipeline.data.topology.Topology`
(nodes, ranks per node, every rank's GPU, the NCCL environment) goes with the context, into every
shard of the job.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import submitit
import torch
import torch.distributed as dist

from pipeline.base.devices import resolve_device_on
from pipeline.bench.binding import bind, exclusive
from pipeline.data.atomic import atomic_write
from pipeline.data.topology import Binding, Topology

POLL_S = 0.05  # how often a rank looks for rank 0's address
NCCL_PREFIXES = ("NCCL_", "TORCH_NCCL_")  # the variables that steer NCCL or torch's use of it


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
    topology: Topology  # every rank's GPU, the nodes and ranks on each, the NCCL environment
    store: dist.Store | None = None  # the job's store: the group's rendezvous, and its ranks' agreement
    timeout_s: float = 0.0


def resolve_device(preference: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``; on the job's host
    (:func:`pipeline.base.devices.resolve_device_on`)."""
    return resolve_device_on(preference, torch.cuda.is_available())


def cpu_threads(ranks_per_node: int) -> int:
    """A CPU rank's threads: its share of the node's cores, and no more than the CPUs Slurm gave its
    task (SLURM_CPUS_PER_TASK) or the process's thread count where one is named (OMP_NUM_THREADS):
    nodes of one host may advertise more CPUs than it has, and threads beyond a rank's cores would
    time-slice with the other ranks' (or a shared host's other work) and dominate the timings."""
    share = max(1, (os.cpu_count() or 1) // ranks_per_node)
    for name in ("SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS"):
        given = os.environ.get(name, "")
        share = min(share, int(given)) if given.isdigit() and int(given) > 0 else share
    return share


def init(device: str, timeout_s: float, folder: Path, attempt: int) -> Context:
    """Initialize the default process group of this job's tasks and pick this rank's device;
    ``folder`` (the attempt's log folder) is where rank 0 leaves the group's address, named by the
    job and the ``attempt`` (a requeued job keeps its id and its folder, not its attempt)."""
    env = submitit.JobEnvironment()
    kind = resolve_device(device)
    hostname = env.hostnames[env.node]  # the scheduler's node name: nodes may share a machine
    mine = bind(env.global_rank, hostname, env.local_rank, kind == "cuda", dict(os.environ))
    if kind == "cpu":
        torch.set_num_threads(cpu_threads(env.num_tasks // env.num_nodes))
    collective = "nccl" if kind == "cuda" else "gloo"
    store = _store(env, folder / f".rendezvous-{env.job_id}-{attempt}", timeout_s)
    topology = exchange(store, mine, env.num_tasks)
    exclusive(topology.bindings)  # a timed execution: a GPU of its own per rank, else refused here
    target = torch.device(mine.device)
    _join(collective, store, 0, env.global_rank, env.num_tasks, timeout_s, target)
    return Context(
        rank=env.global_rank,
        world_size=env.num_tasks,
        local_rank=env.local_rank,
        device=target,
        job_id=env.job_id,
        hostname=hostname,
        collective=collective,
        store=store,
        timeout_s=timeout_s,
        topology=topology,
    )


def nccl_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that steer NCCL or torch's use of it, sorted by name."""
    return {k: environ[k] for k in sorted(environ) if k.startswith(NCCL_PREFIXES)}


def exchange(store: dist.Store, mine: Binding, ranks: int) -> Topology:
    """Every rank's binding and NCCL environment through the job's ``store`` (before any process
    group): the job's :class:`Topology`, the same on every rank."""
    said = {"binding": mine.to_json(), "nccl_env": nccl_environment(os.environ)}
    store.set(f"binding/{mine.rank}", json.dumps(said))
    keys = [f"binding/{r}" for r in range(ranks)]
    store.wait(keys)
    everyone = [json.loads(store.get(k)) for k in keys]
    bindings = [Binding.from_json(e["binding"]) for e in everyone]
    return Topology.of(bindings, [e["nccl_env"] for e in everyone])


def _join(
    collective: str,
    store: dist.Store,
    round_: int,
    rank: int,
    ranks: int,
    timeout_s: float,
    device: torch.device,
) -> None:
    """Join the default process group of round ``round_`` (a prefix of the job's store: a group
    rebuilt after a failure never meets the keys of the one before); NCCL's for ``device``, whose
    communicator it builds now."""
    dist.init_process_group(
        backend=collective,
        store=dist.PrefixStore(f"group-{round_}", store),
        rank=rank,
        world_size=ranks,
        timeout=timedelta(seconds=timeout_s),
        device_id=device if collective == "nccl" else None,
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
    _join(ctx.collective, ctx.store, round_, ctx.rank, ctx.world_size, ctx.timeout_s, ctx.device)


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
